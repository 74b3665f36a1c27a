#pragma once
// One text page served over HTTP at GET `path`, from threads of its own until destroyed: the
// relay's /metrics and the demo's fake engine pages. It binds through cpp-httplib, IPv6
// included (the Prometheus exposer's civetweb, as Debian builds it, binds IPv4 only).
#include <atomic>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace kvrelay {

// The Prometheus text exposition format's content type, as both page kinds are served.
inline constexpr const char* kPrometheusTextType = "text/plain; version=0.0.4; charset=utf-8";

class PageServer {
 public:
  using Page = std::function<std::string()>;

  // Binds `host` (a name, an IPv4 address or an IPv6 one without brackets) and `port` (0: an
  // ephemeral one), or says why it cannot. `page` runs on the server's threads, once per GET.
  static std::expected<std::unique_ptr<PageServer>, std::string> start(const std::string& host, int port,
                                                                       std::string path, Page page,
                                                                       std::string content_type);
  ~PageServer();
  PageServer(const PageServer&) = delete;
  PageServer& operator=(const PageServer&) = delete;

  int port() const { return port_; }

 private:
  PageServer();

  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

// "host:port" split at its last colon, the host without IPv6 brackets; an error when the port is
// not a number from 0 to 65535.
struct HostPort {
  std::string host;
  int port = 0;
};
std::expected<HostPort, std::string> split_host_port(const std::string& address);

}  // namespace kvrelay
