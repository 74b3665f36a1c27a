#pragma once
// The Prometheus endpoint: /metrics over HTTP, serving the relay's collectables
// (RelayMetrics::collectables()).
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <expected>
#include <memory>
#include <string>
#include <vector>

namespace kvrelay {

class MetricsServer {
 public:
  // Binds `address` ("host:port", port 0 = ephemeral) and serves /metrics.
  static std::expected<std::unique_ptr<MetricsServer>, std::string> start(
      const std::string& address, const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables);

  // host:port actually bound.
  const std::string& address() const { return address_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace kvrelay
