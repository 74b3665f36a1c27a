#include "client/lib/load_state.hpp"

namespace kvrelay::client {

LoadWindow::LoadWindow(const v1::KvPoolLoadUpdate& update) {
  pools = usable_entries<wire::ProducerKey>(
      update.pools(), [](const auto& entry) { return wire::check_load_entry(entry); },
      [](const auto& entry) { return wire::producer_key(entry.producer()); }, quarantined);
}

}  // namespace kvrelay::client
