#pragma once
// The consumer's load plane: the latest complete KvPoolLoadUpdate window, keyed by producer.
// A gap or regression invalidates the plane and the stream is reopened (CKF state is unaffected).
#include "client/lib/window_state.hpp"

namespace kvrelay::client {

struct LoadWindow {
  LoadWindow() = default;
  explicit LoadWindow(const v1::KvPoolLoadUpdate& update);

  std::map<wire::ProducerKey, v1::KvPoolLoadEntry> pools;
  std::size_t quarantined = 0;  // entries that failed their check
};

using LoadState = WindowState<v1::KvPoolLoadUpdate, LoadWindow>;

}  // namespace kvrelay::client
