#pragma once
// A pool's KV event sources, and what a pool is expected to hold: shared by the pool index,
// which keeps a lineage per source, and the capacity arithmetic that sizes it.
#include <cstdint>
#include <map>

namespace kvrelay {

// One KV event source of a pool: a dp rank of one worker.
struct SourceKey {
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  friend bool operator==(const SourceKey&, const SourceKey&) = default;
  friend auto operator<=>(const SourceKey&, const SourceKey&) = default;
};

template <typename H>
H AbslHashValue(H state, const SourceKey& key) {
  return H::combine(std::move(state), key.worker_id, key.dp_rank);
}

// What a pool's tables are made room for (docs/protocol/capacity.md#tables): `unique` owners
// when the pool is made, and each listed source's lineage for its figure once that source's
// first event has been applied. Zero and empty: nothing, the tables grow as blocks come.
struct ExpectedBlocks {
  std::uint64_t unique = 0;
  std::map<SourceKey, std::uint64_t> per_source = {};
  friend bool operator==(const ExpectedBlocks&, const ExpectedBlocks&) = default;
};

}  // namespace kvrelay
