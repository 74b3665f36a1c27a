#include "client/lib/catalog_state.hpp"

#include <fmt/format.h>

#include "client/lib/snapshot_check.hpp"

namespace kvrelay::client {

Binding binding_of(const v1::ModelRegistration& registration) {
  const auto& target = registration.target();
  if (target.has_lora()) {
    return {registration.canonical_model_id(), target.lora().base_model(), target.lora().adapter()};
  }
  return {registration.canonical_model_id(), target.base().base_model(), std::nullopt};
}

Applied CatalogState::apply(const v1::KvPoolCatalogUpdate& update) {
  if (auto fault = check_revisioned(update, valid_ ? &installed_ : nullptr, "catalog")) {
    invalidate();
    return fault;
  }
  pools_.clear();
  quarantined_.clear();
  const auto& pools = update.snapshot().pools();
  for (int i = 0; i < pools.size(); ++i) {
    const auto& descriptor = pools[i];
    if (auto error = wire::check_pool_descriptor(descriptor, fmt::format("snapshot.pools[{}]", i))) {
      const auto& pool_id = descriptor.producer().pool_id();
      const bool keyed = !wire::check_pool_id(pool_id, "pool_id");
      quarantined_.push_back({keyed ? std::optional{wire::pool_key(pool_id)} : std::nullopt, std::move(*error)});
      continue;
    }
    const auto producer = wire::producer_key(descriptor.producer());
    pools_.emplace(producer.pool, CatalogPool{producer, descriptor});
  }
  valid_ = true;
  revision_ = update.revision();
  installed_ = update;
  index_names();
  return std::nullopt;
}

void CatalogState::invalidate() {
  valid_ = false;
  installed_.Clear();
  pools_.clear();
  quarantined_.clear();
  names_.clear();
}

const CatalogPool* CatalogState::find(const wire::PoolKey& pool) const {
  const auto it = pools_.find(pool);
  return it == pools_.end() ? nullptr : &it->second;
}

std::optional<Resolution> CatalogState::resolve(std::string_view name) const {
  const auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  return it->second;
}

// Every canonical id and alias maps to the pools registering it; a name seen with two
// different bindings is kept as ambiguous so that no later pool can make it resolve.
void CatalogState::index_names() {
  names_.clear();
  auto add = [this](const std::string& name, const Binding& binding, const wire::PoolKey& pool) {
    auto [it, inserted] = names_.try_emplace(name, Resolution{binding, {}});
    auto& resolution = it->second;
    if (!resolution) return;
    if (resolution->binding != binding) {
      resolution.reset();
      return;
    }
    if (resolution->pools.empty() || resolution->pools.back() != pool) resolution->pools.push_back(pool);
  };
  for (const auto& [key, pool] : pools_) {
    for (const auto& registration : pool.descriptor.registrations()) {
      const Binding binding = binding_of(registration);
      add(registration.canonical_model_id(), binding, key);
      for (const auto& alias : registration.aliases()) add(alias, binding, key);
    }
  }
}

}  // namespace kvrelay::client
