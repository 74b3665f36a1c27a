#include "core/pool_load.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace kvrelay {

namespace {

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

std::uint32_t saturate_u32(std::size_t n) {
  return static_cast<std::uint32_t>(std::min<std::size_t>(n, std::numeric_limits<std::uint32_t>::max()));
}

}  // namespace

std::expected<DeclaredRanks, std::string> declared_ranks(
    const std::map<std::uint64_t, RuntimeConfig>& runtime_configs) {
  DeclaredRanks declared;
  for (const auto& [worker_id, config] : runtime_configs) {
    const std::uint64_t size = config.data_parallel_size;
    if (size == 0 || size > kMaxLoadRanksPerWorker) {
      return std::unexpected(fmt::format("worker {} declares {} data-parallel ranks (1..{} allowed)", worker_id, size,
                                         kMaxLoadRanksPerWorker));
    }
    const std::uint64_t end = std::uint64_t{config.data_parallel_start_rank} + size;
    if (end - 1 > std::numeric_limits<std::uint32_t>::max()) {
      return std::unexpected(fmt::format("worker {} declares ranks beyond u32", worker_id));
    }
    std::optional<std::uint64_t> capacity;
    if (config.total_kv_blocks.value_or(0) != 0) capacity = config.total_kv_blocks;  // 0 = unknown
    for (std::uint64_t rank = config.data_parallel_start_rank; rank < end; ++rank) {
      declared[{worker_id, static_cast<std::uint32_t>(rank)}] = capacity;
    }
  }
  return declared;
}

std::expected<void, std::string> PoolLoad::set_capacity(const std::map<std::uint64_t, RuntimeConfig>& configs) {
  auto declared = declared_ranks(configs);
  if (!declared) {
    declared_.clear();
    observed_.clear();
    return std::unexpected(std::move(declared.error()));
  }
  if (*declared == declared_) return {};
  std::erase_if(observed_, [&](const auto& entry) {
    const auto before = declared_.find(entry.first);
    const auto after = declared->find(entry.first);
    return before == declared_.end() || after == declared->end() || before->second != after->second;
  });
  declared_ = std::move(*declared);
  return {};
}

bool PoolLoad::observe(RankKey rank, std::uint64_t kv_used_blocks) {
  if (!declared_.contains(rank)) return false;
  observed_[rank] = kv_used_blocks;
  return true;
}

PoolLoadSnapshot PoolLoad::snapshot() const {
  std::uint64_t used = 0;
  std::uint64_t capacity = 0;
  std::size_t capacity_ranks = 0;
  for (const auto& [rank, value] : observed_) used = saturating_add(used, value);
  for (const auto& [rank, cap] : declared_) {
    if (!cap) continue;
    ++capacity_ranks;
    capacity = saturating_add(capacity, *cap);
  }
  const std::size_t expected = declared_.size();
  const bool fully_observed = expected > 0 && observed_.size() == expected;
  const bool capacity_known = expected > 0 && capacity_ranks == expected;
  return {fully_observed ? used : 0, capacity_known ? capacity : 0, saturate_u32(observed_.size()),
          saturate_u32(expected)};
}

}  // namespace kvrelay
