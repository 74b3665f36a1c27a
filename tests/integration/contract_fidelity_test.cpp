// Where a router would otherwise see what upstream would not show it: snapshot admission
// order, availability lifetime, source resets after a rebuild, fencing outcomes, PutWorker
// validation and GetState at the published sequence (docs/protocol/README.md).
#include <catch2/catch.hpp>

#include "core/xxh3.hpp"
#include "tests/integration/harness.hpp"
#include "tests/integration/replica.hpp"

using namespace kvrelay::test;

namespace {

// 2^21 buckets: a 16 MiB lane sent as four 4 MiB chunks. A client that does not read stalls
// its stream before the last chunk (the transport buffers less than 12 MiB), so the stream
// keeps its encoder permit.
kvrelay::RelayOptions stalling_snapshot_options() {
  kvrelay::RelayOptions options = loopback_options();
  options.expected_unique_blocks = 1 << 22;
  options.snapshot_encoders = 1;
  options.publication_threshold = 1;
  return options;
}

ingest_v1::KvEventBatch removed_batch(std::uint64_t sequence, std::uint64_t engine_id) {
  ingest_v1::KvEventBatch batch;
  *batch.mutable_endpoint() = kBackend;
  batch.set_worker_id(1);
  batch.set_source_epoch(1);
  batch.set_sequence(sequence);
  batch.add_events()->mutable_removed()->add_block_hashes(engine_id);
  return batch;
}

// Brings the pool to a published sequence of at least `target`, one block per batch.
void publish_until_sequence(TestRelay& relay, std::uint64_t target, std::uint64_t& next_batch) {
  while (only_pool(relay).sequence() < target) {
    const std::uint64_t b = next_batch++;
    relay.publish({stored_batch(kBackend, 1, 0, 1, b, {{b + 1, 0x1000 + b}})});
  }
}

// Reads `stream` into `replica` until it matches GetState's published sequence and digest.
void follow_to_published_state(TestRelay& relay, StreamReader<v1::FilterUpdate>& stream, Replica& replica) {
  for (;;) {
    const auto pool = only_pool(relay);
    while (!replica.installed() || replica.sequence() < pool.sequence()) {
      const auto frame = stream.next();
      REQUIRE(frame.has_value());
      replica.apply(*frame);
    }
    if (replica.sequence() == pool.sequence()) {
      CHECK(replica.digest() == pool.filter_digest());
      return;
    }
  }
}

v1::ProducerIdentity await_new_generation(StreamReader<v1::KvPoolCatalogUpdate>& catalog,
                                          const v1::ProducerIdentity& old) {
  const auto rebuilt = catalog.until([&](const v1::KvPoolCatalogUpdate& u) {
    return u.snapshot().pools_size() == 1 &&
           u.snapshot().pools(0).producer().layout_generation() != old.layout_generation();
  });
  REQUIRE(rebuilt.has_value());
  return rebuilt->snapshot().pools(0).producer();
}

}  // namespace

TEST_CASE("snapshot admission: a subscriber waiting for its encoder permit cannot lag", "[fidelity][limits]") {
  TestRelay relay(stalling_snapshot_options());
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);

  auto stalled_client = relay.separate_wan_client();
  auto holder = subscribe_pool(relay, producer, "holder", stalled_client.get());  // never reads
  REQUIRE(relay.runtime().await_open_streams_at_least("hubs", 1));                // it holds the permit
  auto waiter = subscribe_pool(relay, producer, "waiter");
  REQUIRE(relay.runtime().await_open_streams_at_least("pool", 2));

  // Deltas until the holder's 16-frame outbox overflows: it lags out and gives its encoder
  // permit back. The waiter saw none of them while it waited, so it must not lag with it.
  std::uint64_t next_batch = 0;
  for (std::size_t batches = 0; relay.runtime().serving_streams("pool") == 2; ++batches) {
    REQUIRE(batches < 10'000);
    publish_until_sequence(relay, only_pool(relay).sequence() + 1, next_batch);
  }
  CHECK(holder->ending().second == "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED");

  const auto first = waiter->next();
  REQUIRE(first.has_value());
  CHECK(first->kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  CHECK(first->sequence() > 16);  // the image is taken when the permit is granted
  Replica replica(producer);
  replica.apply(*first);
  follow_to_published_state(relay, *waiter, replica);
  publish_until_sequence(relay, only_pool(relay).sequence() + 8, next_batch);
  follow_to_published_state(relay, *waiter, replica);
}

TEST_CASE("snapshot admission: waiting subscribers pin no lane copy", "[fidelity][limits]") {
  TestRelay relay(stalling_snapshot_options());
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  const std::uint64_t lane_bytes = producer.ckf_format().bucket_count() * 8;

  auto stalled_client = relay.separate_wan_client();
  auto holder = subscribe_pool(relay, producer, "holder", stalled_client.get());
  REQUIRE(relay.runtime().await_open_streams_at_least("hubs", 1));
  std::uint64_t next_batch = 0;
  std::vector<std::unique_ptr<StreamReader<v1::FilterUpdate>>> waiters;
  for (std::size_t i = 0; i < 3; ++i) {
    // A new sequence before each: a stream attached now would need an image of its own.
    publish_until_sequence(relay, only_pool(relay).sequence() + 1, next_batch);
    waiters.push_back(subscribe_pool(relay, producer, "waiter-" + std::to_string(i)));
    REQUIRE(relay.runtime().await_open_streams_at_least("pool", 2 + i));
  }
  relay.get_state();  // every waiter's admission has reached its actors by now
  CHECK(relay.runtime().snapshot_image_bytes() == lane_bytes);  // the holder's image only

  holder->cancel();
  for (auto& waiter : waiters) {
    Replica replica(producer);
    while (!replica.installed()) {
      const auto frame = waiter->next();
      REQUIRE(frame.has_value());
      replica.apply(*frame);
    }
  }
  REQUIRE(relay.runtime().await_open_streams_at_most("pool", 3));
  // Every snapshot has been sent: no stream and no idle publisher keeps a copy.
  for (auto& waiter : waiters) waiter->cancel();
  REQUIRE(relay.runtime().await_open_streams_at_most("pool", 0));
  CHECK(relay.runtime().snapshot_image_bytes() == 0);
}

TEST_CASE("availability lives and dies with membership: a returning endpoint is UNKNOWN", "[fidelity][readiness]") {
  TestRelay relay;
  auto readiness = watch_readiness(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.set_availability(kBackend, {1});
  REQUIRE(readiness->until([](const v1::ServingReadinessUpdate& u) {
    return u.entries_size() == 1 && u.entries(0).state() == v1::SERVING_READINESS_STATE_READY;
  }));
  relay.remove_worker(kBackend, 1);
  REQUIRE(readiness->until([](const v1::ServingReadinessUpdate& u) { return u.entries_size() == 0; }));
  CHECK(relay.get_state().endpoints_size() == 0);

  relay.put_worker(put_worker_request(kBackend, 1));  // the same worker id comes back
  const auto back = readiness->until([](const v1::ServingReadinessUpdate& u) { return u.entries_size() == 1; });
  REQUIRE(back.has_value());
  CHECK(back->entries(0).state() == v1::SERVING_READINESS_STATE_UNKNOWN);
  const auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 1);
  CHECK_FALSE(state.endpoints(0).availability_known());
}

TEST_CASE("a rebuilt generation resets every source of its pool", "[fidelity][ingest]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  CHECK(relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}, {2, 22}})}).source_resets() == 0);

  WorkerShape new_domain;
  new_domain.block_size = 8;  // another indexer domain: a new generation with an empty filter
  relay.put_worker(put_worker_request(kBackend, 1, new_domain));
  await_new_generation(*catalog, producer);

  // The feeder learns it must replay: the next batch, in sequence, reports a reset.
  const auto next = relay.publish({stored_batch(kBackend, 1, 0, 1, 1, {{3, 33}}, 2)});
  CHECK(next.source_resets() == 1);
  const auto replay = relay.publish({stored_batch(kBackend, 1, 0, 1, 2, {{1, 11}, {2, 22}, {3, 33}})});
  CHECK(replay.source_resets() == 0);
  CHECK(only_pool(relay).unique_blocks() == 3);
}

TEST_CASE("fencing: the detecting stream ends INVALID_PUBLICATION, the others PUBLICATION_UNAVAILABLE",
          "[fidelity][fencing]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  auto detector = subscribe_pool(relay, producer, "detector");  // the first attached: it gets the broken delta
  Replica replica(producer);
  replica.apply(*detector->next());
  auto other = subscribe_pool(relay, producer, "other");
  Replica other_replica(producer);
  other_replica.apply(*other->next());

  relay.runtime().inject_publication_fault_for_test();
  relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}})});
  while (auto frame = detector->next()) replica.apply(*frame);  // never the broken delta
  CHECK(detector->finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(detector->reason() == "RELAY_ERROR_REASON_INVALID_PUBLICATION");
  while (auto frame = other->next()) other_replica.apply(*frame);
  CHECK(other->finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(other->reason() == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE");

  const auto rebuilt = await_new_generation(*catalog, producer);
  CHECK(relay.publish({stored_batch(kBackend, 1, 0, 1, 1, {{2, 22}})}).source_resets() == 1);
  auto fresh = subscribe_pool(relay, rebuilt);
  Replica fresh_replica(rebuilt);
  follow_to_published_state(relay, *fresh, fresh_replica);
}

TEST_CASE("an index invariant violation fences and rebuilds the pool, resetting its sources", "[fidelity][fencing]") {
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto fenced = await_catalog(*catalog, 1);
  const auto producer = fenced.snapshot().pools(0).producer();
  auto stream = subscribe_pool(relay, producer);
  REQUIRE(stream->next().has_value());

  constexpr std::uint64_t kCanonical = 0xABCDEF;  // a chain's first block: its own local hash
  relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, kCanonical}})});
  relay.runtime().inject_index_fault_for_test(kCanonical);
  relay.publish({removed_batch(1, 1)});

  CHECK(stream->ending() ==
        std::pair{grpc::StatusCode::UNAVAILABLE, std::string("RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE")});
  const auto rebuilt = catalog->until([&](const v1::KvPoolCatalogUpdate& u) {
    return u.snapshot().pools_size() == 1 &&
           u.snapshot().pools(0).producer().layout_generation() != producer.layout_generation();
  });
  REQUIRE(rebuilt.has_value());
  CHECK(rebuilt->revision() == fenced.revision() + 2);  // withdrawn at once, rebuilt after a backoff
  CHECK(relay.publish({stored_batch(kBackend, 1, 0, 1, 2, {{2, 22}})}).source_resets() == 1);
  CHECK(only_pool(relay).unique_blocks() == 1);
}

TEST_CASE("PutWorker refuses a display_name that is empty or padded, and applies nothing", "[fidelity][ingest]") {
  TestRelay relay;
  const std::string name = GENERATE(std::string(""), std::string(" llama"), std::string("llama\t"));
  auto request = put_worker_request(kBackend, 1);
  request.mutable_card()->set_display_name(name);
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  const auto status = relay.ingest().PutWorker(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(status.error_message(), Catch::Contains("card.display_name"));
  CHECK(relay.get_state().endpoints_size() == 0);
}

TEST_CASE("GetState reports the published sequence and its digest, not changes waiting for publication",
          "[fidelity][ingest]") {
  kvrelay::RelayOptions options = loopback_options();
  options.publication_delay_ms = 600'000;  // nothing is published by the timer while the test runs
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(kBackend, 1));
  const auto producer = await_single_pool(*catalog);
  auto stream = subscribe_pool(relay, producer);
  Replica replica(producer);
  replica.apply(*stream->next());
  REQUIRE(replica.sequence() == 0);

  relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}})});  // one event: waits for the delay
  const auto waiting = only_pool(relay);
  CHECK(waiting.sequence() == 0);
  CHECK(waiting.filter_digest() == replica.digest());

  // A stream attaching gets the published state and leaves what is pending to the delay
  // (docs/protocol/pools.md#snapshot-admission).
  auto second = subscribe_pool(relay, producer, "second");
  const auto snapshot = second->next();
  REQUIRE(snapshot.has_value());
  CHECK(snapshot->sequence() == 0);
  Replica joined(producer);
  joined.apply(*snapshot);
  CHECK(joined.digest() == waiting.filter_digest());
  const auto still_waiting = only_pool(relay);
  CHECK(still_waiting.sequence() == 0);
  CHECK(still_waiting.filter_digest() == waiting.filter_digest());
}
