#include "core/capacity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/pool_load.hpp"

namespace kvrelay::capacity {

namespace {

// Σ over the ranks, saturating; nullopt when there is none or any is unknown.
std::optional<std::uint64_t> capacity_of(const std::expected<DeclaredRanks, std::string>& ranks) {
  if (!ranks || ranks->empty()) return std::nullopt;
  std::uint64_t sum = 0;
  for (const auto& [rank, blocks] : *ranks) {
    if (!blocks) return std::nullopt;
    sum = *blocks > std::numeric_limits<std::uint64_t>::max() - sum ? std::numeric_limits<std::uint64_t>::max()
                                                                    : sum + *blocks;
  }
  return sum;
}

}  // namespace

std::optional<std::uint64_t> declared_capacity(const std::map<std::uint64_t, RuntimeConfig>& runtime_configs) {
  return capacity_of(declared_ranks(runtime_configs));
}

std::uint64_t initial_bucket_count(const Sizing& sizing, std::optional<std::uint64_t> declared) {
  if (sizing.expected_blocks) return ckf::bucket_count_for(*sizing.expected_blocks).value();
  if (!declared) return ckf::bucket_count_for(sizing.fallback_blocks).value();
  const std::uint64_t blocks = std::min(*declared, ckf::kMaxExpectedBlocks);
  return std::clamp(ckf::bucket_count_for(std::max<std::uint64_t>(blocks, 1)).value(), kMinAutoBuckets, kMaxBuckets);
}

bool wants_growth(std::uint64_t bucket_count, std::uint64_t occupied_slots, std::uint64_t omitted_blocks,
                  double relayout_load) {
  if (bucket_count >= kMaxBuckets) return false;
  const auto slots = static_cast<double>(bucket_count * ckf::kSlotsPerBucket);
  return omitted_blocks > 0 || static_cast<double>(occupied_slots) > relayout_load * slots;
}

std::uint64_t grown_bucket_count(std::uint64_t bucket_count, std::uint64_t live_blocks) {
  const std::uint64_t needed =
      ckf::bucket_count_for(std::clamp<std::uint64_t>(live_blocks, 1, ckf::kMaxExpectedBlocks)).value();
  return std::min(std::max(bucket_count * 2, needed), kMaxBuckets);
}

std::uint64_t layout_live_blocks(std::uint64_t bucket_count, double relayout_load) {
  return static_cast<std::uint64_t>(relayout_load * static_cast<double>(bucket_count) *
                                    static_cast<double>(ckf::kSlotsPerBucket));
}

std::uint64_t pool_charge_bytes(std::uint64_t bucket_count, double relayout_load) {
  const std::uint64_t lane = bucket_count * sizeof(std::uint64_t);
  return 2 * lane + layout_live_blocks(bucket_count, relayout_load) * kBytesPerLiveBlock;
}

ExpectedBlocks expected_blocks(const std::map<std::uint64_t, RuntimeConfig>& runtime_configs,
                               std::uint64_t bucket_count, double relayout_load) {
  const auto ranks = declared_ranks(runtime_configs);
  const auto declared = capacity_of(ranks);
  if (!declared) return {};
  // Every figure times room / declared, at most 1, in integers.
  const std::uint64_t room = std::min(layout_live_blocks(bucket_count, relayout_load), kMaxExpectedTableBlocks);
  const auto scaled = [&](std::uint64_t blocks) {
    if (*declared <= room) return blocks;
    return static_cast<std::uint64_t>(static_cast<unsigned __int128>(blocks) * room / *declared);
  };
  ExpectedBlocks expected{scaled(*declared), {}};
  for (const auto& [rank, blocks] : *ranks) expected.per_source[{rank.worker_id, rank.dp_rank}] = scaled(*blocks);
  return expected;
}

std::optional<std::string> MemoryBudget::try_reserve(std::uint64_t bytes) {
  if (limit_ && (reserved_ > *limit_ || bytes > *limit_ - reserved_)) {
    return fmt::format("memory budget: needs {} bytes, {} of --memory-budget-bytes {} are left", bytes,
                       *limit_ - std::min(reserved_, *limit_), *limit_);
  }
  reserved_ += bytes;
  return std::nullopt;
}

std::optional<std::uint64_t> default_budget(std::optional<std::uint64_t> cgroup_limit_bytes) {
  if (!cgroup_limit_bytes) return std::nullopt;
  return *cgroup_limit_bytes / 5 * 4;
}

}  // namespace kvrelay::capacity
