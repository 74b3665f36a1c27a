#include "core/network_address.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace kvrelay {

namespace {

std::optional<std::string> port_problem(std::string_view port) {
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  const bool digits =
      !port.empty() && std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || error != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    return fmt::format("port '{}' is not a number from 1 to 65535", port);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> host_port_problem(std::string_view authority, bool port_required) {
  // A bracketed IPv6 host holds colons of its own: the port's colon follows the bracket.
  const std::size_t host_end = authority.starts_with('[') ? authority.find(']') : authority.rfind(':');
  if (authority.starts_with('[') && host_end == std::string_view::npos) return "an IPv6 host has no closing ']'";
  const std::size_t colon = authority.starts_with('[') ? host_end + 1 : host_end;
  const std::string_view host = authority.substr(0, std::min(colon, authority.size()));
  if (host.empty() || host == "[]") return "names no host";
  if (colon >= authority.size()) {
    if (port_required) return "names no port";
    return std::nullopt;
  }
  if (authority[colon] != ':') return fmt::format("'{}' follows the host", authority.substr(colon));
  return port_problem(authority.substr(colon + 1));
}

}  // namespace kvrelay
