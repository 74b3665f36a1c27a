// `kv-relay --demo` (what `make run` starts): the demo's in-process fake vLLM engines feed
// every pool over ZeroMQ and serve the load on their metrics pages, so no KV event or
// occupancy comes through the ingest API; its frontend and routers report serving load there,
// with the relay's ingest token (the relay runs with --ingest-token-file, as a deployment that
// authenticates its ingest API does). The demo topology is moved to free ports so that the test
// never meets a running demo.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "tests/app/demo_topology.hpp"
#include "tests/engines/relay_process.hpp"
#include "tests/integration/documented_metrics.hpp"

using namespace kvrelay::test;

TEST_CASE(
    "engines: the demo feeds every pool through fake vLLM engines and their metrics pages, and reports serving load",
    "[engines][demo]") {
  const std::string token_file = std::string(KVRELAY_TEST_TMP_DIR) + "/demo-ingest-token";
  std::ofstream(token_file) << "demo-token\n";
  RelayProcess relay("demo", write_demo_topology("demo-topology", on_free_ports),
                     {"--demo", "--ingest-token-file", token_file});
  relay.send_ingest_token("demo-token");

  // Every rank's occupancy comes from its worker's page: all three pools' windows complete.
  const auto window = relay.load_until([](const v1::KvPoolLoadUpdate& update) {
    if (update.pools_size() != 3) return false;
    for (const auto& pool : update.pools()) {
      if (pool.kv_observed_ranks() != pool.kv_expected_ranks() || pool.kv_used_blocks() == 0) return false;
    }
    return true;
  });
  std::uint32_t ranks = 0;
  for (const auto& pool : window.pools()) ranks += pool.kv_expected_ranks();
  CHECK(ranks == 6);

  // Every declared source is an engine's publisher, connected, and every pool holds its blocks.
  const auto state = relay.state_until([](const ingest_v1::RelayState& s) {
    if (s.pools_size() != 3) return false;
    for (const auto& pool : s.pools()) {
      if (pool.unique_blocks() == 0) return false;
    }
    for (const auto& endpoint : s.endpoints()) {
      for (const auto& source : endpoint.sources()) {
        if (!source.connected() || !source.has_last_sequence()) return false;
      }
    }
    return true;
  });
  std::size_t sources = 0;
  for (const auto& endpoint : state.endpoints()) {
    for (const auto& source : endpoint.sources()) {
      CHECK(source.transport() == "zmq");
      CHECK(source.resets() == 0);
      ++sources;
    }
  }
  CHECK(sources == 6);
  const std::string llama_rank0 = R"({serving_endpoint="prod/llama/generate",worker="101",dp_rank="0")";
  CHECK(relay.sample("kv_relay_engine_source_events_total" + llama_rank0 + R"(,result="emitted"})") > 0);
  for (const char* rejected : {"malformed_event", "unknown_event_type", "block_size_mismatch", "duplicate_block"}) {
    INFO(rejected);
    CHECK(relay.sample("kv_relay_engine_source_events_total" + llama_rank0 + ",result=\"" + rejected + "\"}") == 0);
  }
  CHECK(relay.sample(R"(kv_relay_ingest_batches_total{kind="PublishKvEvents",result="accepted"})") == 0);
  // Engine sources and scrapers bring families of their own: docs/metrics.md names them too.
  const auto families = undocumented_families(relay.metrics_page());
  CHECK(families.undocumented == std::vector<std::string>{});

  // The demo's frontend and routers report: every pool and model is COMPLETE, with traffic.
  const auto serving = relay.serving_load_until([](const v1::ServingLoadUpdate& update) {
    if (update.pools_size() != 3 || update.models_size() != 3) return false;
    for (const auto& pool : update.pools()) {
      if (pool.load().status() != v1::DATA_STATUS_COMPLETE) return false;
    }
    for (const auto& model : update.models()) {
      if (model.load().status() != v1::DATA_STATUS_COMPLETE || model.load().requests().requests_started_total() == 0)
        return false;
    }
    return true;
  });
  for (const auto& pool : serving.pools()) CHECK(pool.deployment().has_max_concurrency());
  CHECK(serving.models(2).canonical_model_id() == "tenant-a");  // the LoRA adapter is a model of its own

  // What an operator sees: both models ready, and the sources with their engines' sequences.
  const auto [readiness, readiness_exit] = run_to_end(KVRELAY_CLI, {"readiness", "--target", relay.wan_address()});
  CHECK(readiness_exit == 0);
  CHECK(lines_with(readiness, {"meta/llama-3-8b", "READY", "tenant-a=READY"}) == 1);
  CHECK(lines_with(readiness, {"Qwen/Qwen3-32B", "READY", "PREFILL,DECODE"}) == 1);
  const auto [refused, refused_exit] = run_to_end(KVRELAY_CLI, {"state", "--target", relay.ingest_address()});
  CHECK(refused_exit == 1);
  CHECK_THAT(refused, Catch::Contains("needs credentials"));
  const auto [table, state_exit] =
      run_to_end(KVRELAY_CLI, {"state", "--target", relay.ingest_address(), "--ingest-token-file", token_file});
  CHECK(state_exit == 0);
  INFO(table);
  CHECK(lines_with(table, {"prod/llama/generate", "zmq", "yes", "tcp://127.0.0.1:"}) == 4);
  CHECK(lines_with(table, {"prod/qwen-prefill/generate", "201", "zmq", "yes"}) == 1);
  CHECK(lines_with(table, {"prod/qwen-decode/generate", "301", "zmq", "yes"}) == 1);
}
