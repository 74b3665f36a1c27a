#include "app/cgroup_memory.hpp"

#include <charconv>
#include <fstream>
#include <sstream>

namespace kvrelay {

namespace {

// cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit value.
constexpr std::uint64_t kV1Unlimited = std::uint64_t{1} << 62;

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<std::uint64_t> parse_cgroup_limit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t bytes = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;  // "max"
  if (bytes == 0 || bytes >= kV1Unlimited) return std::nullopt;
  return bytes;
}

std::optional<std::uint64_t> cgroup_memory_limit(const std::string& root) {
  for (const char* file : {"/memory.max", "/memory/memory.limit_in_bytes"}) {
    if (const auto text = read_file(root + file)) return parse_cgroup_limit(*text);
  }
  return std::nullopt;
}

}  // namespace kvrelay
