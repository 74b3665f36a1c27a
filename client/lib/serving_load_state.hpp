#pragma once
// The consumer's serving-load plane: the latest complete ServingLoadUpdate window, its pools
// keyed by producer and its models by (namespace, canonical_model_id). Windows follow the same
// rules as the load plane's; an entry that fails its check (docs/protocol/rpcs.md#validate-load)
// is quarantined, so a gauge present in the plane is set exactly when its status is COMPLETE.
#include <string>
#include <utility>

#include "client/lib/window_state.hpp"

namespace kvrelay::client {

using ServingModelKey = std::pair<std::string, std::string>;  // (namespace, canonical_model_id)

struct ServingLoadWindow {
  ServingLoadWindow() = default;
  explicit ServingLoadWindow(const v1::ServingLoadUpdate& update);

  std::map<wire::ProducerKey, v1::PoolServingLoad> pools;
  std::map<ServingModelKey, v1::ModelServingLoad> models;
  std::size_t quarantined = 0;  // pools and models that failed their check
};

using ServingLoadState = WindowState<v1::ServingLoadUpdate, ServingLoadWindow>;

}  // namespace kvrelay::client
