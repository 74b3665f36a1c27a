#pragma once
// TCP ports on 127.0.0.1 for a test's listeners that nothing else can take first.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace kvrelay::test {

// Whether a TCP listener could bind `port` on 127.0.0.1 now.
inline bool bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return bound;
}

// The first port of the kernel's ephemeral range (what bind to port 0 and outgoing
// connections draw from).
inline int first_ephemeral_port() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  return low;
}

// A TCP port on 127.0.0.1 that nothing listens on now, never handed out before in this
// process, and below the ephemeral range: a port bound to 0 or an outgoing connection (the
// relay's own listeners and dials among them) cannot take it before the relay binds it, as
// they could take a port the kernel picked for a socket closed at once.
inline int free_port() {
  static std::mutex mutex;
  static std::set<int> handed_out;
  static std::mt19937 random{std::random_device{}()};
  const int ephemeral = first_ephemeral_port();
  INFO("the ephemeral port range starts at " << ephemeral << "; these tests need ports 10000 and up below it");
  REQUIRE(ephemeral > 11000);
  std::uniform_int_distribution<int> pick(10000, ephemeral - 1);
  std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(random);
    if (handed_out.contains(port) || !bindable(port)) continue;
    handed_out.insert(port);
    return port;
  }
  FAIL("no free TCP port below the ephemeral range");
  return 0;
}

}  // namespace kvrelay::test
