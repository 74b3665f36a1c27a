#pragma once
// KV occupancy of one pool generation (docs/protocol/load.md#pool-load): the ranks
// its workers declare, each rank's capacity, the latest kv_used_blocks per rank, and the
// aggregate a load window publishes. Sums saturate; partial coverage is never zero load.
#include <cstdint>
#include <expected>
#include <map>
#include <string>
#include <vector>

#include "core/topology_model.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay {

namespace v1 = ::dynamo::kvrelay::v1;

inline constexpr std::uint32_t kMaxLoadRanksPerWorker = 4096;

struct RankKey {
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  friend auto operator<=>(const RankKey&, const RankKey&) = default;
};

struct PoolLoadSnapshot {
  std::uint64_t kv_used_blocks = 0;   // 0 unless every declared rank has reported
  std::uint64_t total_kv_blocks = 0;  // 0 unless every declared rank has a known capacity
  std::uint32_t observed_ranks = 0;
  std::uint32_t expected_ranks = 0;
  friend bool operator==(const PoolLoadSnapshot&, const PoolLoadSnapshot&) = default;
};

// One active pool generation, as membership knows it: what its load and serving load depend on.
struct PoolFacts {
  EndpointKey endpoint;  // the serving endpoint; its namespace keys the pool's models
  v1::ProducerIdentity producer;
  std::map<std::uint64_t, RuntimeConfig> runtime_configs;  // the endpoint's workers with a valid card
  std::vector<std::string> models;                         // canonical ids of its base and LoRA registrations
  // The generation this layout continues: equal across the pool's re-layouts, which keep its
  // lineage and sources (and so its load observations); new with every other generation.
  std::uint64_t lineage = 0;
};

// Declared ranks and their capacity (nullopt = unknown) from the workers' runtime configs.
using DeclaredRanks = std::map<RankKey, std::optional<std::uint64_t>>;
std::expected<DeclaredRanks, std::string> declared_ranks(const std::map<std::uint64_t, RuntimeConfig>& runtime_configs);

class PoolLoad {
 public:
  // Keeps only the observations of ranks whose capacity is unchanged. An invalid
  // configuration clears capacity and observations (an empty-coverage entry).
  std::expected<void, std::string> set_capacity(const std::map<std::uint64_t, RuntimeConfig>& configs);

  // false for a rank the pool does not declare (the report is ignored).
  bool observe(RankKey rank, std::uint64_t kv_used_blocks);
  void clear_observations() { observed_.clear(); }
  // The worker's ranks have no observation until it reports again.
  void forget_worker(std::uint64_t worker_id) {
    std::erase_if(observed_, [&](const auto& entry) { return entry.first.worker_id == worker_id; });
  }

  PoolLoadSnapshot snapshot() const;

 private:
  DeclaredRanks declared_;
  std::map<RankKey, std::uint64_t> observed_;
};

}  // namespace kvrelay
