#pragma once
// kv-relay's configuration: every flag also has an environment variable (KV_RELAY_ + the
// flag name in upper case, '-' as '_') and a key in the YAML config file (the flag name).
// Precedence: command line, then environment, then config file, then the default.
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "app/relay_runtime.hpp"

namespace kvrelay {

struct AppOptions {
  RelayOptions relay;
  std::string metrics_listen = "0.0.0.0:9464";  // "off" disables
  std::optional<std::string> topology_path;
  std::optional<std::string> ready_file;
  std::string log_level = "info";
  bool demo = false;
  std::uint32_t demo_events_per_second = 2000;
  // Test hooks showing that a core actor's failure stops the process: the membership actor fails
  // once the relay is ready, or (at_start) while the topology file loads.
  enum class CrashMembership { never, when_ready, at_start };
  CrashMembership crash_membership_for_test = CrashMembership::never;
  bool help = false;
  bool version = false;
};

// Parses argv (without argv[0]) with `environment` (e.g. from environ) as the second source.
// The error is one clear line naming the offending flag, variable or key.
std::expected<AppOptions, std::string> parse_options(const std::vector<std::string>& args,
                                                     const std::map<std::string, std::string>& environment);

// Every flag with its variable, default and meaning.
std::string usage();

std::map<std::string, std::string> process_environment();

}  // namespace kvrelay
