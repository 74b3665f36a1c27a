#pragma once
// What the engine-source tests share: workers whose sources are fake engines, and waiting
// for the relay's state to show what an engine sent.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tests/engines/fake_engine_process.hpp"
#include "tests/engines/workload.hpp"
#include "tests/integration/harness.hpp"

namespace kvrelay::test {

inline const auto kEngineBackend = endpoint_ref("prod", "engines");

// A worker whose rank r is fed by engines[r] (with its replay socket, if it has one).
ingest_v1::PutWorkerRequest engine_worker(std::uint64_t worker_id, const std::vector<FakeEngineProcess*>& engines,
                                          WorkerShape shape = {}, const std::string& metrics_url = "");

// Polls GetState (each poll a round trip through membership and every pool publisher) until
// `done` holds; REQUIREs that it does within 30 s.
ingest_v1::RelayState await_state(TestRelay& relay, const std::function<bool(const ingest_v1::RelayState&)>& done);

// The source (worker, rank) of kEngineBackend in a GetState answer, or nullptr.
const ingest_v1::SourceState* find_source(const ingest_v1::RelayState& state, std::uint64_t worker_id,
                                          std::uint32_t rank);

// Awaits the relay's source having applied the engine's batch `seq`.
ingest_v1::RelayState await_engine_seq(TestRelay& relay, std::uint64_t worker_id, std::uint32_t rank,
                                       std::uint64_t seq);

// The pool of kEngineBackend in a GetState answer; REQUIREs it.
const ingest_v1::PoolState& engine_pool(const ingest_v1::RelayState& state);

// The same worker with push sources, on a relay of its own fed `batches` of `workload` by
// push: its pool once everything is published.
ingest_v1::PoolState push_twin(ingest_v1::PutWorkerRequest worker, EngineWorkload& workload,
                               const std::vector<EngineBatch>& batches);

// The relay's pool after the engine's batch `seq` (of `rank` of worker 1), once published.
ingest_v1::PoolState settled_pool(TestRelay& relay, std::uint64_t seq, std::uint32_t rank = 0);

}  // namespace kvrelay::test
