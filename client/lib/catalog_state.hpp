#pragma once
// The consumer's catalog plane: the supported pools of the latest complete catalog snapshot,
// the quarantined ones, and the request-facing name index
// (docs/protocol/rpcs.md#watch-kv-pool-catalog, docs/protocol/rpcs.md#message-validation).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/lib/fault.hpp"
#include "core/wire_validation.hpp"

namespace kvrelay::client {

// What a request-facing name binds to: a canonical model id and its target. Two registrations
// are the same binding only if all of this is equal.
struct Binding {
  std::string canonical_model_id;
  std::string base_model;
  std::optional<std::string> adapter;  // set for a LoRA target: the token-hash salt
  friend auto operator<=>(const Binding&, const Binding&) = default;
};

struct CatalogPool {
  wire::ProducerKey producer;
  v1::KvPoolDescriptor descriptor;
};

struct QuarantinedPool {
  std::optional<wire::PoolKey> pool;  // absent when even the pool id is unsupported
  wire::Error error;
};

// The pools one name resolves to, all carrying the same binding.
struct Resolution {
  Binding binding;
  std::vector<wire::PoolKey> pools;
};

class CatalogState {
 public:
  // Validates `update` and, unless the whole message is unusable, replaces the view with it.
  // An unusable message (envelope, duplicate or unidentifiable pools, a revision going back,
  // other content under the installed revision) invalidates the plane and returns its error.
  Applied apply(const v1::KvPoolCatalogUpdate& update);
  void invalidate();

  bool valid() const { return valid_; }
  std::uint64_t revision() const { return revision_; }
  const std::map<wire::PoolKey, CatalogPool>& pools() const { return pools_; }
  const std::vector<QuarantinedPool>& quarantined() const { return quarantined_; }
  const CatalogPool* find(const wire::PoolKey& pool) const;

  // A canonical model id or alias. nullopt when unknown or when it names more than one
  // distinct binding (omitted fail-closed).
  std::optional<Resolution> resolve(std::string_view name) const;

 private:
  void index_names();

  bool valid_ = false;
  std::uint64_t revision_ = 0;
  v1::KvPoolCatalogUpdate installed_;  // as received, to tell a heartbeat from a changed snapshot
  std::map<wire::PoolKey, CatalogPool> pools_;
  std::vector<QuarantinedPool> quarantined_;
  std::map<std::string, std::optional<Resolution>, std::less<>> names_;  // nullopt = ambiguous
};

Binding binding_of(const v1::ModelRegistration& registration);

}  // namespace kvrelay::client
