#pragma once
// How big a pool's filter starts, when it grows, and what it costs
// (docs/protocol/capacity.md): sizing from the deployment's declared KV capacity, the slot
// load past which a pool re-lays out into twice the buckets, and the memory budget that
// materialization and growth are charged against. Pure arithmetic, no I/O.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/ckf.hpp"
#include "core/pool_sources.hpp"
#include "core/topology_model.hpp"

namespace kvrelay::capacity {

// Bounds of an automatically sized filter (docs/protocol/decisions.md#d34).
inline constexpr std::uint64_t kMinAutoBuckets = std::uint64_t{1} << 10;
inline constexpr std::uint64_t kMaxBuckets = ckf::kMaxBucketCount;
// What one live block costs beyond the filter (docs/protocol/pools.md#index-layout): its 10-byte
// owner slab entry, and a slot in the owner index (5 bytes) and in its source's lineage (13),
// tables rebuilt at 7/8 used to 7/10 live: 31-36 bytes. The budget charges the most, so a
// pool within its charge never takes more than it was granted, wherever its tables are in
// their growth.
inline constexpr std::uint64_t kBytesPerLiveBlock = 36;

struct Sizing {
  std::optional<std::uint64_t> expected_blocks;  // nullopt: from the declared capacity ("auto")
  std::uint64_t fallback_blocks = 1'048'576;     // auto, when the capacity is unknown
};

// Σ total_kv_blocks over the declared ranks of the workers, or nullopt when any rank's
// capacity is unknown (or the runtime configs declare no rank).
std::optional<std::uint64_t> declared_capacity(const std::map<std::uint64_t, RuntimeConfig>& runtime_configs);

// The first layout of a pool. A number keeps --expected-unique-blocks' meaning; auto sizes
// for the declared capacity within [kMinAutoBuckets, kMaxBuckets].
std::uint64_t initial_bucket_count(const Sizing& sizing, std::optional<std::uint64_t> declared);

// Whether a pool should re-lay out: its slot load passed `relayout_load`, or a live block
// is missing from the filter. Never past kMaxBuckets.
bool wants_growth(std::uint64_t bucket_count, std::uint64_t occupied_slots, std::uint64_t omitted_blocks,
                  double relayout_load);

// The layout a pool grows into: twice its buckets, or more when its live blocks need more
// (a flood into a small pool re-lays out once, not once per doubling). At most kMaxBuckets.
std::uint64_t grown_bucket_count(std::uint64_t bucket_count, std::uint64_t live_blocks);

// Live blocks a layout of `bucket_count` buckets holds before it re-lays out.
std::uint64_t layout_live_blocks(std::uint64_t bucket_count, double relayout_load);

// Bytes a pool with `bucket_count` buckets is charged: its bucket lane and one snapshot
// image of it, plus the lineage of as many live blocks as that layout holds before it
// re-lays out.
std::uint64_t pool_charge_bytes(std::uint64_t bucket_count, double relayout_load);

// What a pool's tables are made room for when it is created (docs/protocol/capacity.md#tables):
// its workers' declared KV capacity, the sum over the declared ranks for its owners and each
// rank's own for its source's lineage, scaled down together to what its layout is charged for
// and to kMaxExpectedTableBlocks. Nothing when the capacity is unknown.
inline constexpr std::uint64_t kMaxExpectedTableBlocks = std::uint64_t{1} << 22;
ExpectedBlocks expected_blocks(const std::map<std::uint64_t, RuntimeConfig>& runtime_configs,
                               std::uint64_t bucket_count, double relayout_load);

// The bytes every pool together may be charged. Owned by one actor (membership).
class MemoryBudget {
 public:
  explicit MemoryBudget(std::optional<std::uint64_t> limit_bytes) : limit_(limit_bytes) {}

  // Reserves `bytes`, or explains in one sentence why they do not fit.
  std::optional<std::string> try_reserve(std::uint64_t bytes);
  void release(std::uint64_t bytes) { reserved_ -= bytes < reserved_ ? bytes : reserved_; }

  std::optional<std::uint64_t> limit() const { return limit_; }
  std::uint64_t reserved() const { return reserved_; }

 private:
  std::optional<std::uint64_t> limit_;  // nullopt: no budget
  std::uint64_t reserved_ = 0;
};

// 80 % of a cgroup memory limit, the default budget; nullopt for no limit.
std::optional<std::uint64_t> default_budget(std::optional<std::uint64_t> cgroup_limit_bytes);

}  // namespace kvrelay::capacity
