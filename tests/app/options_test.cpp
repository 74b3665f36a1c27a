#include <catch2/catch.hpp>

#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "app/options.hpp"
#include "ingest/topology_file.hpp"

using namespace kvrelay;

namespace {

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = std::string(KVRELAY_TEST_TMP_DIR) + "/" + name;
  std::ofstream(path) << content;
  return path;
}

}  // namespace

TEST_CASE("options: defaults", "[options]") {
  const auto options = parse_options({}, {});
  REQUIRE(options.has_value());
  CHECK(options->relay.listen == "0.0.0.0:50051");
  CHECK(options->relay.ingest_listen == "127.0.0.1:50052");
  CHECK(options->metrics_listen == "0.0.0.0:9464");
  CHECK_FALSE(options->relay.expected_unique_blocks.has_value());  // auto
  CHECK(options->relay.expected_unique_blocks_fallback == 1048576);
  CHECK(options->relay.relayout_load == 0.85);
  CHECK(options->relay.relayout_min_interval_ms == 1000);
  CHECK_FALSE(options->relay.memory_budget_bytes.has_value());  // auto
  CHECK(options->relay.publication_threshold == 16);
  CHECK(options->relay.publication_delay_ms == 1);
  CHECK(options->relay.pool_stream_frames_per_s == 16000);
  CHECK(options->relay.load_window_ms == 1000);
  CHECK(options->relay.stream_queue_frames == 16);
  CHECK(options->relay.stream_queue_bytes == 16u << 20);
  CHECK(options->relay.max_serving_load_subscribers == 64);
  CHECK(options->relay.serving_load_freshness_ms == 3000);
  CHECK(options->relay.serving_load_retention_ms == 600000);
  CHECK_FALSE(options->demo);
  CHECK_FALSE(options->relay.instance_id.has_value());
  CHECK(options->relay.dc_id.empty());  // required: the relay refuses to start without one
  // The stream limits and timers of docs/protocol/limits.md.
  CHECK(options->relay.max_message_bytes == 8u << 20);
  CHECK(options->relay.max_catalog_subscribers == 64);
  CHECK(options->relay.max_readiness_subscribers == 64);
  CHECK(options->relay.max_load_subscribers == 64);
  CHECK(options->relay.max_pool_streams_total == 64);
  CHECK(options->relay.max_subscribers_per_pool == 64);
  CHECK(options->relay.max_initialized_pool_hubs == 64);
  CHECK(options->relay.snapshot_encoders == 2);
  CHECK(options->relay.snapshot_progress_timeout_ms == 60000);
  CHECK(options->relay.pool_heartbeat_ms == 10000);
  CHECK(options->relay.readiness_heartbeat_ms == 10000);
  CHECK(options->relay.catalog_heartbeat_ms == 10000);
  CHECK(options->relay.drain_timeout_ms == 5000);
}

TEST_CASE("options: --help shows the defaults the options hold", "[options]") {
  const auto defaults = parse_options({}, {});
  REQUIRE(defaults.has_value());
  const std::string help = usage();
  const auto shown = [&](const std::string& flag) {
    const auto at = help.find("  --" + flag + " ");
    REQUIRE(at != std::string::npos);
    const auto value = help.find("default: ", at) + std::string_view("default: ").size();
    return help.substr(value, help.find('\n', value) - value);
  };
  CHECK(shown("max-subscribers-per-pool") == std::to_string(defaults->relay.max_subscribers_per_pool));
  CHECK(shown("snapshot-progress-timeout-ms") == std::to_string(defaults->relay.snapshot_progress_timeout_ms));
  CHECK(shown("max-engine-message-bytes") == std::to_string(defaults->relay.max_engine_message_bytes));
  CHECK(shown("relayout-load") == "0.85");
  CHECK(shown("dc-id") == "required (--demo: demo)");
}

TEST_CASE("options: the demo names its data center, a real relay must name its own", "[options]") {
  const auto demo = parse_options({"--demo"}, {});
  REQUIRE(demo.has_value());
  CHECK(demo->relay.dc_id == "demo");
  const auto named = parse_options({"--demo", "--dc-id", "dc-east"}, {});
  REQUIRE(named.has_value());
  CHECK(named->relay.dc_id == "dc-east");
}

TEST_CASE("options: the ingest plane's credentials and limits", "[options]") {
  const auto defaults = parse_options({}, {});
  REQUIRE(defaults.has_value());
  CHECK_FALSE(defaults->relay.ingest_token_file.has_value());  // no authentication
  CHECK(defaults->relay.max_batch_events == 16384);
  CHECK(defaults->relay.max_event_blocks == 65536);
  CHECK(defaults->relay.max_event_tokens == 1048576);
  CHECK(defaults->relay.max_ingest_string_bytes == 4096);
  CHECK(defaults->relay.max_serving_endpoints == 1024);
  CHECK(defaults->relay.max_workers_per_endpoint == 4096);
  CHECK(defaults->relay.max_kv_sources == 65536);
  CHECK(defaults->relay.max_ingest_streams == 4096);

  // The file is read when the relay starts, not while the flags are parsed (--help never reads it).
  const auto set =
      parse_options({"--ingest-token-file", "/nonexistent/token", "--max-batch-events=8", "--max-ingest-streams", "3"},
                    {{"KV_RELAY_MAX_KV_SOURCES", "10"}});
  REQUIRE(set.has_value());
  CHECK(set->relay.ingest_token_file == "/nonexistent/token");
  CHECK(set->relay.max_batch_events == 8);
  CHECK(set->relay.max_ingest_streams == 3);
  CHECK(set->relay.max_kv_sources == 10);
  CHECK(defaults->relay.max_engine_message_bytes == 67108864);
  const auto tiny = parse_options({"--max-engine-message-bytes", "100"}, {});
  REQUIRE_FALSE(tiny.has_value());
  CHECK_THAT(tiny.error(), Catch::StartsWith("--max-engine-message-bytes: 100 is outside [4096, "));
  for (const char* flag :
       {"--max-batch-events", "--max-event-blocks", "--max-event-tokens", "--max-ingest-string-bytes",
        "--max-serving-endpoints", "--max-workers-per-endpoint", "--max-kv-sources", "--max-ingest-streams"}) {
    INFO(flag);
    const auto zero = parse_options({flag, "0"}, {});
    REQUIRE_FALSE(zero.has_value());
    CHECK_THAT(zero.error(), Catch::StartsWith(std::string(flag) + ": 0 is outside [1, "));
    CHECK_THAT(usage(), Catch::Contains(flag));
  }
  const auto empty = parse_options({"--ingest-token-file="}, {});
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error() == "--ingest-token-file: must not be empty");
  CHECK_THAT(usage(), Catch::Contains("--ingest-token-file FILE") && Catch::Contains("KV_RELAY_INGEST_TOKEN_FILE"));
}

TEST_CASE("options: command line over environment over config file", "[options]") {
  const auto config = temp_file("relay.yaml", "listen: 10.0.0.1:1\nload_window_ms: 250\ndc-id: from-file\n");
  const auto options = parse_options({"--config", config, "--dc-id=from-flag", "--demo"},
                                     {{"KV_RELAY_DC_ID", "from-env"}, {"KV_RELAY_LOAD_WINDOW_MS", "500"}});
  REQUIRE(options.has_value());
  CHECK(options->relay.dc_id == "from-flag");
  CHECK(options->relay.load_window_ms == 500);
  CHECK(options->relay.listen == "10.0.0.1:1");
  CHECK(options->demo);
}

TEST_CASE("options: filter sizing and the memory budget take a number or auto", "[options]") {
  const auto numbers =
      parse_options({"--expected-unique-blocks", "64", "--relayout-load", "0.9", "--memory-budget-bytes", "0"}, {});
  REQUIRE(numbers.has_value());
  CHECK(numbers->relay.expected_unique_blocks == 64u);
  CHECK(numbers->relay.relayout_load == 0.9);
  CHECK(numbers->relay.memory_budget_bytes == 0u);
  const auto automatic = parse_options({"--expected-unique-blocks=auto"}, {{"KV_RELAY_MEMORY_BUDGET_BYTES", "auto"}});
  REQUIRE(automatic.has_value());
  CHECK_FALSE(automatic->relay.expected_unique_blocks.has_value());
  CHECK_FALSE(automatic->relay.memory_budget_bytes.has_value());
}

TEST_CASE("options: every bad value is one clear message", "[options]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--listen"}, "--listen needs a ADDR"},
      {{"--expected-unique-blocks", "53687092"}, "--expected-unique-blocks"},
      {{"--expected-unique-blocks", "automatic"}, "(or 'auto')"},
      {{"--relayout-load", "0.99"}, "--relayout-load: 0.99 is outside [0.5, 0.95]"},
      {{"--relayout-load", "most"}, "--relayout-load: 'most' is not a decimal number"},
      {{"--memory-budget-bytes", "-1"}, "--memory-budget-bytes"},
      {{"--publication-threshold", "0"}, "--publication-threshold"},
      {{"--stream-queue-bytes", "1024"}, "--stream-queue-bytes"},
      {{"--max-message-bytes", "4259903"}, "--max-message-bytes"},     // below one full chunk frame
      {{"--max-message-bytes", "2147483648"}, "--max-message-bytes"},  // gRPC takes an int
      {{"--snapshot-encoders", "0"}, "--snapshot-encoders"},
      {{"--log-level", "loud"}, "--log-level"},
      {{"--max-serving-load-subscribers", "0"}, "--max-serving-load-subscribers"},
      {{"--serving-load-freshness-ms", "0"}, "--serving-load-freshness-ms"},
      {{"--serving-load-freshness-ms", "5000", "--serving-load-retention-ms", "4999"},
       "--serving-load-retention-ms: 4999 is below --serving-load-freshness-ms (5000)"},
      {{"positional"}, "unexpected argument"},
      // Checked as parsed, so that --help refuses them too (scripts/deploy-check.sh relies on it).
      {{"--dc-id", " dc-west-1", "--help"}, "--dc-id: dc_id is empty, not UTF-8, or has surrounding whitespace"},
      {{"--metrics-listen", "nonsense", "--help"}, "--metrics-listen: nonsense is not host:port"},
  };
  for (const auto& [args, expected] : cases) {
    const auto options = parse_options(args, {});
    REQUIRE_FALSE(options.has_value());
    CHECK_THAT(options.error(), Catch::Contains(expected));
  }
  const auto bad_env = parse_options({}, {{"KV_RELAY_INSTANCE_ID", "-1"}});
  REQUIRE_FALSE(bad_env.has_value());
  CHECK_THAT(bad_env.error(), Catch::Contains("KV_RELAY_INSTANCE_ID"));
  const auto bad_key = parse_options({"--config", temp_file("bad.yaml", "nope: 1\n")}, {});
  REQUIRE_FALSE(bad_key.has_value());
  CHECK_THAT(bad_key.error(), Catch::Contains("unknown key 'nope'"));
  // A key YAML reads as a list or a map is refused like any other bad key, not thrown.
  const auto list_key = parse_options({"--config", temp_file("list-key.yaml", "? [listen]\n: 1\n")}, {});
  REQUIRE_FALSE(list_key.has_value());
  CHECK_THAT(list_key.error(), Catch::EndsWith("list-key.yaml: a key must be a flag name"));
}

TEST_CASE("options: --help lists every flag with its variable", "[options]") {
  const std::string text = usage();
  for (const char* flag :
       {"--listen", "--ingest-listen", "--metrics-listen", "--dc-id", "--instance-id", "--topology",
        "--expected-unique-blocks", "--publication-threshold", "--publication-delay-ms", "--pool-stream-frames-per-s",
        "--load-window-ms", "--stream-queue-frames", "--stream-queue-bytes", "--ready-file", "--log-level", "--demo"}) {
    INFO(flag);
    CHECK_THAT(text, Catch::Contains(flag));
    // Its variable, spelled independently of the code: KV_RELAY_ and the name in upper case.
    std::string variable = "KV_RELAY_";
    for (const char* c = flag + 2; *c != '\0'; ++c) variable += *c == '-' ? '_' : static_cast<char>(std::toupper(*c));
    CHECK_THAT(text, Catch::Contains("env " + variable + ","));
  }
  CHECK_THAT(text, Catch::Contains("--config"));
}

TEST_CASE("options: --version reads no config file, --help checks it", "[options]") {
  const std::map<std::string, std::string> missing_config{{"KV_RELAY_CONFIG", "/nonexistent/kv-relay.yaml"}};
  const auto version = parse_options({"--version"}, missing_config);
  REQUIRE(version.has_value());
  CHECK(version->version);
  const auto help = parse_options({"--help"}, missing_config);
  REQUIRE_FALSE(help.has_value());
  CHECK_THAT(help.error(), Catch::Contains("/nonexistent/kv-relay.yaml"));
}

TEST_CASE("options: README's configuration table is --help's, flag for flag and default for default", "[options]") {
  // flag -> its default as --help shows it; --config is described above the table.
  std::map<std::string, std::string> help_defaults;
  const std::regex flag_line(R"(^  (--[a-z0-9-]+))");
  const std::regex default_text(R"(default: (.*)$)");
  std::istringstream help(usage());
  std::string flag;
  for (std::string line; std::getline(help, line);) {
    std::smatch match;
    if (std::regex_search(line, match, flag_line)) flag = match[1];
    if (std::regex_search(line, match, default_text) && !flag.empty()) help_defaults[flag] = match[1];
  }
  help_defaults.erase("--config");
  REQUIRE(help_defaults.size() > 40);

  // README rows: | `--flag VALUE` | default | meaning |, the default's backticks being markup.
  std::map<std::string, std::string> readme_defaults;
  const std::regex row(R"(^\| `(--[a-z0-9-]+)[^`]*` \| ([^|]*?) \|)");
  std::ifstream readme(std::string(KVRELAY_SOURCE_DIR) + "/README.md");
  REQUIRE(readme.good());
  for (std::string line; std::getline(readme, line);) {
    std::smatch match;
    if (!std::regex_search(line, match, row)) continue;
    std::string shown = match[2];
    std::erase(shown, '`');
    readme_defaults[match[1]] = shown;
  }
  CHECK(readme_defaults == help_defaults);
}

TEST_CASE("topology file: YAML and JSON give the same message", "[topology]") {
  const auto yaml = parse_topology(R"(
version: 1
endpoints:
  - endpoint: {namespace: prod, component: backend, endpoint: generate}
    workers:
      - workerId: 7
        card: {displayName: "123", kvCacheBlockSize: 16, workerType: WORKER_TYPE_DECODE,
               runtimeConfig: {totalKvBlocks: 100, enableEagle: true}}
        kvSources: [{dpRank: 0, push: {}}]
    liveWorkers: {workerIds: [7]}
)");
  REQUIRE(yaml.has_value());
  const auto json = parse_topology(R"({"version": 1, "endpoints": [{"endpoint": {"namespace": "prod",
      "component": "backend", "endpoint": "generate"}, "workers": [{"workerId": "7", "card": {"displayName": "123",
      "kvCacheBlockSize": 16, "workerType": "WORKER_TYPE_DECODE", "runtimeConfig": {"totalKvBlocks": "100",
      "enableEagle": true}}, "kvSources": [{"dpRank": 0, "push": {}}]}], "liveWorkers": {"workerIds": ["7"]}}]})");
  REQUIRE(json.has_value());
  CHECK(yaml->SerializeAsString() == json->SerializeAsString());
  CHECK(yaml->endpoints(0).workers(0).card().display_name() == "123");  // quoted stays a string
  CHECK(yaml->endpoints(0).workers(0).card().runtime_config().enable_eagle());
}

TEST_CASE("topology file: errors name the problem", "[topology]") {
  const auto unknown = parse_topology("version: 1\nendpoints: [{unknownField: 1}]\n");
  REQUIRE_FALSE(unknown.has_value());
  CHECK_THAT(unknown.error(), Catch::Contains("unknownField"));
  const auto broken = parse_topology("version: [1\n");
  REQUIRE_FALSE(broken.has_value());
  CHECK_THAT(broken.error(), Catch::StartsWith("YAML: "));
  const auto missing = load_topology_file("/nonexistent/topology.yaml");
  REQUIRE_FALSE(missing.has_value());
  CHECK_THAT(missing.error(), Catch::Contains("/nonexistent/topology.yaml"));
  const auto demo = load_topology_file(std::string(KVRELAY_SOURCE_DIR) + "/deploy/demo/topology.yaml");
  INFO((demo ? "" : demo.error()));
  REQUIRE(demo.has_value());
  CHECK(demo->endpoints_size() == 3);
}

TEST_CASE("options: a listener's port is a number from 0 to 65535", "[options]") {
  for (const char* flag : {"--listen", "--ingest-listen", "--metrics-listen"}) {
    INFO(flag);
    const auto ephemeral = parse_options({flag, "127.0.0.1:0"}, {});
    CHECK(ephemeral.has_value());
    const auto ipv6 = parse_options({flag, "[::1]:50051"}, {});
    CHECK(ipv6.has_value());
    // gRPC would bind 99999 modulo 65536 (34463) without a word.
    const auto wrapped = parse_options({flag, "127.0.0.1:99999"}, {});
    REQUIRE_FALSE(wrapped.has_value());
    CHECK(wrapped.error() == std::string(flag) + ": 127.0.0.1:99999: the port is not a number from 0 to 65535");
    const auto no_port = parse_options({flag, "localhost"}, {});
    REQUIRE_FALSE(no_port.has_value());
    CHECK_THAT(no_port.error(), Catch::Contains("is not host:port"));
  }
  const auto metrics_off = parse_options({"--metrics-listen", "off"}, {});
  REQUIRE(metrics_off.has_value());
  CHECK(metrics_off->metrics_listen == "off");
}

TEST_CASE("options: a switch is on when named without a value, and an empty value is refused", "[options]") {
  const auto named = parse_options({"--demo"}, {});
  REQUIRE(named.has_value());
  CHECK(named->demo);
  const auto off = parse_options({}, {{"KV_RELAY_DEMO", "off"}});
  REQUIRE(off.has_value());
  CHECK_FALSE(off->demo);
  const auto empty_variable = parse_options({}, {{"KV_RELAY_DEMO", ""}});
  REQUIRE_FALSE(empty_variable.has_value());
  CHECK(empty_variable.error() == "KV_RELAY_DEMO: '' is not a boolean");
  const auto empty_value = parse_options({"--demo="}, {});
  REQUIRE_FALSE(empty_value.has_value());
  CHECK(empty_value.error() == "--demo: '' is not a boolean");
}

TEST_CASE("options: the membership crash hook fires once ready, or while the topology loads", "[options]") {
  using Crash = AppOptions::CrashMembership;
  const std::vector<std::pair<std::vector<std::string>, Crash>> cases{
      {{}, Crash::never},
      {{"--crash-membership-for-test"}, Crash::when_ready},
      {{"--crash-membership-for-test=on"}, Crash::when_ready},
      {{"--crash-membership-for-test=start"}, Crash::at_start},
      {{"--crash-membership-for-test=off"}, Crash::never},
  };
  for (const auto& [args, expected] : cases) {
    const auto options = parse_options(args, {});
    REQUIRE(options.has_value());
    CHECK(options->crash_membership_for_test == expected);
  }
  const auto bad = parse_options({"--crash-membership-for-test=later"}, {});
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error() == "--crash-membership-for-test: 'later' is not a boolean nor 'start'");
}

TEST_CASE("topology file: nesting up to 64 levels, and 64-bit ids quoted or not", "[topology]") {
  const auto nested = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  CHECK(yaml_to_json(nested(64)).has_value());
  const auto deeper = yaml_to_json(nested(65));
  REQUIRE_FALSE(deeper.has_value());
  CHECK_THAT(deeper.error(), Catch::Contains("nests deeper than 64 levels"));

  // Helm values files carry 64-bit ids quoted (deploy/helm/kv-relay/values.yaml).
  for (const char* id : {"7587888435464773378", "\"7587888435464773378\""}) {
    INFO(id);
    const auto file = parse_topology(std::string(R"(
version: 1
endpoints:
  - endpoint: {namespace: prod, component: backend, endpoint: generate}
    workers:
      - workerId: )") + id + R"(
        card: {displayName: llama, kvCacheBlockSize: 16, runtimeConfig: {totalKvBlocks: 100}}
        kvSources: [{dpRank: 0, push: {}}]
)");
    REQUIRE(file.has_value());
    CHECK(file->endpoints(0).workers(0).worker_id() == 7587888435464773378u);
  }
}
