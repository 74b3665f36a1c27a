// The relay's programs allocate through tcmalloc (cmake/Allocator.cmake, docs/operations.md#memory);
// the AddressSanitizer build, which replaces malloc itself, has none of this.
#include <catch2/catch.hpp>

#ifdef KVRELAY_TCMALLOC

#include <gperftools/malloc_extension.h>

#include <cstdlib>
#include <string>

#include "tests/app/process.hpp"

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

#endif
