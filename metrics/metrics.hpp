#pragma once
// The Prometheus endpoint: /metrics over HTTP, serving the relay's collectables
// (RelayMetrics::collectables()) in the text exposition format.
#include <prometheus/collectable.h>

#include <expected>
#include <memory>
#include <string>
#include <vector>

#include "metrics/page_server.hpp"

namespace kvrelay {

class MetricsServer {
 public:
  // Binds `address` ("host:port", an IPv6 host in brackets, port 0 = ephemeral) and serves
  // /metrics.
  static std::expected<std::unique_ptr<MetricsServer>, std::string> start(
      const std::string& address, std::vector<std::weak_ptr<prometheus::Collectable>> collectables);

  // host:port actually bound.
  const std::string& address() const { return address_; }

 private:
  MetricsServer() = default;
  std::string page() const;

  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<PageServer> server_;  // after collectables_: its threads read them until it stops
  std::string address_;
};

}  // namespace kvrelay
