#include "app/options.hpp"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "core/identity.hpp"
#include "metrics/page_server.hpp"

extern char** environ;

namespace kvrelay {

namespace {

using Apply = std::function<std::optional<std::string>(AppOptions&, const std::string&)>;

struct Flag {
  std::string name;        // without the leading "--"
  std::string value_name;  // empty for a switch
  std::string help;
  std::string default_text;
  Apply apply;
};

template <class Int>
std::optional<std::string> parse_uint(const std::string& text, Int min, Int max, Int& out) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    return fmt::format("'{}' is not a non-negative integer", text);
  }
  if (value < static_cast<std::uint64_t>(min) || value > static_cast<std::uint64_t>(max)) {
    return fmt::format("{} is outside [{}, {}]", value, min, max);
  }
  out = static_cast<Int>(value);
  return std::nullopt;
}

template <class Int>
Apply uint_field(Int min, Int max, Int RelayOptions::*field) {
  return [=](AppOptions& o, const std::string& v) { return parse_uint(v, min, max, o.relay.*field); };
}

// "auto" (stored as nullopt) or an integer in [min, max].
Apply auto_or_uint_field(std::uint64_t min, std::uint64_t max, std::optional<std::uint64_t> RelayOptions::*field) {
  return [=](AppOptions& o, const std::string& v) -> std::optional<std::string> {
    if (v == "auto") {
      o.relay.*field = std::nullopt;
      return std::nullopt;
    }
    std::uint64_t value = 0;
    if (auto error = parse_uint(v, min, max, value)) return *error + " (or 'auto')";
    o.relay.*field = value;
    return std::nullopt;
  };
}

// A decimal fraction in [min, max].
Apply fraction_field(double min, double max, double RelayOptions::*field) {
  return [=](AppOptions& o, const std::string& v) -> std::optional<std::string> {
    double value = 0;
    const auto [end, error] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (error != std::errc() || end != v.data() + v.size() || v.empty()) {
      return fmt::format("'{}' is not a decimal number", v);
    }
    if (!(value >= min && value <= max)) return fmt::format("{} is outside [{}, {}]", value, min, max);
    o.relay.*field = value;
    return std::nullopt;
  };
}

// A non-empty text value stored through `store`.
Apply text(std::function<void(AppOptions&, const std::string&)> store) {
  return [store = std::move(store)](AppOptions& o, const std::string& v) -> std::optional<std::string> {
    if (v.empty()) return "must not be empty";
    store(o, v);
    return std::nullopt;
  };
}

// A listener's host:port, checked here rather than when the relay binds it, so that --help
// checks it too (and gRPC itself takes a port past 65535 modulo 65536).
std::optional<std::string> address_error(const std::string& v) {
  const auto address = split_host_port(v);
  return address ? std::nullopt : std::optional(address.error());
}

Apply listen_field(std::string RelayOptions::*field) {
  return [field](AppOptions& o, const std::string& v) -> std::optional<std::string> {
    if (auto error = address_error(v)) return error;
    o.relay.*field = v;
    return std::nullopt;
  };
}

std::optional<std::string> parse_bool(const std::string& text, bool& out) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") {
    out = true;
  } else if (lower == "0" || lower == "false" || lower == "no" || lower == "off") {
    out = false;
  } else {
    return fmt::format("'{}' is not a boolean", text);
  }
  return std::nullopt;
}

// A flag's default as --help shows it: what a default RelayOptions holds, so the two never differ.
template <class Field>
std::string shown(Field RelayOptions::*member) {
  static const RelayOptions defaults;
  return fmt::format("{}", defaults.*member);
}

const std::vector<Flag>& flags() {
  constexpr auto u32max = std::numeric_limits<std::uint32_t>::max();
  constexpr auto szmax = std::size_t{1} << 40;
  static const std::vector<Flag> table = {
      {"listen", "ADDR", "WAN gRPC listener (KvEventRelay); port 0 binds an ephemeral port",
       shown(&RelayOptions::listen), listen_field(&RelayOptions::listen)},
      {"ingest-listen", "ADDR", "DC-local ingest listener (RelayIngest); keep it off the WAN",
       shown(&RelayOptions::ingest_listen), listen_field(&RelayOptions::ingest_listen)},
      {"metrics-listen", "ADDR", "Prometheus /metrics listener, or 'off'", "0.0.0.0:9464",
       [](AppOptions& o, const std::string& v) -> std::optional<std::string> {
         if (v != "off") {
           if (auto error = address_error(v)) return error;
         }
         o.metrics_listen = v;
         return std::nullopt;
       }},
      {"dc-id", "ID", "this data center's id, hashed into every PoolId; keep it stable across restarts",
       "required (--demo: demo)",
       [](AppOptions& o, const std::string& v) -> std::optional<std::string> {
         if (const auto id = identity::stable_dc_id(v); !id) return std::string(identity::to_string(id.error()));
         o.relay.dc_id = v;
         return std::nullopt;
       }},
      {"instance-id", "N", "relay instance id (drt_instance_id)", "derived from the host name",
       [](AppOptions& o, const std::string& v) {
         std::uint64_t id = 0;
         auto error = parse_uint<std::uint64_t>(v, 0, 0x7FFFFFFFFFFFFFFF, id);
         if (!error) o.relay.instance_id = id;
         return error;
       }},
      {"topology", "FILE", "static topology file (TopologyFile as YAML or JSON)", "none",
       text([](AppOptions& o, const std::string& v) { o.topology_path = v; })},
      {"expected-unique-blocks", "N|auto",
       "a new pool's filter: sized for N unique KV blocks (<= 53687091), or auto: for the sum of total_kv_blocks "
       "over its declared ranks",
       "auto", auto_or_uint_field(1, 53'687'091, &RelayOptions::expected_unique_blocks)},
      {"expected-unique-blocks-fallback", "N", "auto sizing of a pool whose KV capacity is unknown",
       shown(&RelayOptions::expected_unique_blocks_fallback),
       uint_field<std::uint64_t>(1, 53'687'091, &RelayOptions::expected_unique_blocks_fallback)},
      {"relayout-load", "FRACTION", "a pool re-lays out into twice the buckets past this slot load",
       shown(&RelayOptions::relayout_load), fraction_field(0.5, 0.95, &RelayOptions::relayout_load)},
      {"relayout-min-interval-ms", "MS", "a pool re-lays out at most once per this interval",
       shown(&RelayOptions::relayout_min_interval_ms),
       uint_field<std::uint32_t>(0, u32max, &RelayOptions::relayout_min_interval_ms)},
      {"memory-budget-bytes", "BYTES|auto",
       "filters and lineage of all pools together at most (0: no budget); auto: 80 % of the cgroup memory limit",
       "auto", auto_or_uint_field(0, std::numeric_limits<std::uint64_t>::max(), &RelayOptions::memory_budget_bytes)},
      {"publication-threshold", "N", "events per published delta", shown(&RelayOptions::publication_threshold),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::publication_threshold)},
      {"publication-delay-ms", "MS", "publish at most this long after the first unpublished event",
       shown(&RelayOptions::publication_delay_ms),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::publication_delay_ms)},
      {"pool-stream-frames-per-s", "N",
       "delta frames per second one pool sends over all its streams together (0: no limit)",
       shown(&RelayOptions::pool_stream_frames_per_s),
       uint_field<std::uint32_t>(0, u32max, &RelayOptions::pool_stream_frames_per_s)},
      {"load-window-ms", "MS", "period of pool load windows", shown(&RelayOptions::load_window_ms),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::load_window_ms)},
      {"stream-queue-frames", "N", "frames a pool stream may queue before it ends as lagged",
       shown(&RelayOptions::stream_queue_frames),
       uint_field<std::size_t>(1, 1 << 20, &RelayOptions::stream_queue_frames)},
      {"stream-queue-bytes", "BYTES", "bytes a pool stream may queue (payload + 256 per frame)",
       shown(&RelayOptions::stream_queue_bytes),
       uint_field<std::size_t>(4'194'624, szmax, &RelayOptions::stream_queue_bytes)},
      {"max-message-bytes", "BYTES", "largest gRPC message either way (>= 4259904: one full chunk frame)",
       shown(&RelayOptions::max_message_bytes),
       uint_field<std::size_t>(4'259'904, std::numeric_limits<int>::max(), &RelayOptions::max_message_bytes)},
      {"max-catalog-subscribers", "N", "open WatchKvPoolCatalog streams at most",
       shown(&RelayOptions::max_catalog_subscribers),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_catalog_subscribers)},
      {"max-readiness-subscribers", "N", "open SubscribeServingReadiness streams at most",
       shown(&RelayOptions::max_readiness_subscribers),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_readiness_subscribers)},
      {"max-load-subscribers", "N", "open SubscribeKvPoolLoad streams at most",
       shown(&RelayOptions::max_load_subscribers),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_load_subscribers)},
      {"max-serving-load-subscribers", "N", "open SubscribeServingLoad streams at most",
       shown(&RelayOptions::max_serving_load_subscribers),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_serving_load_subscribers)},
      {"serving-load-freshness-ms", "MS", "a frontend or router report counts for this long",
       shown(&RelayOptions::serving_load_freshness_ms),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::serving_load_freshness_ms)},
      {"serving-load-retention-ms", "MS",
       "a silent undeclared frontend (and a router's sequence progress) is forgotten after this long",
       shown(&RelayOptions::serving_load_retention_ms),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::serving_load_retention_ms)},
      {"max-pool-streams-total", "N", "open SubscribeKvPool streams at most, all pools together",
       shown(&RelayOptions::max_pool_streams_total),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_pool_streams_total)},
      {"max-subscribers-per-pool", "N", "open SubscribeKvPool streams at most per pool",
       shown(&RelayOptions::max_subscribers_per_pool),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_subscribers_per_pool)},
      {"max-initialized-pool-hubs", "N", "pools with subscribers at once (an idle pool holds no slot)",
       shown(&RelayOptions::max_initialized_pool_hubs),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_initialized_pool_hubs)},
      {"snapshot-encoders", "N", "snapshots streamed at once; further subscribers wait their turn",
       shown(&RelayOptions::snapshot_encoders), uint_field<std::size_t>(1, szmax, &RelayOptions::snapshot_encoders)},
      {"snapshot-progress-timeout-ms", "MS", "a subscriber must take each snapshot frame within this",
       shown(&RelayOptions::snapshot_progress_timeout_ms),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::snapshot_progress_timeout_ms)},
      {"pool-heartbeat-ms", "MS", "pool stream heartbeat after this long without a frame",
       shown(&RelayOptions::pool_heartbeat_ms), uint_field<std::uint32_t>(1, u32max, &RelayOptions::pool_heartbeat_ms)},
      {"readiness-heartbeat-ms", "MS", "readiness streams re-send the current snapshot this often",
       shown(&RelayOptions::readiness_heartbeat_ms),
       uint_field<std::uint32_t>(1, u32max, &RelayOptions::readiness_heartbeat_ms)},
      {"catalog-heartbeat-ms", "MS", "catalog streams re-send the current catalog this often; 0 disables",
       shown(&RelayOptions::catalog_heartbeat_ms),
       uint_field<std::uint32_t>(0, u32max, &RelayOptions::catalog_heartbeat_ms)},
      {"drain-timeout-ms", "MS", "on a stop signal or a core failure, cancel calls still open after this long",
       shown(&RelayOptions::drain_timeout_ms), uint_field<std::uint32_t>(0, u32max, &RelayOptions::drain_timeout_ms)},
      {"ingest-token-file", "FILE",
       "every ingest call must send 'authorization: Bearer <token>' with this file's token (re-read when it changes)",
       "none: no authentication", text([](AppOptions& o, const std::string& v) { o.relay.ingest_token_file = v; })},
      {"max-batch-events", "N", "events per KV event batch at most", shown(&RelayOptions::max_batch_events),
       uint_field<std::size_t>(1, u32max, &RelayOptions::max_batch_events)},
      {"max-event-blocks", "N", "blocks one KV event stores or removes at most", shown(&RelayOptions::max_event_blocks),
       uint_field<std::size_t>(1, u32max, &RelayOptions::max_event_blocks)},
      {"max-event-tokens", "N", "token ids of one stored KV event at most", shown(&RelayOptions::max_event_tokens),
       uint_field<std::size_t>(1, u32max, &RelayOptions::max_event_tokens)},
      {"max-ingest-string-bytes", "BYTES", "bytes of any one string of an ingest request at most",
       shown(&RelayOptions::max_ingest_string_bytes),
       uint_field<std::size_t>(1, u32max, &RelayOptions::max_ingest_string_bytes)},
      {"max-engine-message-bytes", "BYTES",
       "bytes of one ZeroMQ frame from an engine at most; a larger one drops the connection",
       shown(&RelayOptions::max_engine_message_bytes),
       uint_field<std::size_t>(4096, std::size_t{1} << 40, &RelayOptions::max_engine_message_bytes)},
      {"max-serving-endpoints", "N", "serving endpoints with workers at most",
       shown(&RelayOptions::max_serving_endpoints),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_serving_endpoints)},
      {"max-workers-per-endpoint", "N", "workers of one serving endpoint, and of one live set, at most",
       shown(&RelayOptions::max_workers_per_endpoint),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_workers_per_endpoint)},
      {"max-kv-sources", "N", "KV sources (worker x dp rank) of all workers together at most",
       shown(&RelayOptions::max_kv_sources), uint_field<std::size_t>(1, szmax, &RelayOptions::max_kv_sources)},
      {"max-ingest-streams", "N", "open PublishKvEvents and ReportLoad streams at most, together",
       shown(&RelayOptions::max_ingest_streams), uint_field<std::size_t>(1, szmax, &RelayOptions::max_ingest_streams)},
      {"max-serving-load-sources", "N",
       "serving-load frontends and routers the relay holds reports of at most (declared ids apart)",
       shown(&RelayOptions::max_serving_load_sources),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_serving_load_sources)},
      {"max-serving-load-models", "N", "(namespace, model) pairs whose serving-load totals the relay keeps at most",
       shown(&RelayOptions::max_serving_load_models),
       uint_field<std::size_t>(1, szmax, &RelayOptions::max_serving_load_models)},
      {"ready-file", "FILE", "written atomically once every listener is bound: {\"wan\",\"ingest\",\"metrics\"}",
       "none", text([](AppOptions& o, const std::string& v) { o.ready_file = v; })},
      {"log-level", "LEVEL", "trace, debug, info, warn, error or off", "info",
       [](AppOptions& o, const std::string& v) -> std::optional<std::string> {
         static const std::vector<std::string> levels{"trace", "debug", "info", "warn", "error", "off"};
         if (std::find(levels.begin(), levels.end(), v) == levels.end()) return fmt::format("unknown level '{}'", v);
         o.log_level = v;
         return std::nullopt;
       }},
      {"demo", "", "run the built-in demo: fake vLLM engines on the topology's loopback ZeroMQ and metrics addresses",
       "off", [](AppOptions& o, const std::string& v) { return parse_bool(v, o.demo); }},
      {"demo-events-per-second", "N", "KV events per second the demo's engines publish", "2000",
       [](AppOptions& o, const std::string& v) {
         return parse_uint<std::uint32_t>(v, 1, 10'000'000, o.demo_events_per_second);
       }},
      {"crash-membership-for-test", "",
       "test hook: make the membership actor fail once the relay is ready (=start: while the topology loads)", "off",
       [](AppOptions& o, const std::string& v) {
         using Crash = AppOptions::CrashMembership;
         if (v == "start") {
           o.crash_membership_for_test = Crash::at_start;
           return std::optional<std::string>();
         }
         bool crash = false;
         if (auto error = parse_bool(v, crash)) return std::optional<std::string>(*error + " nor 'start'");
         o.crash_membership_for_test = crash ? Crash::when_ready : Crash::never;
         return std::optional<std::string>();
       }},
  };
  return table;
}

const Flag* find_flag(const std::string& name) {
  for (const Flag& flag : flags()) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

std::string env_name(const std::string& flag) {
  std::string name = "KV_RELAY_";
  for (char c : flag) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

std::optional<std::string> apply_config_file(const std::string& path, AppOptions& options) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& error) {
    return fmt::format("--config {}: {}", path, error.what());
  }
  if (root.IsNull()) return std::nullopt;
  if (!root.IsMap()) return fmt::format("--config {}: the top level must be a map of flag names", path);
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) return fmt::format("--config {}: a key must be a flag name", path);
    std::string key = entry.first.Scalar();
    std::replace(key.begin(), key.end(), '_', '-');
    const Flag* flag = find_flag(key);
    if (flag == nullptr) return fmt::format("--config {}: unknown key '{}'", path, key);
    if (!entry.second.IsScalar()) return fmt::format("--config {}: '{}' must be a scalar", path, key);
    if (auto error = flag->apply(options, entry.second.Scalar())) {
      return fmt::format("--config {}: {}: {}", path, key, *error);
    }
  }
  return std::nullopt;
}

struct CommandLine {
  std::vector<std::pair<const Flag*, std::string>> values;
  std::optional<std::string> config;
  bool help = false;
  bool version = false;
};

std::expected<CommandLine, std::string> split_command_line(const std::vector<std::string>& args) {
  CommandLine line;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      line.help = true;
      continue;
    }
    if (arg == "--version") {
      line.version = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) return std::unexpected(fmt::format("unexpected argument '{}'", arg));
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "config") {
      if (!value && i + 1 < args.size()) value = args[++i];
      if (!value) return std::unexpected("--config needs a FILE");
      line.config = *value;
      continue;
    }
    const Flag* flag = find_flag(name);
    if (flag == nullptr) return std::unexpected(fmt::format("unknown flag --{} (see --help)", name));
    if (!value && !flag->value_name.empty()) {
      if (i + 1 >= args.size()) return std::unexpected(fmt::format("--{} needs a {}", name, flag->value_name));
      value = args[++i];
    }
    line.values.emplace_back(flag, value.value_or("true"));
  }
  return line;
}

}  // namespace

std::expected<AppOptions, std::string> parse_options(const std::vector<std::string>& args,
                                                     const std::map<std::string, std::string>& environment) {
  AppOptions options;
  auto line = split_command_line(args);
  if (!line) return std::unexpected(line.error());
  options.help = line->help;
  options.version = line->version;
  // --version reads no config file and no environment; --help goes on to check every value
  // (scripts/deploy-check.sh validates whole command lines that way).
  if (options.version) return options;
  if (!line->config) {
    if (const auto config = environment.find("KV_RELAY_CONFIG"); config != environment.end())
      line->config = config->second;
  }
  if (line->config) {
    if (auto error = apply_config_file(*line->config, options)) return std::unexpected(*error);
  }
  for (const Flag& flag : flags()) {
    const auto variable = environment.find(env_name(flag.name));
    if (variable == environment.end()) continue;
    if (auto error = flag.apply(options, variable->second)) {
      return std::unexpected(fmt::format("{}: {}", variable->first, *error));
    }
  }
  for (const auto& [flag, value] : line->values) {
    if (auto error = flag->apply(options, value)) return std::unexpected(fmt::format("--{}: {}", flag->name, *error));
  }
  // The demo is one made-up data center; a real one names itself (RelayRuntime refuses no id).
  if (options.demo && options.relay.dc_id.empty()) options.relay.dc_id = "demo";
  if (options.relay.serving_load_retention_ms < options.relay.serving_load_freshness_ms) {
    return std::unexpected(fmt::format("--serving-load-retention-ms: {} is below --serving-load-freshness-ms ({})",
                                       options.relay.serving_load_retention_ms,
                                       options.relay.serving_load_freshness_ms));
  }
  return options;
}

std::string usage() {
  std::string text =
      "Usage: kv-relay [--config FILE] [FLAGS]\n\n"
      "The KV DC relay: publishes this data center's KV-cache pools (dynamo.kvrelay.v1).\n"
      "Every flag can also be set by an environment variable or a config-file key.\n\n";
  text += fmt::format("  --{:<28} {}\n", "version", "print the version and the commit it was built from, and exit");
  text += fmt::format("  --{:<28} {}\n      {:<28} env KV_RELAY_CONFIG\n", "config FILE",
                      "YAML map of flag names to values", "");
  for (const Flag& flag : flags()) {
    const std::string head = flag.value_name.empty() ? flag.name : flag.name + " " + flag.value_name;
    text += fmt::format("  --{:<28} {}\n      {:<28} env {}, default: {}\n", head, flag.help, "", env_name(flag.name),
                        flag.default_text);
  }
  return text;
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq != std::string::npos) environment.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return environment;
}

}  // namespace kvrelay
