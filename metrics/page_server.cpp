#include "metrics/page_server.hpp"

#include <httplib.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

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
  errno = 0;  // a name that does not resolve sets none
  server->port_ = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (server->port_ < 0) return std::unexpected(errno != 0 ? std::strerror(errno) : "the host does not resolve");
  server->host_ = host;
  server->thread_ = std::thread([raw = server.get()] { raw->serve(); });
  // httplib's stop() does nothing before its accept loop runs, so the destructor could
  // otherwise wait for ever: start returns once the loop is running (or over).
  while (!http.is_running() && !server->stopped_) std::this_thread::yield();
  return server;
}

void PageServer::serve() {
  const SigpipeBlocked sigpipe_blocked;             // here and in the worker threads listening starts
  constexpr auto kPause = std::chrono::seconds(1);  // between attempts: no busy loop on a lasting error
  bool listening = true;
  for (;;) {
    if (listening) http_->listen_after_bind();
    const int error = errno;  // accept's, or bind's
    std::unique_lock lock(mutex_);
    if (stopping_) break;
    spdlog::error("HTTP listener {}:{}: {} ({}); binding it again in {} s", host_, port_,
                  listening ? "stopped accepting connections" : "cannot bind", std::strerror(error), kPause.count());
    if (stop_requested_.wait_for(lock, kPause, [this] { return stopping_; })) break;
    listening = http_->bind_to_port(host_, port_);
    if (listening) spdlog::info("HTTP listener {}:{}: listening again", host_, port_);
  }
  stopped_ = true;
}

PageServer::~PageServer() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_requested_.notify_all();
  // stop() acts only on a running accept loop, and the thread may be between binding again and
  // listening: it is asked until it is over.
  while (thread_.joinable() && !stopped_) {
    http_->stop();
    std::this_thread::yield();
  }
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
