#pragma once
// The Prometheus endpoint (/metrics) and the registry every subsystem's metrics live in.
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <expected>
#include <memory>
#include <string>

namespace kvrelay {

class MetricsServer {
 public:
  // Binds `address` ("host:port", port 0 = ephemeral) and serves /metrics.
  static std::expected<std::unique_ptr<MetricsServer>, std::string> start(const std::string& address);

  const std::string& address() const { return address_; }
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::string address_;
};

}  // namespace kvrelay
