#include "client/lib/serving_load_state.hpp"

namespace kvrelay::client {

ServingLoadWindow::ServingLoadWindow(const v1::ServingLoadUpdate& update) {
  pools = usable_entries<wire::ProducerKey>(
      update.pools(), [](const auto& pool) { return wire::check_pool_serving_load(pool); },
      [](const auto& pool) { return wire::producer_key(pool.producer()); }, quarantined);
  models = usable_entries<ServingModelKey>(
      update.models(), [](const auto& model) { return wire::check_model_serving_load(model); },
      [](const auto& model) {
        return ServingModelKey{model.namespace_(), model.canonical_model_id()};
      },
      quarantined);
}

}  // namespace kvrelay::client
