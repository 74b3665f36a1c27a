// The ingest plane's handling of bad input: clear errors, counted rejections, and a relay
// that keeps serving (docs/protocol/decisions.md#d16, docs/protocol/decisions.md#d17,
// docs/protocol/decisions.md#d18).
#include <catch2/catch.hpp>

#include <limits>
#include <thread>

#include "core/ckf.hpp"
#include "core/token_hashing.hpp"
#include "tests/integration/harness.hpp"
#include "tests/integration/scrape.hpp"
#include "tests/log_capture.hpp"

using namespace kvrelay::test;
namespace ckf = kvrelay::ckf;
namespace hashing = kvrelay::hashing;

namespace {

std::uint64_t unique_blocks(TestRelay& relay) {
  const auto state = relay.get_state();
  REQUIRE(state.pools_size() == 1);
  return state.pools(0).unique_blocks();
}

}  // namespace

TEST_CASE("malformed unary calls answer INVALID_ARGUMENT naming the field", "[ingest]") {
  kvrelay::RelayOptions options = loopback_options();
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto request = put_worker_request(kBackend, 1);
  std::string rpc = "PutWorker";  // the call each section refuses once

  SECTION("endpoint text") {
    request.mutable_endpoint()->set_component(" backend");
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("endpoint.component"));
  }
  SECTION("missing card") {
    request.clear_card();
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("card"));
  }
  SECTION("a KV source outside the worker's ranks (docs/protocol/decisions.md#d18)") {
    request.mutable_kv_sources(0)->set_dp_rank(3);
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("kv_sources[0].dp_rank"));
  }
  SECTION("a replay endpoint without a port (libzmq would refuse it only when a replay starts)") {
    request.mutable_kv_sources(0)->mutable_zmq()->set_endpoint("tcp://engine:5557");
    request.mutable_kv_sources(0)->mutable_zmq()->set_replay_endpoint("tcp://engine");
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(),
               Catch::Contains("kv_sources[0].zmq.replay_endpoint: 'tcp://engine' names no port"));
  }
  SECTION("an ipc path longer than a Unix socket address holds") {
    request.mutable_kv_sources(0)->mutable_zmq()->set_endpoint("ipc:///" + std::string(107, 'p'));
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("kv_sources[0].zmq.endpoint: the ipc:// path has 108 bytes"));
  }
  SECTION("an engine metrics URL whose port is out of range") {
    request.mutable_engine_metrics()->set_url("http://engine:99999999999/metrics");
    request.mutable_engine_metrics()->set_kind(ingest_v1::ENGINE_KIND_VLLM);
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("engine_metrics.url"));
    CHECK_THAT(status.error_message(), Catch::Contains("port '99999999999' is not a number from 1 to 65535"));
  }
  SECTION("an engine metrics interval too short to scrape") {
    request.mutable_engine_metrics()->set_url("http://engine:9000/metrics");
    request.mutable_engine_metrics()->set_kind(ingest_v1::ENGINE_KIND_VLLM);
    request.mutable_engine_metrics()->set_interval_ms(99);
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(),
               Catch::Contains("engine_metrics.interval_ms: 99 is not 0 (1 000) or from 100 to 3600000"));
  }
  SECTION("an unknown worker type in needs") {
    request.mutable_card()->add_needs()->add_all_of(ingest_v1::WORKER_TYPE_UNSET);
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("card.needs[0].all_of[0]"));
  }
  SECTION("a name that is not UTF-8: the request does not parse (gRPC itself answered UNIMPLEMENTED)") {
    request.mutable_endpoint()->set_namespace_("pro\xff");
    const auto status = relay.put_worker_status(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("does not parse as a kvrelay.ingest.v1.PutWorkerRequest"));
  }
  SECTION("availability without an endpoint") {
    rpc = "SetAvailability";
    grpc::ClientContext context;
    ingest_v1::SetAvailabilityResponse response;
    const auto status = relay.ingest().SetAvailability(&context, ingest_v1::SetAvailabilityRequest{}, &response);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("endpoint"));
  }
  // Counted once, under its RPC; nothing of it applied, and the relay still serves.
  const Scrape counted = scrape(relay);
  CHECK(counted.count("kv_relay_ingest_invalid_requests_total", {{"rpc", rpc}}) == 1);
  CHECK(counted.value("kv_relay_ingest_invalid_requests_total", {{"rpc", "RemoveWorker"}}) ==
        0.0);  // at 0 from the start
  CHECK(relay.get_state().endpoints_size() == 0);
  relay.put_worker(put_worker_request(kBackend, 1));
  CHECK(relay.get_state().endpoints_size() == 1);
}

TEST_CASE("a worker whose card has problems is accepted and reports its conflicts", "[ingest]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  auto request = put_worker_request(kBackend, 1);
  request.mutable_card()->set_kv_cache_block_size(0);
  const auto response = relay.put_worker(request);
  REQUIRE(response.conflicts_size() >= 1);
  const auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 1);
  CHECK_FALSE(state.endpoints(0).pool_materialized());
  CHECK(state.endpoints(0).conflicts_size() == response.conflicts_size());
  // Each is logged once, as it appears: the same card again logs nothing more.
  const std::string conflict = "[warning] endpoint prod/backend/generate: " + response.conflicts(0);
  CHECK(log.count({conflict}) == 1);
  relay.put_worker(request);
  CHECK(log.count({conflict}) == 1);
}

TEST_CASE("endpoints whose domains share one PoolId all report the conflict and none holds the pool", "[ingest]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  const auto second = endpoint_ref("prod", "second");
  // One explicit routing scope, the same model and block size: one domain, one PoolId.
  auto first_worker = put_worker_request(kBackend, 1);
  (*first_worker.mutable_card()->mutable_routing_scope_identity())["pool"] = "shared";
  REQUIRE(relay.put_worker(first_worker).conflicts_size() == 0);
  await_single_pool(*catalog);
  // The second endpoint has no active source, and still takes the pool from the first.
  WorkerShape sourceless;
  sourceless.push_sources = false;
  auto second_worker = put_worker_request(second, 2, sourceless);
  (*second_worker.mutable_card()->mutable_routing_scope_identity())["pool"] = "shared";
  const auto response = relay.put_worker(second_worker);
  REQUIRE(response.conflicts_size() == 1);
  CHECK(response.conflicts(0) ==
        "PoolMaterialization: pool is claimed by multiple serving endpoints: prod/backend/generate, "
        "prod/second/generate");
  await_catalog(*catalog, 0);
  auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 2);
  for (const auto& endpoint : state.endpoints()) {
    CHECK_FALSE(endpoint.pool_materialized());
    CHECK(endpoint.conflicts_size() == 1);
  }
  relay.remove_worker(second, 2);
  await_single_pool(*catalog);
  state = relay.get_state();
  REQUIRE(state.endpoints_size() == 1);
  CHECK(state.endpoints(0).pool_materialized());
  CHECK(state.endpoints(0).conflicts_size() == 0);
}

TEST_CASE("a change of the workers' kv_state_endpoint binds the pool anew: a new generation", "[ingest]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto first = await_single_pool(*catalog);
  relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, 0x11}})});
  auto request = put_worker_request(kBackend, 1);
  *request.mutable_card()->mutable_runtime_config()->mutable_kv_state_endpoint() = endpoint_ref("prod", "kv-state");
  REQUIRE(relay.put_worker(request).conflicts_size() == 0);
  REQUIRE(catalog->until([&](const v1::KvPoolCatalogUpdate& update) {
    return update.snapshot().pools_size() == 1 &&
           update.snapshot().pools(0).producer().layout_generation() > first.layout_generation();
  }));
  CHECK(only_pool(relay).unique_blocks() == 0);  // the new generation starts empty
  // The same value again changes nothing.
  const auto second = only_pool(relay);
  REQUIRE(relay.put_worker(request).conflicts_size() == 0);
  CHECK(only_pool(relay).layout_generation() == second.layout_generation());
}

TEST_CASE("workers that disagree on kv_state_endpoint leave their endpoint without a pool, still serving", "[ingest]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  await_single_pool(*catalog);
  auto elsewhere = put_worker_request(kBackend, 2);
  *elsewhere.mutable_card()->mutable_runtime_config()->mutable_kv_state_endpoint() = endpoint_ref("prod", "kv-state");
  relay.put_worker(elsewhere);
  await_catalog(*catalog, 0);
  auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 1);
  CHECK_FALSE(state.endpoints(0).pool_materialized());
  CHECK(state.endpoints(0).worker_ids_size() == 2);

  // Serving goes on: the endpoint is READY, a member with no pool.
  relay.set_availability(kBackend, {1, 2});
  auto readiness = watch_readiness(relay);
  const auto ready = readiness->until([](const v1::ServingReadinessUpdate& update) {
    return update.entries_size() == 1 && update.entries(0).state() == v1::SERVING_READINESS_STATE_READY;
  });
  REQUIRE(ready.has_value());
  REQUIRE(ready->entries(0).members_size() == 1);
  CHECK_FALSE(ready->entries(0).members(0).has_pool_id());

  // One value again: the pool comes back.
  relay.remove_worker(kBackend, 2);
  await_single_pool(*catalog);
}

TEST_CASE("batches: unknown sources and malformed batches are counted, the stream goes on", "[ingest]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  relay.put_worker(put_worker_request(kBackend, 1));
  std::vector<ingest_v1::KvEventBatch> batches;
  batches.push_back(stored_batch(kBackend, 1, 0, 1, 0, {{10, 100}}));
  batches.push_back(stored_batch(kBackend, 2, 0, 1, 0, {{11, 101}}));  // unknown worker
  batches.push_back(stored_batch(kBackend, 1, 1, 1, 0, {{12, 102}}));  // undeclared rank
  batches.push_back(stored_batch(endpoint_ref("prod", "nobody"), 1, 0, 1, 0, {{13, 103}}));
  auto no_data = stored_batch(kBackend, 1, 0, 1, 1, {{14, 104}});
  no_data.add_events();  // an event with no data rejects the whole batch
  batches.push_back(no_data);
  auto bad_tier = stored_batch(kBackend, 1, 0, 1, 1, {{15, 105}});
  bad_tier.mutable_events(0)->set_tier(static_cast<ingest_v1::StorageTier>(42));
  batches.push_back(bad_tier);
  auto empty_block = stored_batch(kBackend, 1, 0, 1, 1, {{16, 106}});
  empty_block.mutable_events(0)->mutable_stored()->mutable_blocks(0)->clear_tokens_hash();
  batches.push_back(empty_block);
  batches.push_back(stored_batch(kBackend, 1, 0, 1, 1, {{17, 107}}));  // the expected next sequence

  const auto tally = relay.publish(batches);
  CHECK(tally.batches_applied() == 2);
  CHECK(tally.batches_rejected() == 6);
  CHECK(tally.source_resets() == 0);
  CHECK(unique_blocks(relay) == 2);
  // A refusal is logged with the source it names (those within the next second are held back).
  CHECK(log.count({"[warning] refused KV event batch from endpoint=prod/backend/generate worker=2 rank=0 epoch=1 "
                   "sequence=0: no pool, worker or push source is declared for it"}) == 1);
  CHECK(log.count({"[warning] rejected KV event batch from ipv4:127.0.0.1:"}) >= 1);
}

TEST_CASE("batch sequencing: duplicates, gaps and new epochs", "[ingest]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  relay.put_worker(put_worker_request(kBackend, 1));
  auto tally =
      relay.publish({stored_batch(kBackend, 1, 0, 5, 0, {{1, 11}}), stored_batch(kBackend, 1, 0, 5, 1, {{2, 12}})});
  CHECK(tally.batches_applied() == 2);
  CHECK(unique_blocks(relay) == 2);

  SECTION("a duplicate is rejected without a reset") {
    tally = relay.publish({stored_batch(kBackend, 1, 0, 5, 1, {{3, 13}})});
    CHECK(tally.batches_rejected() == 1);
    CHECK(tally.source_resets() == 0);
    CHECK(unique_blocks(relay) == 2);
    CHECK(log.count({"refused KV event batch from endpoint=prod/backend/generate worker=1 rank=0 epoch=5 sequence=1: "
                     "its source already sent this sequence in this epoch"}) == 1);
  }
  SECTION("a gap cold-resets the source, then applies") {
    tally = relay.publish({stored_batch(kBackend, 1, 0, 5, 7, {{3, 13}})});
    CHECK(tally.batches_applied() == 1);
    CHECK(tally.source_resets() == 1);
    CHECK(unique_blocks(relay) == 1);
    CHECK(log.count({"[info] KV source reset (sequence_gap): its blocks leave the pool; batch from "
                     "endpoint=prod/backend/generate worker=1 rank=0 epoch=5 sequence=7"}) == 1);
  }
  SECTION("the last sequence of all is malformed: it leaves no next one") {
    tally = relay.publish({stored_batch(kBackend, 1, 0, 5, std::numeric_limits<std::uint64_t>::max(), {{3, 13}})});
    CHECK(tally.batches_rejected() == 1);
    CHECK(tally.source_resets() == 0);
    CHECK(unique_blocks(relay) == 2);
  }
  SECTION("a new epoch cold-resets the source, then applies") {
    tally =
        relay.publish({stored_batch(kBackend, 1, 0, 6, 0, {{3, 13}}), stored_batch(kBackend, 1, 0, 6, 1, {{4, 14}})});
    CHECK(tally.batches_applied() == 2);
    CHECK(tally.source_resets() == 1);
    CHECK(unique_blocks(relay) == 2);
  }
}

TEST_CASE("lineage errors reject one event, removing a worker drops its blocks", "[ingest]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  WorkerShape shape;
  shape.dp_size = 2;
  relay.put_worker(put_worker_request(kBackend, 1, shape));
  relay.put_worker(put_worker_request(kBackend, 2));
  auto batch = stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}, {2, 12}});
  auto* orphan = batch.add_events()->mutable_stored();  // names a parent the source never stored
  orphan->set_parent_block_hash(999);
  orphan->add_blocks()->set_block_hash(3);
  orphan->mutable_blocks(0)->set_tokens_hash(13);
  auto* child = batch.add_events()->mutable_stored();
  child->set_parent_block_hash(2);
  child->add_blocks()->set_block_hash(4);
  child->mutable_blocks(0)->set_tokens_hash(14);
  auto tally = relay.publish({batch, stored_batch(kBackend, 2, 0, 1, 0, {{1, 11}})});
  CHECK(tally.batches_applied() == 2);
  CHECK(unique_blocks(relay) == 3);  // 11, its child and grandchild; worker 2 shares the root
  CHECK(log.count({"[warning] pool endpoint=prod/backend/generate: rejected an event of worker 1 rank 0: "
                   "ParentBlockNotFound"}) == 1);

  relay.remove_worker(kBackend, 1);
  CHECK(unique_blocks(relay) == 1);
}

TEST_CASE("token blocks are hashed with the pool's semantics", "[ingest]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  const auto worker = put_worker_request(kBackend, 1);
  relay.put_worker(worker);
  const v1::ProducerIdentity producer = await_single_pool(*catalog);
  const std::vector<std::uint32_t> token_ids{0, 1, 2, 3};
  ingest_v1::KvEventBatch batch = stored_batch(kBackend, 1, 0, 1, 0, {{1, 0}});
  auto* tokens = batch.mutable_events(0)->mutable_stored()->mutable_blocks(0)->mutable_tokens();
  for (std::uint32_t t : token_ids) tokens->add_token_ids(t);
  auto too_short = stored_batch(kBackend, 1, 0, 1, 1, {{2, 0}});
  too_short.mutable_events(0)->mutable_stored()->mutable_blocks(0)->mutable_tokens()->add_token_ids(9);
  const auto tally = relay.publish({batch, too_short});
  CHECK(tally.batches_applied() == 2);
  CHECK(unique_blocks(relay) == 1);

  // The block in the filter is the one the worker's card gives those tokens: its block size,
  // the standard format, no LoRA or namespace salt; hashed here by the consumer-side code.
  REQUIRE(worker.card().kv_cache_block_size() == token_ids.size());
  const auto local = hashing::block_hashes(token_ids, {.kv_block_size = 4});
  REQUIRE(local.size() == 1);
  const Replica replica = replicate(relay, producer);
  const ckf::Addressing addressing(producer.ckf_format().seed(), producer.ckf_format().bucket_count());
  CHECK(ckf::contains(replica.words(), addressing.probe(hashing::sequence_hashes(local)[0])));
  CHECK_FALSE(ckf::contains(replica.words(), addressing.probe(hashing::sequence_hashes(
                                                 hashing::block_hashes(token_ids, {.kv_block_size = 2}))[0])));
}

TEST_CASE("batches of one stream apply in the order they were sent", "[ingest]") {
  TestRelay relay;
  relay.put_worker(put_worker_request(kBackend, 1));
  std::vector<ingest_v1::KvEventBatch> batches;
  for (std::uint64_t i = 0; i < 3000; ++i) batches.push_back(stored_batch(kBackend, 1, 0, 1, i, {{i + 1, i + 100}}));
  const auto tally = relay.publish(batches);
  CHECK(tally.batches_applied() == 3000);
  CHECK(tally.batches_rejected() == 0);
  CHECK(tally.source_resets() == 0);  // a reordered pair would show up as a gap and a duplicate
  CHECK(unique_blocks(relay) == 3000);
}

// Batches no longer queue behind membership (docs/architecture.md#batch-routing), so a
// removal races the removed worker's own stream. Whatever the interleaving, the worker's lane
// is retired before its pool drops the worker's blocks: none of them may survive.
TEST_CASE("removing a worker while its batches stream leaves none of its blocks", "[ingest]") {
  TestRelay relay;
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.put_worker(put_worker_request(kBackend, 2));  // keeps the pool materialized
  CHECK(relay.publish({stored_batch(kBackend, 2, 0, 1, 0, {{1, 11}})}).batches_applied() == 1);

  constexpr std::uint64_t kBatches = 20'000;  // far more than go by before the removal
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kStreamDeadline);
  ingest_v1::PublishKvEventsResponse response;
  auto stream = relay.ingest().PublishKvEvents(&context, &response);
  std::jthread feeder([&] {  // joined however the test ends
    for (std::uint64_t i = 0; i < kBatches; ++i) {
      if (!stream->Write(stored_batch(kBackend, 1, 0, 1, i, {{i + 100, (i + 100) * 0x9E3779B97F4A7C15ULL}}))) break;
    }
    stream->WritesDone();
  });
  // Removed once some of its blocks are in the pool, while the rest are still on their way.
  for (std::size_t polls = 0; unique_blocks(relay) < 100; ++polls) REQUIRE(polls < 100'000);
  relay.remove_worker(kBackend, 1);
  feeder.join();
  REQUIRE(stream->Finish().ok());

  CHECK(response.batches_applied() + response.batches_rejected() == kBatches);  // those after: unknown source
  CHECK(unique_blocks(relay) == 1);                                             // worker 2's block alone
}
