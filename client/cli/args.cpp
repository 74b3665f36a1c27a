#include "client/cli/args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "core/bearer_token.hpp"

namespace kvrelay::cli {

const char* const kUsage =
    "Usage: kvrelay-cli COMMAND [OPTIONS]\n"
    "       kvrelay-cli --version\n\n"
    "Relay views (WAN API, default target localhost:50051):\n"
    "  info                 each relay's identity and protocol version\n"
    "  catalog              the pool catalog\n"
    "  readiness            serving readiness per (namespace, model)\n"
    "  load                 the latest pool load window\n"
    "  serving-load         the latest serving-load window: per model, requests in flight,\n"
    "                       queued and in-flight input tokens, frontends and totals; per pool,\n"
    "                       active prefill tokens and decode blocks, workers and concurrency\n"
    "  top                  live view of one or more relays: pools, sequences, delta rates,\n"
    "                       how long ago each stream last moved, fingerprints held, filter\n"
    "                       load, readiness, load and serving load\n"
    "  overlap --model NAME --tokens FILE [--cache-namespace NS]\n"
    "                       per relay and pool, how many leading blocks of the prompt are\n"
    "                       cached, and whether the pool's topology is READY\n"
    "Ingest API (default target localhost:50052):\n"
    "  state                what the relay holds: pools, sequences, filter digests, KV sources\n"
    "Offline tools:\n"
    "  hash --block-size N [--eagle] [--lora NAME] [--cache-namespace NS] --tokens FILE\n"
    "                       block and sequence hashes of a prompt\n"
    "  decode-frame FILE    validate and describe a captured CBI1 payload\n\n"
    "Options:\n"
    "  --target HOST:PORT   a relay to read (repeatable)\n"
    "  --watch              keep printing every update (catalog/readiness/load/serving-load,\n"
    "                       one target)\n"
    "  --json               machine-readable output (every command but top)\n"
    "  --cache-namespace NS hash/overlap: the request's cache namespace (vLLM's cache salt)\n"
    "  --interval-ms N      top: refresh period (default 1000)\n"
    "  --iterations N       top: stop after N refreshes (default: until interrupted)\n"
    "  --timeout-ms N       top/overlap: how long to wait for the relays' state (default 10000)\n"
    "  --ingest-token-file FILE\n"
    "                       state: send the token of FILE, for a relay started with\n"
    "                       --ingest-token-file (default: $KV_RELAY_INGEST_TOKEN_FILE)\n\n"
    "Exit codes: 0 ok, 1 relay error or unreachable, 2 usage, 3 contract mismatch,\n"
    "4 invalid input file.\n";

namespace {

// The flags each command reads: any other is refused, not silently ignored.
const std::map<std::string_view, std::set<std::string_view>> kFlagsOf = {
    {"info", {"--target", "--json"}},
    {"catalog", {"--target", "--watch", "--json"}},
    {"readiness", {"--target", "--watch", "--json"}},
    {"load", {"--target", "--watch", "--json"}},
    {"serving-load", {"--target", "--watch", "--json"}},
    {"state", {"--target", "--json", "--ingest-token-file"}},
    {"top", {"--target", "--interval-ms", "--iterations", "--timeout-ms"}},
    {"overlap", {"--target", "--model", "--tokens", "--cache-namespace", "--json", "--timeout-ms"}},
    {"hash", {"--block-size", "--eagle", "--lora", "--cache-namespace", "--tokens", "--json"}},
    {"decode-frame", {"--json"}},
};

std::expected<std::uint32_t, std::string> number(const std::string& flag, const std::string& text) {
  std::uint32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) {
    return std::unexpected(fmt::format("{} needs a non-negative integer, got '{}'", flag, text));
  }
  return value;
}

}  // namespace

std::expected<Args, std::string> parse_args(const std::vector<std::string>& argv,
                                            std::optional<std::string> token_file_variable) {
  if (argv.empty()) return std::unexpected("missing COMMAND");
  Args args;
  args.command = argv[0];
  args.ingest_token_file = std::move(token_file_variable);
  const auto known = kFlagsOf.find(args.command);  // an unknown command is the caller's to report
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& flag = argv[i];
    if (known != kFlagsOf.end() && flag.starts_with("--") && !known->second.contains(flag) &&
        std::ranges::any_of(kFlagsOf, [&](const auto& command) { return command.second.contains(flag); })) {
      return std::unexpected(fmt::format("{} does not apply to {}", flag, args.command));
    }
    auto value = [&]() -> std::expected<std::string, std::string> {
      if (i + 1 >= argv.size()) return std::unexpected(fmt::format("{} needs a value", flag));
      return argv[++i];
    };
    auto assign_number = [&](std::uint32_t& out) -> std::expected<void, std::string> {
      auto text = value();
      if (!text) return std::unexpected(text.error());
      auto parsed = number(flag, *text);
      if (!parsed) return std::unexpected(parsed.error());
      out = *parsed;
      return {};
    };
    std::expected<void, std::string> outcome;
    if (flag == "--watch") {
      args.watch = true;
    } else if (flag == "--json") {
      args.json = true;
    } else if (flag == "--eagle") {
      args.eagle = true;
    } else if (flag == "--target" || flag == "--model" || flag == "--tokens" || flag == "--lora" ||
               flag == "--cache-namespace" || flag == "--ingest-token-file") {
      auto text = value();
      if (!text) return std::unexpected(text.error());
      if (flag == "--target") args.targets.push_back(*text);
      if (flag == "--model") args.model = *text;
      if (flag == "--tokens") args.tokens_file = *text;
      if (flag == "--lora") args.lora = *text;
      if (flag == "--cache-namespace") args.cache_namespace = *text;
      if (flag == "--ingest-token-file") args.ingest_token_file = *text;
    } else if (flag == "--block-size") {
      outcome = assign_number(args.block_size);
    } else if (flag == "--interval-ms") {
      outcome = assign_number(args.interval_ms);
      if (outcome && args.interval_ms == 0) outcome = std::unexpected("--interval-ms needs at least 1");
    } else if (flag == "--timeout-ms") {
      outcome = assign_number(args.timeout_ms);
    } else if (flag == "--iterations") {
      outcome = assign_number(args.iterations);
    } else if (!flag.starts_with("--") && args.command == "decode-frame" && !args.file) {
      args.file = flag;
    } else {
      return std::unexpected(fmt::format("unexpected argument '{}'", flag));
    }
    if (!outcome) return std::unexpected(outcome.error());
  }
  return args;
}

std::optional<std::vector<std::uint32_t>> read_tokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "kvrelay-cli: cannot read tokens file '%s'\n", path.c_str());
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  for (char& c : text) {
    if (c == ',') c = ' ';
  }
  std::istringstream words(text);
  std::vector<std::uint32_t> tokens;
  for (std::string word; words >> word;) {
    std::uint32_t token = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), token);
    if (error != std::errc{} || end != word.data() + word.size()) {
      std::fprintf(stderr, "kvrelay-cli: '%s' in %s is not a token id (0..4294967295)\n", word.c_str(), path.c_str());
      return std::nullopt;
    }
    tokens.push_back(token);
  }
  return tokens;
}

std::optional<std::string> read_ingest_token(const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  auto token = bearer::token_of_file(content.str());
  if (!in || !token) {
    std::fprintf(stderr, "kvrelay-cli: --ingest-token-file %s: %s\n", path.c_str(),
                 in ? token.error().c_str() : "cannot be read");
    return std::nullopt;
  }
  return std::move(*token);
}

}  // namespace kvrelay::cli
