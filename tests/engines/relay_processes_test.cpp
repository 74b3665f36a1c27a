// kv-relay processes started with nothing but a topology file of engine endpoints: two
// replicas subscribed to the same fake engines hold the same blocks and publish the same
// load, with no feeder (docs/protocol/engine-sources.md#scale-out).
#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include <signal.h>

#include <fstream>
#include <set>
#include <sstream>

#include "core/prometheus_text.hpp"
#include "tests/engines/fake_engine_process.hpp"
#include "tests/engines/relay_process.hpp"

using namespace kvrelay::test;

namespace {

std::string write_topology(const std::string& name, const FakeEngineProcess& rank0, const FakeEngineProcess& rank1) {
  const std::string path = std::string(KVRELAY_TEST_TMP_DIR) + "/" + name;
  std::ofstream(path) << "version: 1\n"
                         "endpoints:\n"
                         "  - endpoint: {namespace: prod, component: engines, endpoint: generate}\n"
                         "    workers:\n"
                         "      - workerId: 1\n"
                         "        card:\n"
                         "          displayName: fake/model\n"
                         "          kvCacheBlockSize: 16\n"
                         "          workerType: WORKER_TYPE_AGGREGATED\n"
                         "          modelType: 1\n"
                         "          runtimeConfig: {totalKvBlocks: 4096, dataParallelSize: 2}\n"
                         "        kvSources:\n"
                         "          - {dpRank: 0, zmq: {endpoint: \""
                      << rank0.pub() << "\", replayEndpoint: \"" << rank0.replay()
                      << "\"}}\n"
                         "          - {dpRank: 1, zmq: {endpoint: \""
                      << rank1.pub() << "\", replayEndpoint: \"" << rank1.replay()
                      << "\"}}\n"
                         "        engineMetrics: {url: \""
                      << rank0.metrics()
                      << "\", kind: ENGINE_KIND_VLLM, intervalMs: 100}\n"
                         "    liveWorkers: {workerIds: [1]}\n";
  return path;
}

// GetState once `ranks` sources have applied the engines' batch `seq` and it is published.
ingest_v1::PoolState settled(RelayProcess& relay, std::uint64_t seq, int ranks) {
  const auto state = relay.state_until([&](const ingest_v1::RelayState& s) {
    if (s.pools_size() != 1 || s.pools(0).publication_pending() || s.endpoints_size() != 1) return false;
    int done = 0;
    for (const auto& source : s.endpoints(0).sources()) done += source.last_sequence() == seq ? 1 : 0;
    return done == ranks;
  });
  return state.pools(0);
}

}  // namespace

TEST_CASE("engines: two relay processes on one set of fake engines hold the same blocks and load", "[engines]") {
  FakeEngineProcess rank0({"--replay", "--metrics", "--dp-rank", "0", "--num-gpu-blocks", "4096"});
  FakeEngineProcess rank1({"--replay", "--dp-rank", "1"});
  // One metrics page for the worker, as vLLM serves one per API server: both engines on it.
  rank0.command({{"op", "metrics"}, {"usage", {{"0", 0.25}, {"1", 0.5}}}});
  const std::string topology = write_topology("engines-topology.yaml", rank0, rank1);
  RelayProcess first("relay-a", topology);
  RelayProcess second("relay-b", topology);
  rank0.await_subscribers(2);
  rank1.await_subscribers(2);

  const auto random = [](int seed) {
    return nlohmann::json{
        {"op", "random"}, {"seed", seed}, {"batches", 100}, {"events_per_batch", 4}, {"blocks_per_store", 2}};
  };
  rank0.command({{"op", "raw"}, {"frames", {"", "00"}}});  // dropped: no seq, no payload
  // The filter's bits depend on the order blocks arrive in (which slot of a shared bucket a
  // fingerprint takes), so rank 1 publishes only once both relays have applied rank 0: each
  // relay then sees the same order, and the same blocks must give the same bits.
  const std::uint64_t seq = FakeEngineProcess::seq_of(rank0.command(random(1)));
  settled(first, seq, 1);
  settled(second, seq, 1);
  REQUIRE(FakeEngineProcess::seq_of(rank1.command(random(2))) == seq);
  const auto a = settled(first, seq, 2);
  const auto b = settled(second, seq, 2);
  // On a mismatch, what each relay's engine sources went through (resets by cause, batches by
  // result): the two must have taken the same path for their blocks to agree.
  const auto engine_counters = [](RelayProcess& relay) {
    std::istringstream page(relay.metrics_page());
    std::string counters;
    for (std::string line; std::getline(page, line);) {
      if (line.starts_with("kv_relay_engine_source_resets_total") ||
          line.starts_with("kv_relay_engine_source_batches_total")) {
        counters += line + "\n";
      }
    }
    return counters;
  };
  INFO("relay a:\n" << engine_counters(first));
  INFO("relay b:\n" << engine_counters(second));
  CHECK(a.unique_blocks() > 0);
  CHECK(a.unique_blocks() == b.unique_blocks());
  CHECK(a.filter_digest() == b.filter_digest());
  CHECK(a.active_sources() == 2);

  const std::string rank0_source = R"({serving_endpoint="prod/engines/generate",worker="1",dp_rank="0")";
  for (RelayProcess* relay : {&first, &second}) {
    CHECK(relay->sample("kv_relay_engine_source_connected" + rank0_source + "}") == 1);
    CHECK(relay->sample("kv_relay_engine_source_batches_total" + rank0_source + R"(,result="applied"})") == 100);
    CHECK(relay->sample("kv_relay_engine_source_batches_total" + rank0_source + R"(,result="malformed_frames"})") == 1);
    CHECK(relay->sample("kv_relay_engine_source_resets_total" + rank0_source + R"(,cause="sequence_gap"})") == 0);
    // No label of the relay's is one the Prometheus Operator sets on every target (and would
    // rename to exported_<label>, breaking the alerts that group by it).
    const auto page = kvrelay::prometheus_text::parse(relay->metrics_page());
    REQUIRE(page.has_value());
    for (const auto& sample : page->samples) {
      for (const auto& [label, value] : sample.labels) {
        INFO(sample.name << " " << label);
        CHECK_FALSE(
            std::set<std::string>{"endpoint", "namespace", "pod", "service", "job", "instance", "container"}.contains(
                label));
      }
    }
    const auto load = relay
                          ->load_until([](const v1::KvPoolLoadUpdate& update) {
                            return update.pools_size() == 1 && update.pools(0).kv_observed_ranks() == 2;
                          })
                          .pools(0);
    CHECK(load.kv_used_blocks() == 1024 + 2048);  // round(0.25 x 4096) + round(0.5 x 4096)
    CHECK(load.total_kv_blocks() == 2 * 4096);
    // Both ranks observed: the worker's page was scraped.
    CHECK(relay->sample(
              R"(kv_relay_engine_scrapes_total{serving_endpoint="prod/engines/generate",worker="1",result="ok"})") >=
          1);
  }
}
