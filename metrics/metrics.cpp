#include "metrics/metrics.hpp"

namespace kvrelay {

std::expected<std::unique_ptr<MetricsServer>, std::string> MetricsServer::start(
    const std::string& address, const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& error) {
    return std::unexpected("cannot listen on " + address + ": " + error.what());
  }
  const auto ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return std::unexpected("cannot listen on " + address);
  server->address_ = address.substr(0, address.rfind(':')) + ":" + std::to_string(ports.front());
  for (const auto& collectable : collectables) server->exposer_->RegisterCollectable(collectable);
  return server;
}

}  // namespace kvrelay
