#include "metrics/page_server.hpp"

#include <httplib.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <charconv>

#include "core/sigpipe_blocked.hpp"

namespace kvrelay {

PageServer::PageServer() : http_(std::make_unique<httplib::Server>()) {}

std::expected<std::unique_ptr<PageServer>, std::string> PageServer::start(const std::string& host, int port,
                                                                          std::string path, Page page,
                                                                          std::string content_type) {
  std::unique_ptr<PageServer> server(new PageServer());
  httplib::Server& http = *server->http_;
  // A connection holds a thread while it is read: one that sends nothing (a stalled client, a
  // TCP health check) gives it back after a second, as does an idle keep-alive connection, so
  // that such connections delay a scrape by a second at most, not by httplib's 5 s.
  http.new_task_queue = [] { return new httplib::ThreadPool(4); };
  http.set_read_timeout(1, 0);
  http.set_keep_alive_timeout(1);
  // SO_REUSEADDR, not httplib's default SO_REUSEPORT, with which a second process bound to a
  // taken port would start and share the first one's scrapes instead of failing
  // (docs/operations.md#startup).
  http.set_socket_options([](socket_t socket) {
    const int yes = 1;
    if (setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) != 0) {
      spdlog::warn("HTTP listener: SO_REUSEADDR not set (errno {}): a restart may wait for the old port", errno);
    }
  });
  http.Get(path, [page = std::move(page), content_type = std::move(content_type)](const httplib::Request&,
                                                                                  httplib::Response& response) {
    response.set_content(page(), content_type.c_str());
  });
  server->port_ = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (server->port_ < 0) return std::unexpected("cannot bind an HTTP port on " + host + ":" + std::to_string(port));
  server->thread_ = std::thread([raw = server.get()] {
    const SigpipeBlocked sigpipe_blocked;  // here and in the worker threads listening starts
    raw->http_->listen_after_bind();
    raw->stopped_ = true;
  });
  // httplib's stop() does nothing before its accept loop runs, so the destructor could
  // otherwise wait for ever: start returns once the loop is running (or over).
  while (!http.is_running() && !server->stopped_) std::this_thread::yield();
  return server;
}

PageServer::~PageServer() {
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

std::expected<HostPort, std::string> split_host_port(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return std::unexpected(address + " is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string_view port_text = std::string_view(address).substr(colon + 1);
  int port = -1;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc{} || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return std::unexpected(address + ": the port is not a number from 0 to 65535");
  }
  return HostPort{std::move(host), port};
}

}  // namespace kvrelay
