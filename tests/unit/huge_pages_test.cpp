// Large random-access arrays start on a huge page's boundary and are advised for transparent huge
// pages (core/huge_pages.hpp).
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/ckf.hpp"
#include "core/huge_pages.hpp"
#include "core/probe_table.hpp"
#include "tests/unit/huge_page_advice.hpp"

using namespace kvrelay;
using test::advised;

TEST_CASE("a pool's filter words and index tables are advised for huge pages when large, small ones not", "[pool]") {
  if (!test::kernel_has_huge_pages()) return;
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
