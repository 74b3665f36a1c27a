// The pool publisher alone, on virtual time: publication cadence (threshold per message, at
// most one delta per delay), early publication, fencing outcomes, GetState at the published
// sequence, and the snapshot a new stream gets.
#include <catch2/catch.hpp>

#include "actors/pool_publisher.hpp"
#include "core/xxh3.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

constexpr auto kDelay = std::chrono::milliseconds(10);
constexpr std::uint64_t kBuckets = 1024;

struct RecordingBatchSink {
  std::vector<BatchOutcome> outcomes;
};

// `events` stores of one fresh block each, from worker 1 rank 0.
EventBatchPtr stores(std::uint64_t first_block, std::size_t events) {
  auto batch = std::make_shared<ingest_v1::KvEventBatch>();
  batch->set_worker_id(1);
  for (std::size_t i = 0; i < events; ++i) {
    auto* block = batch->add_events()->mutable_stored()->add_blocks();
    block->set_block_hash(first_block + i);
    block->set_tokens_hash(0x9E3779B97F4A7C15ULL * (first_block + i));
  }
  return batch;
}

// `events` stored events of `blocks` chained fresh blocks each, from worker 1 rank `rank`.
EventBatchPtr chains(std::uint32_t rank, std::uint64_t first_block, std::size_t events, std::size_t blocks) {
  auto batch = std::make_shared<ingest_v1::KvEventBatch>();
  batch->set_worker_id(1);
  batch->set_dp_rank(rank);
  for (std::size_t e = 0; e < events; ++e) {
    auto* stored = batch->add_events()->mutable_stored();
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint64_t id = first_block + e * blocks + b;
      auto* block = stored->add_blocks();
      block->set_block_hash(id);
      block->set_tokens_hash(0x9E3779B97F4A7C15ULL * id);
    }
  }
  return batch;
}

struct PublisherUnderTest {
  ActorFixture& fixture;
  std::shared_ptr<Inbox> owner_inbox = std::make_shared<Inbox>();
  std::shared_ptr<RecordingBatchSink> sink = std::make_shared<RecordingBatchSink>();
  caf::actor owner;
  PoolPublisherActor publisher;

  PublisherUnderTest(ActorFixture& f, std::uint32_t threshold, std::uint32_t frames_per_s = 0,
                     std::uint64_t buckets = kBuckets)
      : fixture(f) {
    owner = spawn_recorder(fixture, owner_inbox);
    PublisherConfig config;
    config.spec.producer.set_layout_generation(5);
    config.spec.dc_id = 7;
    config.spec.seed = 42;
    config.spec.bucket_count = buckets;
    config.semantics = {4, hashing::HashFormat::kStandard};
    config.cadence = {threshold, kDelay, frames_per_s};
    config.owner = caf::actor_cast<PoolOwnerActor>(owner);
    publisher = fixture.spawn(pool_publisher, std::move(config));
    fixture.run();
  }

  // A recording stream attached to the publisher, admitted to `layout_generation`.
  std::pair<caf::actor, std::shared_ptr<Inbox>> attach(std::uint64_t layout_generation = 5) {
    auto inbox = std::make_shared<Inbox>();
    caf::actor stream = spawn_recorder(fixture, inbox);
    caf::anon_send(publisher, atoms::attach_atom_v, caf::actor_cast<PoolFrameSinkActor>(stream), layout_generation);
    fixture.run();
    return {stream, inbox};
  }

  void send(const EventBatchPtr& batch, SourceReset reset = SourceReset::kNone) {
    auto reply = std::make_shared<Reply<BatchOutcome>>(
        [sink = sink](const BatchOutcome& outcome) { sink->outcomes.push_back(outcome); }, BatchOutcome{.lost = true});
    caf::anon_send(publisher, atoms::apply_batch_atom_v, batch, reset, std::move(reply), std::int64_t{0});
    fixture.run();
  }

  ingest_v1::PoolState state() {
    auto report = std::make_shared<std::optional<PoolStateReport>>();
    fixture.spawn(
        [report](caf::event_based_actor* self, const PoolPublisherActor& target) {
          self->request(target, caf::infinite, atoms::pool_state_atom_v).then([report](const PoolStateReport& r) {
            *report = r;
          });
        },
        publisher);
    fixture.run();
    REQUIRE(report->has_value());
    return (*report)->state;
  }
};

// What GetState's filter_digest gives of a replica holding this image.
std::uint64_t digest_of(const SnapshotImage& image) {
  return xxh3(image.words.data(), image.words.size() * sizeof(std::uint64_t));
}

std::vector<PoolDeltaMsg> deltas_in(const Inbox& inbox) {
  std::vector<PoolDeltaMsg> deltas;
  for (const auto& message : inbox.messages) {
    if (message.match_elements<PoolDeltaMsg>()) deltas.push_back(message.get_as<PoolDeltaMsg>(0));
  }
  return deltas;
}

}  // namespace

TEST_CASE("publisher actor: a new stream gets a snapshot at the published sequence", "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 4);
  auto [first, first_inbox] = under_test.attach();
  REQUIRE(first_inbox->count<PoolSnapshotMsg>() == 1);
  const auto& empty = first_inbox->messages[0].get_as<PoolSnapshotMsg>(0).image;
  CHECK(empty->sequence == 0);
  CHECK(empty->words.size() == kBuckets);

  // A change still pending is not published for the next stream: its snapshot is the one
  // at the published sequence, and the change reaches both streams as the same next delta.
  under_test.send(stores(100, 1));  // below the threshold: pending
  auto [second, second_inbox] = under_test.attach();
  REQUIRE(second_inbox->count<PoolSnapshotMsg>() == 1);
  const auto& image = second_inbox->messages[0].get_as<PoolSnapshotMsg>(0).image;
  CHECK(image->sequence == 0);
  CHECK(image->words == empty->words);
  CHECK(image == empty);  // one image per published sequence, shared
  CHECK(deltas_in(*first_inbox).empty());
  CHECK(under_test.state().sequence() == 0);
  CHECK(under_test.state().publication_pending());

  fixture.advance(kDelay);
  REQUIRE(deltas_in(*first_inbox).size() == 1);
  REQUIRE(deltas_in(*second_inbox).size() == 1);
  CHECK(deltas_in(*first_inbox)[0].base_sequence == 0);
  CHECK(deltas_in(*first_inbox)[0].payload == deltas_in(*second_inbox)[0].payload);
  CHECK(under_test.state().sequence() == 1);
}

TEST_CASE("publisher actor: a snapshot taken while changes are pending holds the published words",
          "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 4);
  auto [first, first_inbox] = under_test.attach();
  under_test.send(stores(100, 4));  // at the threshold: published at once as sequence 1
  REQUIRE(deltas_in(*first_inbox).size() == 1);
  under_test.send(stores(200, 2));  // pending, within the delay
  auto [second, second_inbox] = under_test.attach();
  const auto& image = second_inbox->messages[0].get_as<PoolSnapshotMsg>(0).image;
  CHECK(image->sequence == 1);
  CHECK(image->words != first_inbox->messages[0].get_as<PoolSnapshotMsg>(0).image->words);
  // The words as of sequence 1, without what is pending: the digest GetState gives of them.
  const ingest_v1::PoolState state = under_test.state();
  CHECK(state.publication_pending());
  CHECK(digest_of(*image) == state.filter_digest());
  fixture.advance(kDelay);
  REQUIRE(deltas_in(*second_inbox).size() == 1);
  CHECK(deltas_in(*second_inbox)[0].base_sequence == 1);
  CHECK(digest_of(*image) != under_test.state().filter_digest());
}

TEST_CASE("publisher actor: threshold per message, at most one delta per delay", "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 4);
  auto [stream, inbox] = under_test.attach();

  under_test.send(stores(100, 4));  // reaches the threshold, no publication yet: at once
  REQUIRE(deltas_in(*inbox).size() == 1);
  CHECK(deltas_in(*inbox)[0].base_sequence == 0);
  CHECK(deltas_in(*inbox)[0].sequence == 1);

  under_test.send(stores(200, 4));  // at the threshold again, but within the delay of the last
  CHECK(deltas_in(*inbox).size() == 1);
  fixture.advance(kDelay);
  REQUIRE(deltas_in(*inbox).size() == 2);
  CHECK(deltas_in(*inbox)[1].sequence == 2);

  under_test.send(stores(300, 1));  // below the threshold: published one delay after it arrived
  fixture.advance(kDelay - std::chrono::milliseconds(1));
  CHECK(deltas_in(*inbox).size() == 2);
  fixture.advance(std::chrono::milliseconds(1));
  REQUIRE(deltas_in(*inbox).size() == 3);
  CHECK(deltas_in(*inbox)[2].base_sequence == 2);
  CHECK(under_test.sink->outcomes.size() == 3);
}

TEST_CASE("publisher actor: a stream attaching leaves what is pending to its timer", "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 4);
  auto [stream, inbox] = under_test.attach();
  under_test.send(stores(100, 4));  // published at once, at t0
  under_test.send(stores(200, 1));  // below the threshold: the timer is armed for t0 + 10 ms
  fixture.advance(kDelay - std::chrono::milliseconds(1));
  for (int i = 0; i < 8; ++i) under_test.attach();  // a burst of resubscriptions publishes nothing
  CHECK(deltas_in(*inbox).size() == 1);
  fixture.advance(std::chrono::milliseconds(1));
  REQUIRE(deltas_in(*inbox).size() == 2);
  CHECK(deltas_in(*inbox)[1].base_sequence == 1);
}

TEST_CASE("publisher actor: a publication that nets no change sends nothing and does not hold back the next",
          "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 2);
  auto [stream, inbox] = under_test.attach();
  auto reverted = std::make_shared<ingest_v1::KvEventBatch>(*stores(100, 1));
  reverted->add_events()->mutable_removed()->add_block_hashes(100);  // stored and removed again: no net change
  under_test.send(reverted);
  CHECK(deltas_in(*inbox).empty());
  CHECK(under_test.state().sequence() == 0);
  under_test.send(stores(200, 2));  // at the threshold: published at once, with no gap to wait out
  REQUIRE(deltas_in(*inbox).size() == 1);
  CHECK(deltas_in(*inbox)[0].base_sequence == 0);
}

TEST_CASE("publisher actor: a pool with more streams than its frame budget covers publishes less often",
          "[actors][publisher]") {
  ActorFixture fixture;
  // 200 frames/s: one stream may have a delta every 5 ms (the 10 ms delay is longer), four
  // streams one every 20 ms.
  PublisherUnderTest under_test(fixture, 4, 200);
  auto [stream, inbox] = under_test.attach();
  under_test.send(stores(100, 4));
  REQUIRE(deltas_in(*inbox).size() == 1);
  under_test.send(stores(200, 4));
  fixture.advance(kDelay);
  REQUIRE(deltas_in(*inbox).size() == 2);  // one stream: the delay is the gap

  for (int more = 0; more < 3; ++more) under_test.attach();
  under_test.send(stores(300, 4));
  fixture.advance(kDelay);
  CHECK(deltas_in(*inbox).size() == 2);  // four streams: 20 ms apart
  fixture.advance(kDelay);
  REQUIRE(deltas_in(*inbox).size() == 3);
  CHECK(deltas_in(*inbox)[2].base_sequence == 2);

  under_test.send(stores(400, 1));  // below the threshold: still no sooner than the gap
  fixture.advance(std::chrono::milliseconds(19));
  CHECK(deltas_in(*inbox).size() == 3);
  fixture.advance(std::chrono::milliseconds(1));
  CHECK(deltas_in(*inbox).size() == 4);
}

TEST_CASE("publication cadence: the gap is the delay until the streams need more", "[actors][publisher]") {
  const PublicationCadence cadence{16, std::chrono::milliseconds(1), 16'000};
  CHECK(cadence.gap(0) == std::chrono::milliseconds(1));
  CHECK(cadence.gap(16) == std::chrono::milliseconds(1));
  CHECK(cadence.gap(64) == std::chrono::milliseconds(4));
  CHECK(cadence.gap(256) == std::chrono::milliseconds(16));
  const PublicationCadence unlimited{16, std::chrono::milliseconds(1), 0};
  CHECK(unlimited.gap(256) == std::chrono::milliseconds(1));
}

TEST_CASE("publisher actor: GetState reports the last publication, not pending changes", "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 16);
  const auto empty = under_test.state();
  under_test.send(stores(100, 1));
  const auto pending = under_test.state();
  CHECK(pending.sequence() == 0);
  CHECK(pending.filter_digest() == empty.filter_digest());
  CHECK(pending.unique_blocks() == 1);  // counts describe the index as it is
  fixture.advance(kDelay);
  const auto published = under_test.state();
  CHECK(published.sequence() == 1);
  CHECK(published.filter_digest() != empty.filter_digest());
}

TEST_CASE("publisher actor: fencing ends the detector INVALID_PUBLICATION, the rest PUBLICATION_UNAVAILABLE",
          "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 1);
  auto [detector, detector_inbox] = under_test.attach();
  auto [other, other_inbox] = under_test.attach();

  caf::anon_send(under_test.publisher, atoms::broken_sequence_atom_v, caf::actor_cast<PoolFrameSinkActor>(detector),
                 std::uint64_t{5}, std::string("delta 1 -> 2 does not continue 0"));
  fixture.run();
  REQUIRE(ending_of(*detector_inbox).has_value());
  CHECK(ending_of(*detector_inbox)->reason == v1::RELAY_ERROR_REASON_INVALID_PUBLICATION);
  REQUIRE(ending_of(*other_inbox).has_value());
  CHECK(ending_of(*other_inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  CHECK(under_test.owner_inbox->count<atoms::generation_fenced_atom, std::uint64_t>() == 1);

  // Until membership retires it, it answers batches without applying them, and refuses streams.
  under_test.send(stores(100, 1));
  REQUIRE(under_test.sink->outcomes.size() == 1);
  CHECK_FALSE(under_test.sink->outcomes[0].applied);
  auto [late, late_inbox] = under_test.attach();
  CHECK(late_inbox->count<PoolSnapshotMsg>() == 0);
  REQUIRE(ending_of(*late_inbox).has_value());
  CHECK(ending_of(*late_inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  // A second report of the same fault tells membership nothing new.
  caf::anon_send(under_test.publisher, atoms::broken_sequence_atom_v, caf::actor_cast<PoolFrameSinkActor>(other),
                 std::uint64_t{5}, std::string("again"));
  fixture.run();
  CHECK(under_test.owner_inbox->count<atoms::generation_fenced_atom, std::uint64_t>() == 1);
}

TEST_CASE("publisher actor: an index invariant violation fences the generation", "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 1);
  auto [stream, inbox] = under_test.attach();
  under_test.send(stores(100, 1));
  caf::anon_send(under_test.publisher, atoms::evict_atom_v, std::uint64_t{0x9E3779B97F4A7C15ULL * 100});
  SECTION("found by a removal") {
    auto removal = std::make_shared<ingest_v1::KvEventBatch>();
    removal->set_worker_id(1);
    removal->add_events()->mutable_removed()->add_block_hashes(100);
    under_test.send(removal);
  }
  SECTION("found by the reset of a source that starts a new epoch") {
    under_test.send(stores(200, 1), SourceReset::kSource);
    REQUIRE(under_test.sink->outcomes.size() == 2);
    CHECK_FALSE(under_test.sink->outcomes[1].applied);  // the source starts over on the next generation
  }
  SECTION("found by the reset of a source whose rank is gone") {
    caf::anon_send(under_test.publisher, atoms::reset_atom_v, SourceKey{1, 0});
    fixture.run();
  }
  REQUIRE(ending_of(*inbox).has_value());
  CHECK(ending_of(*inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  CHECK(under_test.owner_inbox->count<atoms::generation_fenced_atom, std::uint64_t>() == 1);
}

namespace {

// The producer identity membership grants for a re-layout.
v1::ProducerIdentity grown_producer(std::uint64_t layout_generation, std::uint64_t bucket_count) {
  v1::ProducerIdentity producer;
  producer.set_layout_generation(layout_generation);
  producer.mutable_ckf_format()->set_bucket_count(bucket_count);
  producer.mutable_ckf_format()->set_seed(42);
  return producer;
}

std::size_t grow_requests(const Inbox& inbox) { return inbox.count<atoms::grow_atom, std::uint64_t, std::uint64_t>(); }

// The bucket count of the owner's last grow request.
std::uint64_t last_grow_size(const Inbox& inbox) {
  std::uint64_t size = 0;
  for (const auto& message : inbox.messages) {
    if (message.match_elements<atoms::grow_atom, std::uint64_t, std::uint64_t>()) {
      size = message.get_as<std::uint64_t>(2);
    }
  }
  return size;
}

// Past 0.85 of 1024 x 4 slots.
constexpr std::size_t kBlocksPastRelayoutLoad = 3500;

}  // namespace

TEST_CASE("publisher actor: past the re-layout load it asks its owner once, then re-lays out as told",
          "[actors][publisher][relayout]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 16);
  fixture.advance(std::chrono::seconds(1));  // the first layout is one min interval old
  auto [stream, inbox] = under_test.attach();
  under_test.send(stores(1, kBlocksPastRelayoutLoad));
  REQUIRE(grow_requests(*under_test.owner_inbox) == 1);
  CHECK(last_grow_size(*under_test.owner_inbox) == 2 * kBuckets);
  under_test.send(stores(10'000, 10));  // still past the load, but the request is outstanding
  CHECK(grow_requests(*under_test.owner_inbox) == 1);

  caf::anon_send(under_test.publisher, atoms::relayout_atom_v, grown_producer(6, 2 * kBuckets));
  fixture.run();
  REQUIRE(ending_of(*inbox).has_value());  // the old generation's stream ends
  CHECK(ending_of(*inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  const auto state = under_test.state();
  CHECK(state.layout_generation() == 6);
  CHECK(state.bucket_count() == 2 * kBuckets);
  CHECK(state.unique_blocks() == kBlocksPastRelayoutLoad + 10);
  CHECK(state.occupied_slots() == kBlocksPastRelayoutLoad + 10);
  CHECK(state.omitted_blocks() == 0);
  CHECK(state.relayouts() == 1);
  CHECK(state.sequence() == 0);

  auto [late, late_inbox] = under_test.attach(5);  // admitted before the re-layout
  CHECK(late_inbox->count<PoolSnapshotMsg>() == 0);
  REQUIRE(ending_of(*late_inbox).has_value());
  CHECK(ending_of(*late_inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  auto [fresh, fresh_inbox] = under_test.attach(6);
  REQUIRE(fresh_inbox->count<PoolSnapshotMsg>() == 1);
  CHECK(fresh_inbox->messages[0].get_as<PoolSnapshotMsg>(0).image->words.size() == 2 * kBuckets);
  CHECK(under_test.sink->outcomes.size() == 2);  // no batch was refused, no source reset
  CHECK(under_test.sink->outcomes[1].applied);

  // A stream of generation 5 that saw a broken sequence before the re-layout ended it: its late
  // report fences nothing, a report from generation 6 does.
  caf::anon_send(under_test.publisher, atoms::broken_sequence_atom_v, caf::actor_cast<PoolFrameSinkActor>(stream),
                 std::uint64_t{5}, std::string("a late report of generation 5"));
  fixture.run();
  CHECK(under_test.owner_inbox->count<atoms::generation_fenced_atom, std::uint64_t>() == 0);
  CHECK(fresh_inbox->count<atoms::end_stream_atom, RpcStatus>() == 0);
  caf::anon_send(under_test.publisher, atoms::broken_sequence_atom_v, caf::actor_cast<PoolFrameSinkActor>(fresh),
                 std::uint64_t{6}, std::string("a report of generation 6"));
  fixture.run();
  CHECK(under_test.owner_inbox->count<atoms::generation_fenced_atom, std::uint64_t>() == 1);
  REQUIRE(ending_of(*fresh_inbox).has_value());
  CHECK(ending_of(*fresh_inbox)->reason == v1::RELAY_ERROR_REASON_INVALID_PUBLICATION);
}

TEST_CASE("publisher actor: a stream waiting for its encoder permit ends when its generation goes first",
          "[actors][publisher][relayout]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 16);
  const auto wait = [&] {
    auto inbox = std::make_shared<Inbox>();
    const auto stream = caf::actor_cast<PoolFrameSinkActor>(spawn_recorder(fixture, inbox));
    caf::anon_send(under_test.publisher, atoms::waiting_atom_v, stream, std::uint64_t{5});
    fixture.run();
    return std::pair{stream, inbox};
  };
  const auto relayout = [&] {
    caf::anon_send(under_test.publisher, atoms::relayout_atom_v, grown_producer(6, 2 * kBuckets));
    fixture.run();
  };
  const auto [stream, inbox] = wait();
  CHECK(inbox->messages.empty());
  SECTION("re-laid out") {
    relayout();
    REQUIRE(ending_of(*inbox).has_value());
    CHECK(ending_of(*inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
    CHECK_THAT(ending_of(*inbox)->message, Catch::Contains("re-laid out into generation 6"));
    const auto late = wait().second;  // a stream admitted to the old generation is ended at once
    REQUIRE(ending_of(*late).has_value());
    CHECK(ending_of(*late)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  }
  SECTION("retired") {
    caf::anon_send(under_test.publisher, atoms::retire_atom_v,
                   RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "withdrawn"));
    fixture.run();
    REQUIRE(ending_of(*inbox).has_value());
    CHECK(ending_of(*inbox)->message == "withdrawn");
  }
  SECTION("granted first: it attaches, and a later re-layout ends it once") {
    caf::anon_send(under_test.publisher, atoms::attach_atom_v, stream, std::uint64_t{5});
    fixture.run();
    CHECK(inbox->count<PoolSnapshotMsg>() == 1);
    relayout();
    CHECK(inbox->count<atoms::end_stream_atom, RpcStatus>() == 1);
  }
}

TEST_CASE("publisher actor: a batch that starts its source over says whether a new generation asked it",
          "[actors][publisher]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 16);
  under_test.send(stores(1, 1), SourceReset::kSource);         // a new epoch: the feeder knows why
  under_test.send(stores(2, 1), SourceReset::kNewGeneration);  // the pool's: an engine source reads its cache again
  under_test.send(stores(3, 1));
  REQUIRE(under_test.sink->outcomes.size() == 3);
  const auto& outcomes = under_test.sink->outcomes;
  CHECK((outcomes[0].applied && outcomes[0].reset == SourceReset::kSource));
  CHECK((outcomes[1].applied && outcomes[1].reset == SourceReset::kNewGeneration));
  CHECK((outcomes[2].applied && outcomes[2].reset == SourceReset::kNone));
}

TEST_CASE("publisher actor: re-layouts are at least the min interval apart", "[actors][publisher][relayout]") {
  ActorFixture fixture;
  PublisherUnderTest under_test(fixture, 16);
  under_test.send(stores(1, kBlocksPastRelayoutLoad));  // the first layout is brand new
  CHECK(grow_requests(*under_test.owner_inbox) == 0);
  fixture.advance(std::chrono::milliseconds(999));
  CHECK(grow_requests(*under_test.owner_inbox) == 0);
  fixture.advance(std::chrono::milliseconds(1));  // its own timer asks, no new batch needed
  REQUIRE(grow_requests(*under_test.owner_inbox) == 1);

  caf::anon_send(under_test.publisher, atoms::growth_refused_atom_v, std::string("memory budget: full"));
  fixture.run();
  CHECK(under_test.state().growth_refusal() == "memory budget: full");
  CHECK(grow_requests(*under_test.owner_inbox) == 1);
  fixture.advance(std::chrono::milliseconds(999));  // asks again one interval after the refusal
  CHECK(grow_requests(*under_test.owner_inbox) == 1);
  fixture.advance(std::chrono::milliseconds(1));
  CHECK(grow_requests(*under_test.owner_inbox) == 2);
}

TEST_CASE("publisher actor: a source reset that comes when an early publication is due is published too",
          "[actors][publisher]") {
  ActorFixture fixture;
  // Each source's blocks touch more buckets than an early publication waits for (half a
  // delta's most images); both sources' together fewer than one delta holds.
  PublisherUnderTest under_test(fixture, 16, 0, std::uint64_t{1} << 20);
  const auto empty = under_test.state();
  auto [stream, inbox] = under_test.attach();
  under_test.send(chains(0, 1, 4, 50'000));
  under_test.send(chains(1, 1'000'000, 4, 50'000));
  fixture.advance(kDelay);
  REQUIRE(under_test.state().unique_blocks() == 400'000);

  // The first reset arms the delay; the second finds the first's buckets due for an early
  // publication, which must carry its own clear as well.
  caf::anon_send(under_test.publisher, atoms::reset_atom_v, SourceKey{1, 0});
  caf::anon_send(under_test.publisher, atoms::reset_atom_v, SourceKey{1, 1});
  fixture.run();
  fixture.advance(kDelay);
  const auto published = under_test.state();
  CHECK(published.unique_blocks() == 0);
  CHECK(published.filter_digest() == empty.filter_digest());
  CHECK_FALSE(published.publication_pending());
}
