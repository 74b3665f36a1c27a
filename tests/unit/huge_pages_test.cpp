// Large random-access arrays start on a huge page's boundary and are advised for transparent huge
// pages, and arrays of 64 KiB or more are mapped in before they are returned (core/huge_pages.hpp).
#include <sys/mman.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/ckf.hpp"
#include "core/huge_pages.hpp"
#include "core/probe_table.hpp"
#include "tests/skip.hpp"
#include "tests/unit/huge_page_advice.hpp"

using namespace kvrelay;
using test::advised;

TEST_CASE("a pool's filter words and index tables are advised for huge pages when large, small ones not", "[pool]") {
  if (!test::kernel_has_huge_pages()) KVRELAY_SKIP(test::kNoHugePages);
  const ckf::Filter large(std::uint64_t{1} << 22, ckf::kDefaultSeed, ckf::kDefaultMaxKicks);  // 32 MiB
  // All of it, from its first word to its last: it starts on a huge page's boundary.
  CHECK(reinterpret_cast<std::uintptr_t>(large.words().data()) % (std::uintptr_t{2} << 20) == 0);
  CHECK(advised(large.words().data()));
  CHECK(advised(&large.words().back()));
  const ckf::Filter small(std::uint64_t{1} << 17, ckf::kDefaultSeed, ckf::kDefaultMaxKicks);  // 1 MiB
  CHECK_FALSE(advised(small.words().data() + small.words().size() / 2));

  ProbeTable<std::uint64_t> table;  // grows past 4 MiB of slots
  for (std::uint64_t key = 1; key <= 600'000; ++key) {
    table.find_or_insert(
        mix_key(key), [&](std::uint64_t held) { return held == key; }, [&] { return key; },
        [&](auto emit) { table.for_each([&](std::size_t, std::uint64_t held) { emit(mix_key(held), held); }); });
  }
  CHECK(advised(&table.at(table.capacity() / 2)));
}

namespace {

// Whether every whole page inside [data, data + bytes) is mapped in (mincore).
bool resident(const void* data, std::size_t bytes) {
  constexpr std::uintptr_t kPage = 4096;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(kPage - 1);
  std::vector<unsigned char> pages((end - begin) / kPage);
  REQUIRE(mincore(reinterpret_cast<void*>(begin), end - begin, pages.data()) == 0);
  return std::all_of(pages.begin(), pages.end(), [](unsigned char page) { return (page & 1) != 0; });
}

// False on a kernel before 5.14: it has no MADV_POPULATE_WRITE.
bool kernel_populates() {
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  const bool supported = madvise(page, 4096, MADV_POPULATE_WRITE) == 0;
  munmap(page, 4096);
  return supported;
}

}  // namespace

TEST_CASE("random-access arrays of 64 KiB or more are mapped in before they are returned", "[pool]") {
  if (!kernel_populates()) KVRELAY_SKIP("this kernel cannot populate memory in advance");
  for (const std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{24} << 20}) {
    const auto array = make_random_access_array<std::uint8_t>(bytes);
    INFO(bytes << " bytes");
    CHECK(resident(array.get(), bytes));
  }
}
