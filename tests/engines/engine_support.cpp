#include "tests/engines/engine_support.hpp"

#include <catch2/catch.hpp>

namespace kvrelay::test {

ingest_v1::PutWorkerRequest engine_worker(std::uint64_t worker_id, const std::vector<FakeEngineProcess*>& engines,
                                          WorkerShape shape, const std::string& metrics_url) {
  shape.push_sources = false;
  shape.dp_size = static_cast<std::uint32_t>(engines.size());
  auto request = put_worker_request(kEngineBackend, worker_id, shape);
  for (std::size_t rank = 0; rank < engines.size(); ++rank) {
    auto* source = request.add_kv_sources();
    source->set_dp_rank(static_cast<std::uint32_t>(rank));
    source->mutable_zmq()->set_endpoint(engines[rank]->pub());
    if (engines[rank]->replay() != "-") source->mutable_zmq()->set_replay_endpoint(engines[rank]->replay());
  }
  if (!metrics_url.empty()) {
    request.mutable_engine_metrics()->set_url(metrics_url);
    request.mutable_engine_metrics()->set_kind(ingest_v1::ENGINE_KIND_VLLM);
    request.mutable_engine_metrics()->set_interval_ms(100);
  }
  return request;
}

ingest_v1::RelayState await_state(TestRelay& relay, const std::function<bool(const ingest_v1::RelayState&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    auto state = relay.get_state();
    if (done(state)) return state;
    INFO(state.DebugString());
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
}

const ingest_v1::SourceState* find_source(const ingest_v1::RelayState& state, std::uint64_t worker_id,
                                          std::uint32_t rank) {
  for (const auto& endpoint : state.endpoints()) {
    if (endpoint.endpoint().component() != kEngineBackend.component()) continue;
    for (const auto& source : endpoint.sources()) {
      if (source.worker_id() == worker_id && source.dp_rank() == rank) return &source;
    }
  }
  return nullptr;
}

ingest_v1::RelayState await_engine_seq(TestRelay& relay, std::uint64_t worker_id, std::uint32_t rank,
                                       std::uint64_t seq) {
  return await_state(relay, [&](const ingest_v1::RelayState& state) {
    const auto* source = find_source(state, worker_id, rank);
    return source != nullptr && source->has_last_sequence() && source->last_sequence() == seq;
  });
}

const ingest_v1::PoolState& engine_pool(const ingest_v1::RelayState& state) {
  for (const auto& pool : state.pools()) {
    if (pool.serving_endpoint().component() == kEngineBackend.component()) return pool;
  }
  FAIL("no pool for " << kEngineBackend.ShortDebugString());
  throw std::logic_error("unreachable");
}

ingest_v1::PoolState settled_pool(TestRelay& relay, std::uint64_t seq, std::uint32_t rank) {
  await_engine_seq(relay, 1, rank, seq);
  const auto state = await_state(relay, [](const ingest_v1::RelayState& s) {
    return s.pools_size() > 0 && !engine_pool(s).publication_pending();
  });
  return engine_pool(state);
}

ingest_v1::PoolState push_twin(ingest_v1::PutWorkerRequest worker, EngineWorkload& workload,
                               const std::vector<EngineBatch>& batches) {
  TestRelay relay;
  const std::uint32_t ranks = static_cast<std::uint32_t>(worker.kv_sources_size());
  worker.clear_kv_sources();
  worker.clear_engine_metrics();
  for (std::uint32_t rank = 0; rank < ranks; ++rank) {
    auto* source = worker.add_kv_sources();
    source->set_dp_rank(rank);
    source->mutable_push();
  }
  relay.put_worker(worker);
  std::vector<ingest_v1::KvEventBatch> pushed;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = worker.endpoint();
    batch.set_worker_id(worker.worker_id());
    batch.set_sequence(i);
    workload.push_events(batches[i], batch);
    pushed.push_back(std::move(batch));
  }
  REQUIRE(relay.publish(pushed).batches_applied() == batches.size());
  const auto state = await_state(relay, [](const ingest_v1::RelayState& s) {
    return s.pools_size() > 0 && !engine_pool(s).publication_pending();
  });
  return engine_pool(state);
}

}  // namespace kvrelay::test
