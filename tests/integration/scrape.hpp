#pragma once
// /metrics as the integration tests read it (docs/metrics.md): one scrape of a relay's
// listener, parsed into its samples.
#include <catch2/catch.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "metrics/page_server.hpp"
#include "tests/integration/harness.hpp"

namespace kvrelay::test {

using Labels = std::map<std::string, std::string>;

// A TCP connection to "host:port" (the caller closes it).
inline int connect_to(const std::string& address) {
  const auto bind = split_host_port(address);
  REQUIRE(bind.has_value());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  REQUIRE(getaddrinfo(bind->host.c_str(), std::to_string(bind->port).c_str(), &hints, &found) == 0);
  const int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  REQUIRE(connected);
  return fd;
}

// GET `path` over a plain socket; HTTP/1.0, so the server closes the connection when done.
inline std::string http_get(const std::string& address, const std::string& path) {
  const int fd = connect_to(address);
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  REQUIRE(send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[16384];
  for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
  close(fd);
  const bool ok = response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200");
  INFO(response.substr(0, 200));
  REQUIRE(ok);
  return response.substr(response.find("\r\n\r\n") + 4);
}

// The samples of one scrape in the text exposition format: name{labels} value.
class Scrape {
 public:
  explicit Scrape(const std::string& text) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(start, end - start);
      if (!line.empty() && line[0] != '#') parse_sample(line);
      start = end + 1;
    }
  }

  // The sample `name` with exactly `labels`, if present.
  std::optional<double> value(const std::string& name, const Labels& labels = {}) const {
    const auto it = samples_.find({name, labels});
    if (it == samples_.end()) return std::nullopt;
    return it->second;
  }
  // The sample's value, 0 when absent (a series created lazily has not been touched yet).
  double count(const std::string& name, const Labels& labels = {}) const { return value(name, labels).value_or(0); }

  std::vector<Labels> series(const std::string& name) const {
    std::vector<Labels> found;
    for (const auto& [key, value] : samples_) {
      if (key.first == name) found.push_back(key.second);
    }
    return found;
  }

 private:
  void parse_sample(const std::string& line) {
    std::size_t at = line.find_first_of("{ ");
    const std::string name = line.substr(0, at);
    Labels labels;
    if (line[at] == '{') {
      ++at;
      while (line[at] != '}') {
        const std::size_t equals = line.find('=', at);
        const std::string key = line.substr(at, equals - at);
        std::string value;
        for (at = equals + 2; line[at] != '"'; ++at) {
          if (line[at] == '\\') ++at;  // our label values never need more than \" and \\ .
          value += line[at];
        }
        labels[key] = value;
        at += line[at + 1] == ',' ? 2 : 1;
      }
      ++at;
    }
    samples_[{name, labels}] = std::strtod(line.c_str() + at + 1, nullptr);
  }

  std::map<std::pair<std::string, Labels>, double> samples_;
};

inline Scrape scrape(TestRelay& relay) { return Scrape(http_get(relay.runtime().metrics_address(), "/metrics")); }

// For values an actor publishes on its own schedule: scrapes until `holds`, for up to 30 s.
inline Scrape scrape_until(TestRelay& relay, const std::function<bool(const Scrape&)>& holds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Scrape last = scrape(relay);
  while (!holds(last) && std::chrono::steady_clock::now() < deadline) last = scrape(relay);
  return last;
}

}  // namespace kvrelay::test
