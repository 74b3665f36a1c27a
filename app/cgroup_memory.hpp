#pragma once
// The memory limit of the cgroup the relay runs in, the default memory budget's base
// (docs/protocol/capacity.md#budget). cgroup v2 (memory.max) first, then v1
// (memory/memory.limit_in_bytes); "max" or v1's near-2^63 "unlimited" mean no limit.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvrelay {

// One limit file's text: the limit in bytes, or nullopt for none (or unreadable text).
std::optional<std::uint64_t> parse_cgroup_limit(std::string_view text);

// Reads the limit below `root` (normally /sys/fs/cgroup); nullopt when there is none.
std::optional<std::uint64_t> cgroup_memory_limit(const std::string& root = "/sys/fs/cgroup");

}  // namespace kvrelay
