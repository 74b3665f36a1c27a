// Filter sizing from the declared capacity, when a pool wants to grow and into what, what a
// layout is charged, and the budget those charges are held against.
#include <catch2/catch.hpp>

#include "core/capacity.hpp"

using namespace kvrelay;
using namespace kvrelay::capacity;

namespace {

RuntimeConfig ranks(std::uint32_t size, std::optional<std::uint64_t> blocks_per_rank) {
  RuntimeConfig config;
  config.data_parallel_size = size;
  config.total_kv_blocks = blocks_per_rank;
  return config;
}

}  // namespace

TEST_CASE("declared capacity sums total_kv_blocks over every declared rank", "[capacity]") {
  CHECK(declared_capacity({{1, ranks(2, 1000)}, {2, ranks(1, 500)}}) == 2500);
  CHECK_FALSE(declared_capacity({{1, ranks(2, 1000)}, {2, ranks(1, std::nullopt)}}).has_value());
  CHECK_FALSE(declared_capacity({{1, ranks(1, 0)}}).has_value());  // 0 is unknown
  CHECK_FALSE(declared_capacity({}).has_value());
}

TEST_CASE("auto sizing: 80 % slot load at the declared capacity, within [2^10, 2^24]", "[capacity]") {
  const Sizing automatic{std::nullopt, 1'048'576};
  CHECK(initial_bucket_count(automatic, 100'000) == 32768);  // 125 000 slots -> 31 250 buckets -> 2^15
  CHECK(initial_bucket_count(automatic, 10) == kMinAutoBuckets);
  CHECK(initial_bucket_count(automatic, std::uint64_t{1} << 40) == kMaxBuckets);
  CHECK(initial_bucket_count(automatic, std::nullopt) == 524288);  // the fallback: 1 310 720 slots -> 2^19
  const Sizing fixed{64, 1'048'576};  // a number keeps its meaning, below the auto floor too
  CHECK(initial_bucket_count(fixed, 100'000) == 32);
}

TEST_CASE("a pool wants to grow past the re-layout load or with an omitted block, below 2^24", "[capacity]") {
  CHECK_FALSE(wants_growth(1024, 3481, 0, 0.85));  // 3481 / 4096 = 0.8499
  CHECK(wants_growth(1024, 3482, 0, 0.85));
  CHECK(wants_growth(1024, 10, 1, 0.85));
  CHECK_FALSE(wants_growth(kMaxBuckets, kMaxBuckets * 4, 5, 0.85));
}

TEST_CASE("growth doubles the buckets, or jumps to what the live blocks need", "[capacity]") {
  CHECK(grown_bucket_count(1024, 3500) == 2048);
  CHECK(grown_bucket_count(32, 40'000) == 16384);  // 50 000 slots -> 12 500 buckets -> 2^14
  CHECK(grown_bucket_count(kMaxBuckets / 2, 1) == kMaxBuckets);
  CHECK(grown_bucket_count(kMaxBuckets / 2, ckf::kMaxExpectedBlocks * 2) == kMaxBuckets);
}

TEST_CASE("a layout is charged its lane twice and the lineage it can hold", "[capacity]") {
  // 1024 buckets: 8 KiB lane + one snapshot copy, 3481 live blocks at 0.85 of 4096 slots.
  CHECK(pool_charge_bytes(1024, 0.85) == 2 * 8192 + 3481 * kBytesPerLiveBlock);
  CHECK(pool_charge_bytes(2048, 0.85) > 2 * pool_charge_bytes(1024, 0.85) - 2 * kBytesPerLiveBlock);
}

TEST_CASE("the memory budget reserves what fits and explains what does not", "[capacity]") {
  MemoryBudget budget(1000);
  CHECK_FALSE(budget.try_reserve(600).has_value());
  const auto refusal = budget.try_reserve(500);
  REQUIRE(refusal.has_value());
  CHECK(*refusal == "memory budget: needs 500 bytes, 400 of --memory-budget-bytes 1000 are left");
  CHECK(budget.reserved() == 600);
  budget.release(600);
  CHECK_FALSE(budget.try_reserve(1000).has_value());

  MemoryBudget unlimited(std::nullopt);
  CHECK_FALSE(unlimited.try_reserve(std::uint64_t{1} << 50).has_value());
  CHECK(default_budget(std::uint64_t{10} << 30) == (std::uint64_t{8} << 30));
  CHECK_FALSE(default_budget(std::nullopt).has_value());
}

TEST_CASE("a pool's tables are made room for its declared capacity, within what its layout is charged",
          "[capacity][tables]") {
  // Worker 1's 2 ranks of 1 000 and worker 2's 1 of 500: 2 500 owners at most, each source's own.
  CHECK(expected_blocks({{1, ranks(2, 1000)}, {2, ranks(1, 500)}}, 1024, 0.85) ==
        ExpectedBlocks{2500, {{{1, 0}, 1000}, {{1, 1}, 1000}, {{2, 0}, 500}}});
  // A layout of 256 buckets holds 870 live blocks before it re-lays out: no more is reserved,
  // each source's share scaled down alike (870 / 2 500).
  CHECK(expected_blocks({{1, ranks(2, 1000)}, {2, ranks(1, 500)}}, 256, 0.85) ==
        ExpectedBlocks{870, {{{1, 0}, 348}, {{1, 1}, 348}, {{2, 0}, 174}}});
  // Nor more than 2^22 blocks, whatever the layout holds: half each for two ranks of 2^22.
  const std::uint64_t big = kMaxExpectedTableBlocks;
  CHECK(expected_blocks({{1, ranks(2, big)}}, big, 0.85) ==
        ExpectedBlocks{big, {{{1, 0}, big / 2}, {{1, 1}, big / 2}}});
  // An unknown capacity reserves nothing: the tables grow as blocks come.
  CHECK(expected_blocks({{1, ranks(2, 1000)}, {2, ranks(1, std::nullopt)}}, 1024, 0.85) == ExpectedBlocks{});
  CHECK(expected_blocks({}, 1024, 0.85) == ExpectedBlocks{});
}
