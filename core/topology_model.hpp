#pragma once
// The DC-local facts the relay projects, after the card -> endpoint projection
// (docs/protocol/pools.md#membership-projection): who serves which model on which endpoint, in
// which roles, with which pool identity inputs. Pure data shared by membership,
// readiness, load and catalog code.
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvrelay {

struct EndpointKey {
  std::string ns;
  std::string component;
  std::string endpoint;
  // "namespace/component/endpoint", the order members are listed in.
  std::string display() const { return ns + "/" + component + "/" + endpoint; }
  // The same as one metric label value, with '%' and '/' inside a part written %25 and %2F, so
  // that no two endpoints share a label (docs/metrics.md#per-pool).
  std::string label() const;
  friend auto operator<=>(const EndpointKey&, const EndpointKey&) = default;
};

// Dynamo worker_type flags; exact values, never bit containment (Aggregated is not P + D).
enum class WorkerType : std::uint8_t { kPrefill = 1, kDecode = 2, kAggregated = 3, kEncode = 4 };

// Published role vocabulary; the numbers are the wire WorkerRole values and their order is
// the order every role list is sorted in: PREFILL < DECODE < ENCODE < AGGREGATED < LEGACY.
enum class Role : std::uint8_t { kPrefill = 1, kDecode = 2, kEncode = 3, kAggregated = 4, kLegacy = 5 };

// nullopt (a card without worker_type) is the legacy role.
Role role_of(std::optional<WorkerType> worker_type);

// Disjunctive normal form: any one inner list, all of its roles.
using Needs = std::vector<std::vector<WorkerType>>;

inline constexpr std::uint32_t kModelTypeLegacyPrefillBit = 1u << 4;

struct WorkerTopology {
  std::optional<WorkerType> worker_type;  // after legacy-prefill normalisation
  std::uint32_t model_type = 0;
  Needs needs;
  friend bool operator==(const WorkerTopology&, const WorkerTopology&) = default;
};

struct ModelTarget {
  std::string base_model;
  std::optional<std::string> adapter;  // the runtime LoRA name for a LoRA target
  friend auto operator<=>(const ModelTarget&, const ModelTarget&) = default;
};

struct Registration {
  std::string canonical_model_id;
  ModelTarget target;
  std::vector<std::string> aliases;  // sorted, unique, never the canonical id itself
  friend auto operator<=>(const Registration&, const Registration&) = default;
};

struct AdapterMembership {
  std::string base_model;
  std::string lora_name;                           // token-hash salt
  std::map<std::uint64_t, std::uint32_t> workers;  // worker id -> max_gpu_lora_count
  friend bool operator==(const AdapterMembership&, const AdapterMembership&) = default;
};

enum class ConflictScope : std::uint8_t {
  kServingBinding,       // only that binding is omitted
  kPoolMaterialization,  // no pool; topology unaffected
  kServingTopology,      // no pool, and the endpoint leaves the topology
};

struct Conflict {
  ConflictScope scope;
  std::string message;
  friend auto operator<=>(const Conflict&, const Conflict&) = default;
};

struct RuntimeConfig {
  std::optional<std::uint64_t> total_kv_blocks;  // per rank; 0 or absent = unknown
  std::uint32_t data_parallel_start_rank = 0;
  std::uint32_t data_parallel_size = 1;
  bool enable_eagle = false;
  std::optional<std::uint64_t> max_num_seqs;     // absent = undeclared (0 is a declared 0)
  std::optional<EndpointKey> kv_state_endpoint;  // absent = the serving endpoint
  friend bool operator==(const RuntimeConfig&, const RuntimeConfig&) = default;
};

}  // namespace kvrelay
