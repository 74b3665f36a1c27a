#include "metrics/metrics.hpp"

#include <prometheus/gauge.h>

namespace kvrelay {

std::expected<std::unique_ptr<MetricsServer>, std::string> MetricsServer::start(const std::string& address) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& error) {
    return std::unexpected("cannot listen on " + address + ": " + error.what());
  }
  const auto ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return std::unexpected("cannot listen on " + address);
  server->address_ = address.substr(0, address.rfind(':')) + ":" + std::to_string(ports.front());
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->exposer_->RegisterCollectable(server->registry_);
  prometheus::BuildGauge()
      .Name("kv_relay_build_info")
      .Help("kv-relay build information (always 1)")
      .Register(*server->registry_)
      .Add({{"version", KVRELAY_VERSION}})
      .Set(1);
  return server;
}

}  // namespace kvrelay
