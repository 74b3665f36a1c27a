// The relay's programs allocate through tcmalloc (cmake/Allocator.cmake, docs/operations.md#memory),
// whose heap grows in huge pages (app/huge_page_heap.hpp); the AddressSanitizer build, which
// replaces malloc itself, has none of this.
#include <catch2/catch.hpp>

#ifdef KVRELAY_TCMALLOC

#include <gperftools/malloc_extension.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "app/huge_page_heap.hpp"
#include "tests/app/process.hpp"
#include "tests/skip.hpp"
#include "tests/unit/huge_page_advice.hpp"

using namespace kvrelay::test;

namespace {

std::size_t allocated_bytes() {
  std::size_t bytes = 0;
  REQUIRE(MallocExtension::instance()->GetNumericProperty("generic.current_allocated_bytes", &bytes));
  return bytes;
}

}  // namespace

TEST_CASE("kv-relay loads tcmalloc although it calls nothing of it by name", "[allocator]") {
  const auto [listing, status] = run_to_end("/usr/bin/ldd", {KVRELAY_BINARY});
  REQUIRE(status == 0);
  CHECK(listing.find("libtcmalloc_minimal.so.4 => ") != std::string::npos);
}

TEST_CASE("malloc and free in a relay program are tcmalloc's", "[allocator]") {
  constexpr std::size_t kBytes = std::size_t{16} << 20;
  const std::size_t before = allocated_bytes();
  void* block = std::malloc(kBytes);
  REQUIRE(block != nullptr);
  asm volatile("" : : "r"(block) : "memory");  // escapes, so the pair is not optimised away
  const std::size_t held = allocated_bytes();
  std::free(block);
  const std::size_t after = allocated_bytes();
  CHECK(held >= before + kBytes);
  CHECK(after + kBytes <= held);
}

TEST_CASE("memory the heap takes from the system once it is backed by huge pages is advised for them", "[allocator]") {
  if (!kernel_has_huge_pages()) KVRELAY_SKIP(kNoHugePages);
  REQUIRE(kvrelay::back_heap_with_huge_pages());
  // Each larger than anything a fresh process holds free, so tcmalloc takes it from the system:
  // the first from a reservation of its own, the second larger than a whole reservation.
  for (const std::size_t bytes : {std::size_t{96} << 20, std::size_t{300} << 20}) {
    auto* block = static_cast<unsigned char*>(std::malloc(bytes));
    REQUIRE(block != nullptr);
    std::memset(block, 1, 4096);  // writable at both ends
    std::memset(block + bytes - 4096, 2, 4096);
    CHECK(advised(block));
    CHECK(advised(block + bytes - 1));
    std::free(block);
  }
}

TEST_CASE("a heap backed by huge pages serves many small allocations as before", "[allocator]") {
  REQUIRE(kvrelay::back_heap_with_huge_pages());
  std::vector<std::unique_ptr<std::uint64_t[]>> blocks;
  for (std::uint64_t i = 0; i < 200'000; ++i) {  // 48 MiB in all: the heap grows many times
    blocks.push_back(std::make_unique<std::uint64_t[]>(32));
    blocks.back()[0] = i;
    blocks.back()[31] = ~i;
  }
  for (std::uint64_t i = 0; i < blocks.size(); ++i) {
    REQUIRE(blocks[i][0] == i);
    REQUIRE(blocks[i][31] == ~i);
  }
  if (kernel_has_huge_pages()) CHECK(advised(blocks.back().get()));  // from memory the heap grew by
}

#endif
