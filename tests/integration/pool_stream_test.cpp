// Catalog and pool stream lifecycles through the ingest plane
// (docs/protocol/rpcs.md#watch-kv-pool-catalog, docs/protocol/rpcs.md#subscribe-kv-pool).
#include <catch2/catch.hpp>

#include <random>

#include "core/pool_label.hpp"
#include "tests/integration/harness.hpp"
#include "tests/integration/replica.hpp"
#include "tests/log_capture.hpp"

using namespace kvrelay::test;

TEST_CASE("catalog: starts empty at revision 0, attach and withdrawal move it by one", "[catalog]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  auto first = catalog->next();
  REQUIRE(first.has_value());
  CHECK(first->revision() == 0);
  CHECK(first->has_snapshot());
  CHECK(first->snapshot().pools_size() == 0);

  relay.put_worker(put_worker_request(kBackend, 1));
  const auto attached = await_catalog(*catalog, 1);
  CHECK(attached.revision() == 1);
  const auto& pool = attached.snapshot().pools(0);
  CHECK(pool.producer().layout_generation() == 1);
  CHECK(pool.producer().producer_incarnation() == relay.runtime().relay_incarnation());
  CHECK(pool.producer().pool_id().dc_id() == relay.runtime().dc_id());
  CHECK(pool.serving_endpoint().namespace_() == "prod");
  CHECK(pool.query_semantics().kv_block_size() == 4);
  CHECK(pool.query_semantics().hash_format() == v1::KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1);
  REQUIRE(pool.registrations_size() == 1);
  CHECK(pool.registrations(0).canonical_model_id() == "llama");
  CHECK(pool.pool_roles_size() == 1);

  relay.remove_worker(kBackend, 1);
  const auto withdrawn = await_catalog(*catalog, 0);
  CHECK(withdrawn.revision() == 2);
}

TEST_CASE("catalog: a call that changes nothing moves nothing, a registration change updates the pool in place",
          "[catalog]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto attached = await_catalog(*catalog, 1);
  REQUIRE(attached.revision() == 1);
  const auto producer = attached.snapshot().pools(0).producer();

  relay.put_worker(put_worker_request(kBackend, 1));  // the same card again
  auto with_alias = put_worker_request(kBackend, 1);
  with_alias.mutable_card()->add_aliases("llama-latest");
  relay.put_worker(with_alias);
  const auto updated = catalog->until([](const v1::KvPoolCatalogUpdate& u) {
    return u.snapshot().pools_size() == 1 && u.snapshot().pools(0).registrations(0).aliases_size() == 1;
  });
  REQUIRE(updated.has_value());
  CHECK(updated->revision() == 2);  // the repeated card moved nothing, the alias one revision
  CHECK(updated->snapshot().pools(0).registrations(0).aliases(0) == "llama-latest");
  CHECK(updated->snapshot().pools(0).producer().SerializeAsString() == producer.SerializeAsString());
}

TEST_CASE("catalog: pools are listed in PoolId order, whatever order their endpoints came in", "[catalog]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  const std::vector<std::string> components = {"a", "b", "c", "d"};
  for (std::size_t i = 0; i < components.size(); ++i) {
    WorkerShape shape;
    shape.model = "model-" + std::to_string(i);
    relay.put_worker(put_worker_request(endpoint_ref("prod", components[i]), 1, shape));
  }
  const auto listed = await_catalog(*catalog, components.size());
  // docs/protocol/pools.md#catalog-order, spelled out here.
  const auto order_key = [](const v1::KvPoolDescriptor& pool) {
    const auto& id = pool.producer().pool_id();
    const auto& domain = id.indexer_domain();
    return std::make_tuple(id.identity_version(), domain.cache_semantics().digest(),
                           static_cast<int>(domain.cache_semantics().source()), domain.routing_scope().digest(),
                           static_cast<int>(domain.routing_scope().source()), id.dc_id());
  };
  std::vector<std::string> listed_components;
  for (int i = 0; i + 1 < listed.snapshot().pools_size(); ++i) {
    CHECK(order_key(listed.snapshot().pools(i)) < order_key(listed.snapshot().pools(i + 1)));
  }
  for (const auto& pool : listed.snapshot().pools()) listed_components.push_back(pool.serving_endpoint().component());
  INFO("listed: " << listed_components[0] << listed_components[1] << listed_components[2] << listed_components[3]);
  CHECK(listed_components != components);  // the endpoints' own order would not pass
}

TEST_CASE("pool stream: snapshot, then contiguous deltas that rebuild the producer's filter", "[pool]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  WorkerShape shape;
  shape.dp_size = 2;
  relay.put_worker(put_worker_request(kBackend, 1, shape));
  const auto producer = await_single_pool(*catalog);

  EventScript script(42, kBackend, 1, 2);
  REQUIRE(relay.publish(script.next_batches(50)).batches_applied() == 50);

  auto stream = subscribe_pool(relay, producer);
  Replica replica(producer);
  auto first = stream->next();
  REQUIRE(first.has_value());
  CHECK(first->kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  CHECK(first->protocol_version() == 1);
  CHECK(first->contract_marker() == kMarker);
  CHECK(first->send_ts_us() > 0);
  replica.apply(*first);
  REQUIRE(replica.installed());

  // GetState reports the published sequence (changes still pending wait for the delay, which
  // may pass at any moment): the stream's deltas bring the replica to it, digest and all.
  const auto reach_published = [&] {
    const auto state = only_pool(relay.get_state());
    REQUIRE(replica.sequence() <= state.sequence());
    while (replica.sequence() < state.sequence()) {
      auto frame = stream->next();
      REQUIRE(frame.has_value());
      CHECK(frame->kind() == v1::FILTER_UPDATE_KIND_DELTA);
      CHECK(frame->producer().layout_generation() == producer.layout_generation());
      replica.apply(*frame);
    }
    REQUIRE(replica.sequence() == state.sequence());
    REQUIRE(replica.digest() == state.filter_digest());
  };
  reach_published();

  // Each round publishes at most 5 deltas (80 events at 16 per publication): well inside
  // the outbox, since this client reads only between rounds.
  for (int round = 0; round < 40; ++round) {
    REQUIRE(relay.publish(script.next_batches(10)).batches_applied() == 10);
    reach_published();
  }
  CHECK(only_pool(relay.get_state()).unique_blocks() > 0);
}

TEST_CASE("pool stream: a withdrawn generation ends its streams, the next one starts at 0", "[pool]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto first = await_single_pool(*catalog);
  auto stream = subscribe_pool(relay, first);
  REQUIRE(stream->next().has_value());

  // Without a KV source the endpoint cannot hold a pool; with one again it is a new generation.
  WorkerShape no_sources;
  no_sources.push_sources = false;
  relay.put_worker(put_worker_request(kBackend, 1, no_sources));
  CHECK(await_catalog(*catalog, 0).revision() == 2);
  while (stream->next()) {
  }
  const grpc::Status ended = stream->finish();
  CHECK(ended.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(stream->reason() == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");
  // Its log line says which pool, and why in the relay's words (the reason alone does not).
  CHECK(log.count(
            {"subscriber ended: rpc=SubscribeKvPool subscriber_id=test pool=" + kvrelay::pool_label(first.pool_id()) +
                 " layout_generation=" + std::to_string(first.layout_generation()) + " peer=",
             "reason=RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE (" + ended.error_message() + ")"}) == 1);

  relay.put_worker(put_worker_request(kBackend, 1));
  const auto second = await_single_pool(*catalog);
  CHECK(second.layout_generation() == first.layout_generation() + 1);
  CHECK(second.pool_id().SerializeAsString() == first.pool_id().SerializeAsString());
  auto next_stream = subscribe_pool(relay, second);
  auto snapshot = next_stream->next();
  REQUIRE(snapshot.has_value());
  CHECK(snapshot->sequence() == 0);
  CHECK(snapshot->producer().layout_generation() == second.layout_generation());
}

TEST_CASE("pool stream: a stalled subscriber lags alone, others go on", "[pool][lag]") {
  kvrelay::RelayOptions options = loopback_options();
  options.expected_unique_blocks = 1 << 20;  // one 4 MiB snapshot chunk
  options.stream_queue_frames = 4;
  options.publication_threshold = 8;  // one delta per batch of 8 events
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);

  auto stalled_client = relay.separate_wan_client();
  auto stalled = subscribe_pool(relay, producer, "stalled", stalled_client.get());  // not read until the end
  auto healthy = subscribe_pool(relay, producer, "healthy");
  Replica replica(producer);
  replica.apply(*healthy->next());

  EventScript script(7, kBackend, 1, 1);
  for (int round = 0; round < 40; ++round) {
    REQUIRE(relay.publish(script.next_batches(1)).batches_applied() == 1);
    const auto published = only_pool(relay.get_state());
    while (replica.sequence() < published.sequence()) {
      auto frame = healthy->next();
      REQUIRE(frame.has_value());
      replica.apply(*frame);
    }
    // Compared at the same sequence: a later publication may come at any moment.
    REQUIRE(replica.sequence() == published.sequence());
    REQUIRE(replica.digest() == published.filter_digest());
  }

  while (stalled->next()) {
  }
  CHECK(stalled->finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(stalled->reason() == "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED");
  CHECK(only_pool(relay.get_state()).subscribers() == 1);
}

TEST_CASE("relay shutdown ends open streams with PUBLICATION_UNAVAILABLE", "[pool]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  auto stream = subscribe_pool(relay, producer);
  REQUIRE(stream->next().has_value());
  relay.shutdown();
  while (stream->next()) {
  }
  CHECK(stream->finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(stream->reason() == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");
  while (catalog->next()) {
  }
  CHECK(catalog->finish().error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("pool stream: a publication too large for one delta ends the streams, resubscribers get it in a snapshot",
          "[pool]") {
  kvrelay::RelayOptions options = loopback_options();
  options.expected_unique_blocks = 1 << 20;  // 2^19 buckets
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  // 800 k blocks land in more buckets than one CBI1 delta can carry (349 525 images).
  std::vector<ingest_v1::KvEventBatch> batches;
  std::mt19937_64 rng(5);
  for (std::uint64_t b = 0; b < 800; ++b) {
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = kBackend;
    batch.set_worker_id(1);
    batch.set_sequence(b);
    auto* stored = batch.add_events()->mutable_stored();
    for (int i = 0; i < 1000; ++i) {
      auto* block = stored->add_blocks();
      block->set_block_hash(rng());
      block->set_tokens_hash(rng());
    }
    batches.push_back(std::move(batch));
  }
  REQUIRE(relay.publish(batches).batches_applied() == 800);
  auto stream = subscribe_pool(relay, producer);
  Replica before(producer);
  before.apply(*stream->next());
  REQUIRE(before.installed());

  // One Cleared event empties all of those buckets at once.
  ingest_v1::KvEventBatch clear;
  *clear.mutable_endpoint() = kBackend;
  clear.set_worker_id(1);
  clear.set_sequence(800);
  clear.add_events()->mutable_cleared();
  REQUIRE(relay.publish({clear}).batches_applied() == 1);
  while (stream->next()) {
  }
  CHECK(stream->finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(stream->reason() == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");

  auto again = subscribe_pool(relay, producer);  // same generation, a fresh snapshot
  Replica after(producer);
  after.apply(*again->next());
  REQUIRE(after.installed());
  CHECK(after.sequence() > before.sequence());
  const auto state = relay.get_state();
  CHECK(state.pools(0).unique_blocks() == 0);
  CHECK(after.digest() == state.pools(0).filter_digest());
  CHECK(std::all_of(after.words().begin(), after.words().end(), [](std::uint64_t w) { return w == 0; }));
}
