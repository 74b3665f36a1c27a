#include "metrics/metrics.hpp"

#include <prometheus/text_serializer.h>

namespace kvrelay {

std::expected<std::unique_ptr<MetricsServer>, std::string> MetricsServer::start(
    const std::string& address, std::vector<std::weak_ptr<prometheus::Collectable>> collectables) {
  const auto bind = split_host_port(address);
  if (!bind) return std::unexpected(bind.error());
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->collectables_ = std::move(collectables);
  auto pages = PageServer::start(
      bind->host, bind->port, "/metrics", [raw = server.get()] { return raw->page(); }, kPrometheusTextType);
  if (!pages) return std::unexpected("cannot listen on " + address + ": " + pages.error());
  server->server_ = std::move(*pages);
  server->address_ = address.substr(0, address.rfind(':')) + ":" + std::to_string(server->server_->port());
  return server;
}

std::string MetricsServer::page() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables_) {
    if (const auto collectable = weak.lock()) {
      auto collected = collectable->Collect();
      families.insert(families.end(), std::make_move_iterator(collected.begin()),
                      std::make_move_iterator(collected.end()));
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvrelay
