// The relay's programs allocate through tcmalloc (cmake/Allocator.cmake, docs/operations.md#memory),
// whose heap grows in huge pages (app/huge_page_heap.hpp); the AddressSanitizer build, which
// replaces malloc itself, has none of this.
#include <catch2/catch.hpp>

#ifdef KVRELAY_TCMALLOC

#include <gperftools/malloc_extension.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "app/huge_page_heap.hpp"
#include "tests/app/demo_topology.hpp"
#include "tests/app/process.hpp"
#include "tests/skip.hpp"
#include "tests/unit/huge_page_advice.hpp"

using namespace kvrelay::test;

namespace {

// The largest mapping of a process that is advised for huge pages, in bytes.
std::uintptr_t largest_advised_mapping(pid_t pid) {
  std::uintptr_t largest = 0;
  for_each_mapping(
      [&](std::uintptr_t begin, std::uintptr_t end, const std::string& flags) {
        if (flags.find(" hg") != std::string::npos) largest = std::max(largest, end - begin);
      },
      "/proc/" + std::to_string(pid) + "/smaps");
  return largest;
}

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

TEST_CASE("kv-relay grows its heap in huge pages unless --heap-huge-pages=off", "[allocator][binary]") {
  if (!kernel_has_huge_pages()) KVRELAY_SKIP(kNoHugePages);
  // The demo's pools, made before the relay is ready, grow the heap by a 4 MiB filter each. The
  // heap's reservations are 256 MiB; without them nothing of the relay is advised beyond filters.
  constexpr std::uintptr_t kReservation = std::uintptr_t{256} << 20;
  constexpr std::uintptr_t kFilterBytes = std::uintptr_t{4} << 20;  // the default 2^19 buckets
  const std::string topology = write_demo_topology("allocator-heap", fed_by_push);
  for (const bool huge : {true, false}) {
    INFO("--heap-huge-pages=" << (huge ? "on" : "off"));
    Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                               "--dc-id", "dc-heap", "--topology", topology, "--expected-unique-blocks", "1048576",
                               std::string("--heap-huge-pages=") + (huge ? "on" : "off")});
    REQUIRE_THAT(read_until(child.output, "ready: "), Catch::Contains("ready: "));
    const std::uintptr_t largest = largest_advised_mapping(child.pid);
    CHECK(largest >= kFilterBytes);  // the pools' filters, advised either way
    REQUIRE(kill(child.pid, SIGTERM) == 0);
    CHECK(wait_exit(child.pid) == 0);
    close(child.output);
    if (huge) {
      CHECK(largest >= kReservation);
    } else {
      CHECK(largest < kReservation);
    }
  }
}

TEST_CASE("a heap backed by huge pages refuses what no address space holds", "[allocator]") {
  REQUIRE(kvrelay::back_heap_with_huge_pages());
  for (const std::size_t bytes : {std::size_t{1} << 50, std::size_t{1} << 62, SIZE_MAX / 2 - (std::size_t{1} << 20)}) {
    INFO(bytes);
    volatile std::size_t asked = bytes;  // not known to the compiler, which would refuse it
    void* block = std::malloc(asked);
    CHECK(block == nullptr);
    std::free(block);
  }
  void* after = std::malloc(std::size_t{64} << 20);  // and serves what it can as before
  CHECK(after != nullptr);
  std::free(after);
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
