#pragma once
// One text page served over HTTP at GET `path`, from threads of its own until destroyed: the
// relay's /metrics and the demo's fake engine pages. It binds through cpp-httplib, IPv6
// included (the Prometheus exposer's civetweb, as Debian builds it, binds IPv4 only).
// httplib gives up listening on any accept error but EMFILE (a client's pending network error
// included); the page server binds its port again and goes on, so /metrics does not vanish
// from a relay that otherwise serves.
#include <atomic>
#include <condition_variable>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
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
  // ephemeral one), or gives the system's reason it cannot. `page` runs on the server's threads, once per GET.
  static std::expected<std::unique_ptr<PageServer>, std::string> start(const std::string& host, int port,
                                                                       std::string path, Page page,
                                                                       std::string content_type);
  ~PageServer();
  PageServer(const PageServer&) = delete;
  PageServer& operator=(const PageServer&) = delete;

  int port() const { return port_; }

 private:
  PageServer();
  void serve();  // the listening thread, until the destructor stops it

  std::unique_ptr<httplib::Server> http_;
  std::string host_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable stop_requested_;
  bool stopping_ = false;  // guarded by mutex_
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
