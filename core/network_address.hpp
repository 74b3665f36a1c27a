#pragma once
// The host:port part of the addresses workers declare (a ZeroMQ tcp:// endpoint, an engine
// metrics http:// URL), checked before a socket library sees it: libzmq refuses a tcp address
// without a numeric port by throwing, and cpp-httplib converts the port with std::stoi.
#include <optional>
#include <string>
#include <string_view>

namespace kvrelay {

// Why `authority` is not "host:port" (or just "host" when the port is optional), or nullopt.
// The host is a name, an IPv4 address or a bracketed IPv6 one; the port is 1 to 65535 in
// decimal digits.
std::optional<std::string> host_port_problem(std::string_view authority, bool port_required);

}  // namespace kvrelay
