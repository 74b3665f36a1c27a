// kvrelay-cli: an operator's window into one or more relays, built on the consumer library.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "client/cli/commands.hpp"
#include "core/build_info.hpp"

int main(int argc, char** argv) {
  using namespace kvrelay::cli;
  const std::vector<std::string> argv_list(argv + 1, argv + argc);
  // `help` only as the command: as a value (`--lora help`) it is that value.
  const auto asks_help = [](const std::string& arg) { return arg == "--help" || arg == "-h"; };
  if ((!argv_list.empty() && argv_list[0] == "help") || std::ranges::any_of(argv_list, asks_help)) {
    std::fputs(kUsage, stdout);
    return kOk;
  }
  if (argv_list.size() == 1 && argv_list[0] == "--version") {
    fmt::print("{}\n", kvrelay::version_line("kvrelay-cli"));
    return kOk;
  }
  const char* token_file = std::getenv("KV_RELAY_INGEST_TOKEN_FILE");
  const auto args =
      parse_args(argv_list, token_file != nullptr ? std::optional<std::string>(token_file) : std::nullopt);
  if (!args) {
    std::fprintf(stderr, "kvrelay-cli: %s\n\n%s", args.error().c_str(), kUsage);
    return kUsageError;
  }
  const std::map<std::string, int (*)(const Args&)> commands{{"info", run_info},
                                                             {"catalog", run_catalog},
                                                             {"readiness", run_readiness},
                                                             {"load", run_load},
                                                             {"serving-load", run_serving_load},
                                                             {"state", run_state},
                                                             {"top", run_top},
                                                             {"overlap", run_overlap},
                                                             {"hash", run_hash},
                                                             {"decode-frame", run_decode_frame}};
  const auto command = commands.find(args->command);
  if (command == commands.end()) {
    std::fprintf(stderr, "kvrelay-cli: unknown command '%s' (see --help)\n", args->command.c_str());
    return kUsageError;
  }
  return command->second(*args);
}
