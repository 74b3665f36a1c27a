// kv-relay processes started with nothing but a topology file of engine endpoints: two
// replicas subscribed to the same fake engines hold the same blocks and publish the same
// load, with no feeder (docs/protocol/engine-sources.md#scale-out).
#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <signal.h>

#include <fstream>

#include "tests/app/process.hpp"
#include "tests/engines/fake_engine_process.hpp"
#include "tests/integration/harness.hpp"

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

// One relay process and clients of both its APIs.
class RelayProcess {
 public:
  RelayProcess(const std::string& name, const std::string& topology) {
    const std::string ready = std::string(KVRELAY_TEST_TMP_DIR) + "/" + name + ".ready";
    unlink(ready.c_str());
    child_ = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--ready-file", ready,
                          "--metrics-listen", "127.0.0.1:0", "--drain-timeout-ms", "500", "--topology", topology, "--load-window-ms", "100"});
    REQUIRE_THAT(read_until(child_.output, "ready: "), Catch::Contains("ready: "));
    ingest_ = ingest_v1::RelayIngest::NewStub(
        grpc::CreateChannel(address_in(ready, "ingest"), grpc::InsecureChannelCredentials()));
    wan_ = v1::KvEventRelay::NewStub(grpc::CreateChannel(wan_of(ready), grpc::InsecureChannelCredentials()));
  }
  ~RelayProcess() {
    kill(child_.pid, SIGTERM);
    wait_exit(child_.pid);
    close(child_.output);
  }

  ingest_v1::RelayState state() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ingest_v1::RelayState state;
    REQUIRE(ingest_->GetState(&context, {}, &state).ok());
    return state;
  }

  // GetState once both ranks have applied the engines' batch `seq` and it is published.
  ingest_v1::PoolState settled(std::uint64_t seq) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      const auto s = state();
      if (s.pools_size() == 1 && !s.pools(0).publication_pending() && s.endpoints_size() == 1) {
        int done = 0;
        for (const auto& source : s.endpoints(0).sources()) done += source.last_sequence() == seq ? 1 : 0;
        if (done == 2) return s.pools(0);
      }
      INFO(s.DebugString());
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
  }

  // The first load window that covers both ranks.
  v1::KvPoolLoadEntry complete_load() {
    v1::SubscribeKvPoolLoadRequest request;
    request.set_subscriber_id("test");
    request.set_contract_marker(kMarker);
    StreamReader<v1::KvPoolLoadUpdate> load(
        request, [&](grpc::ClientContext* c, const auto& r) { return wan_->SubscribeKvPoolLoad(c, r); });
    const auto window = load.until([](const v1::KvPoolLoadUpdate& update) {
      return update.pools_size() == 1 && update.pools(0).kv_observed_ranks() == 2;
    });
    REQUIRE(window.has_value());
    load.cancel();
    return window->pools(0);
  }

 private:
  Child child_;
  std::unique_ptr<ingest_v1::RelayIngest::Stub> ingest_;
  std::unique_ptr<v1::KvEventRelay::Stub> wan_;
};

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
    return nlohmann::json{{"op", "random"}, {"seed", seed}, {"batches", 100}, {"events_per_batch", 4}, {"blocks_per_store", 2}};
  };
  const std::uint64_t seq = FakeEngineProcess::seq_of(rank0.command(random(1)));
  REQUIRE(FakeEngineProcess::seq_of(rank1.command(random(2))) == seq);
  const auto a = first.settled(seq);
  const auto b = second.settled(seq);
  CHECK(a.unique_blocks() > 0);
  CHECK(a.unique_blocks() == b.unique_blocks());
  CHECK(a.filter_digest() == b.filter_digest());
  CHECK(a.active_sources() == 2);

  for (RelayProcess* relay : {&first, &second}) {
    const auto load = relay->complete_load();
    CHECK(load.kv_used_blocks() == 1024 + 2048);  // round(0.25 x 4096) + round(0.5 x 4096)
    CHECK(load.total_kv_blocks() == 2 * 4096);
  }
}
