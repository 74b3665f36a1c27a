// The pool stream actor alone, on virtual time: snapshot admission, the snapshot progress
// timeout, and the order of snapshot chunks and deltas.
#include <catch2/catch.hpp>

#include "actors/pool_stream.hpp"
#include "core/cbi1.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

constexpr auto kProgressTimeout = std::chrono::milliseconds(100);

PoolStreamSpec spec_with_buckets(std::uint64_t bucket_count) {
  PoolStreamSpec spec;
  spec.producer.set_layout_generation(1);
  spec.dc_id = 7;
  spec.seed = 42;
  spec.bucket_count = bucket_count;
  return spec;
}

std::shared_ptr<const SnapshotImage> empty_image(std::uint64_t bucket_count, std::uint64_t sequence) {
  return std::make_shared<const SnapshotImage>(SnapshotImage{sequence, std::vector<std::uint64_t>(bucket_count, 0)});
}

struct StreamUnderTest {
  std::shared_ptr<RecordingSink<wire::FilterFrame>> sink = std::make_shared<RecordingSink<wire::FilterFrame>>();
  std::shared_ptr<Inbox> publisher_inbox = std::make_shared<Inbox>();
  std::shared_ptr<Inbox> encoders_inbox = std::make_shared<Inbox>();
  caf::actor publisher, encoders;
  PoolStreamActor stream;

  StreamUnderTest(ActorFixture& fixture, std::uint64_t bucket_count, bool paced,
                  std::chrono::milliseconds heartbeat = std::chrono::milliseconds(0), OutboxLimits outbox = {}) {
    publisher = spawn_recorder(fixture, publisher_inbox);
    if (paced) encoders = spawn_recorder(fixture, encoders_inbox);
    SnapshotPacing pacing{caf::actor_cast<SnapshotEncodersActor>(encoders), kProgressTimeout, heartbeat};
    stream = fixture.spawn(pool_stream, sink, spec_with_buckets(bucket_count), outbox,
                           caf::actor_cast<PoolPublisherActor>(publisher), pacing, nullptr);
    fixture.run();
  }
};

PoolDeltaMsg delta_from(std::uint64_t base) { return {base, base + 1, std::make_shared<const std::string>("d")}; }

}  // namespace

TEST_CASE("pool stream actor: holds nothing and joins no fan-out until it has an encoder permit", "[actors][pool]") {
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, 1024, /*paced=*/true);
  CHECK(under_test.encoders_inbox->count<atoms::acquire_atom, PermitHolderActor>() == 1);
  // Not attached (no image, no deltas), only known to the publisher as waiting.
  REQUIRE(under_test.publisher_inbox->messages.size() == 1);
  CHECK(under_test.publisher_inbox->count<atoms::waiting_atom, PoolFrameSinkActor, std::uint64_t>() == 1);

  caf::anon_send(under_test.stream, atoms::granted_atom_v);
  fixture.run();
  REQUIRE(under_test.publisher_inbox->count<atoms::attach_atom, PoolFrameSinkActor, std::uint64_t>() == 1);
  CHECK(under_test.publisher_inbox->messages[1].get_as<PoolFrameSinkActor>(1).address() == under_test.stream.address());
}

TEST_CASE("pool stream actor: without encoder pacing it attaches at once", "[actors][pool]") {
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, 1024, /*paced=*/false);
  CHECK(under_test.publisher_inbox->count<atoms::attach_atom, PoolFrameSinkActor, std::uint64_t>() == 1);
}

TEST_CASE("pool stream actor: the progress timeout guards every snapshot chunk but the last", "[actors][pool]") {
  constexpr std::uint64_t kTwoChunks = 2 * cbi1::kChunkBuckets;
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, kTwoChunks, /*paced=*/false);
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(kTwoChunks, 3)});
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 1);

  SECTION("a first chunk the client does not take ends the stream") {
    fixture.advance(kProgressTimeout - std::chrono::milliseconds(1));
    CHECK_FALSE(under_test.sink->finished.has_value());
    fixture.advance(std::chrono::milliseconds(1));
    REQUIRE(under_test.sink->finished.has_value());
    CHECK(under_test.sink->finished->reason == v1::RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT);
  }
  SECTION("once the last chunk is handed on, a slow client is no longer timed out") {
    complete_write(under_test.stream);
    fixture.run();
    REQUIRE(under_test.sink->writes.size() == 2);
    fixture.advance(10 * kProgressTimeout);
    CHECK_FALSE(under_test.sink->finished.has_value());
    // Deltas queue behind the unfinished write and go out once it completes.
    PoolDeltaMsg delta{3, 4, std::make_shared<const std::string>("d")};
    caf::anon_send(under_test.stream, delta);
    complete_write(under_test.stream);
    fixture.run();
    REQUIRE(under_test.sink->writes.size() == 3);
    CHECK(under_test.sink->writes[2]->kind() == v1::FILTER_UPDATE_KIND_DELTA);
    CHECK(under_test.sink->writes[2]->sequence() == 4);
  }
}

TEST_CASE("pool stream actor: each chunk of a snapshot gets the progress timeout anew", "[actors][pool]") {
  constexpr std::uint64_t kThreeChunks = 3 * cbi1::kChunkBuckets;
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, kThreeChunks, /*paced=*/false);
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(kThreeChunks, 3)});
  fixture.run();
  fixture.advance(kProgressTimeout / 2);
  complete_write(under_test.stream);  // the first chunk taken half-way: the second one is timed from now
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 2);
  fixture.advance(kProgressTimeout - std::chrono::milliseconds(1));
  CHECK_FALSE(under_test.sink->finished.has_value());
  fixture.advance(std::chrono::milliseconds(1));
  REQUIRE(under_test.sink->finished.has_value());
  CHECK(under_test.sink->finished->reason == v1::RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT);
}

TEST_CASE("pool stream actor: a full outbox ends the stream as lagged", "[actors][pool]") {
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, 1024, /*paced=*/false);
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(1024, 0)});
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 1);  // the chunk, never completed: deltas queue
  for (std::uint64_t base = 0; base < OutboxLimits{}.max_frames; ++base) {
    caf::anon_send(under_test.stream, delta_from(base));
  }
  fixture.run();
  CHECK_FALSE(under_test.sink->finished.has_value());
  caf::anon_send(under_test.stream, delta_from(OutboxLimits{}.max_frames));
  fixture.run();
  REQUIRE(under_test.sink->finished.has_value());
  CHECK(under_test.sink->finished->reason == v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED);
}

TEST_CASE("pool stream actor: an outbox full of bytes ends the stream as lagged, however few its frames",
          "[actors][pool]") {
  constexpr std::size_t kPayload = 1000;
  constexpr std::size_t kFrameBytes = kPayload + OutboxLimits::kFrameOverheadBytes;
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, 1024, /*paced=*/false, std::chrono::milliseconds(0),
                             OutboxLimits{16, 3 * kFrameBytes});
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(1024, 0)});
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 1);  // the chunk, never completed: deltas queue
  const auto delta = [&](std::uint64_t base) {
    return PoolDeltaMsg{base, base + 1, std::make_shared<const std::string>(kPayload, 'd')};
  };
  for (std::uint64_t base = 0; base < 3; ++base) caf::anon_send(under_test.stream, delta(base));
  fixture.run();
  CHECK_FALSE(under_test.sink->finished.has_value());  // three frames of sixteen, all the bytes
  caf::anon_send(under_test.stream, delta(3));
  fixture.run();
  REQUIRE(under_test.sink->finished.has_value());
  CHECK(under_test.sink->finished->reason == v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED);
}

TEST_CASE("pool stream actor: a delta that breaks the sequence is never written, the publisher is told",
          "[actors][pool]") {
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, 1024, /*paced=*/false);
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(1024, 5)});
  complete_write(under_test.stream);
  fixture.run();
  caf::anon_send(under_test.stream, delta_from(6));  // the stream is at 5
  fixture.run();
  CHECK(under_test.sink->writes.size() == 1);
  CHECK(under_test.publisher_inbox
            ->count<atoms::broken_sequence_atom, PoolFrameSinkActor, std::uint64_t, std::string>() == 1);
}

TEST_CASE("pool stream actor: heartbeats follow the complete snapshot after a quiet interval", "[actors][pool]") {
  constexpr auto kHeartbeat = std::chrono::milliseconds(1000);
  constexpr std::uint64_t kTwoChunks = 2 * cbi1::kChunkBuckets;
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, kTwoChunks, /*paced=*/false, kHeartbeat);
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(kTwoChunks, 9)});
  fixture.run();
  fixture.advance(kProgressTimeout / 2);
  complete_write(under_test.stream);
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 2);  // the last chunk, half a progress timeout later
  complete_write(under_test.stream);
  // The quiet interval counts from the last chunk, not the first.
  fixture.advance(kHeartbeat - std::chrono::milliseconds(1));
  CHECK(under_test.sink->writes.size() == 2);
  fixture.advance(kProgressTimeout / 2);
  REQUIRE(under_test.sink->writes.size() == 3);
  CHECK(under_test.sink->writes[2]->kind() == v1::FILTER_UPDATE_KIND_HEARTBEAT);
  CHECK(under_test.sink->writes[2]->sequence() == 9);
  CHECK(under_test.sink->writes[2]->payload().empty());

  // A data frame pushes the next heartbeat back by a whole interval.
  complete_write(under_test.stream);
  fixture.advance(kHeartbeat / 2);
  caf::anon_send(under_test.stream, delta_from(9));
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 4);
  complete_write(under_test.stream);
  fixture.advance(kHeartbeat / 2);
  CHECK(under_test.sink->writes.size() == 4);
  fixture.advance(kHeartbeat / 2);
  REQUIRE(under_test.sink->writes.size() == 5);
  CHECK(under_test.sink->writes[4]->kind() == v1::FILTER_UPDATE_KIND_HEARTBEAT);
  CHECK(under_test.sink->writes[4]->sequence() == 10);
}

TEST_CASE("pool stream actor: a stream whose write is still on its way gets no heartbeats, nor lags on them",
          "[actors][pool]") {
  constexpr auto kHeartbeat = std::chrono::milliseconds(10);
  constexpr std::size_t kFrames = 4;
  ActorFixture fixture;
  StreamUnderTest under_test(fixture, 1024, /*paced=*/false, kHeartbeat, OutboxLimits{kFrames, 16u << 20});
  caf::anon_send(under_test.stream, PoolSnapshotMsg{empty_image(1024, 0)});
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 1);  // the snapshot, not taken by the client for ten intervals
  for (int interval = 0; interval < 10; ++interval) fixture.advance(kHeartbeat);
  CHECK_FALSE(under_test.sink->finished.has_value());
  // The outbox is still the deltas' own: all of them fit, and they go out before any heartbeat.
  for (std::uint64_t base = 0; base < kFrames; ++base) caf::anon_send(under_test.stream, delta_from(base));
  fixture.run();
  CHECK_FALSE(under_test.sink->finished.has_value());
  for (std::size_t write = 0; write < kFrames; ++write) complete_write(under_test.stream);
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 1 + kFrames);
  for (std::size_t write = 1; write <= kFrames; ++write) {
    CHECK(under_test.sink->writes[write]->kind() == v1::FILTER_UPDATE_KIND_DELTA);
  }
  // Quiet again, it hears a heartbeat one interval on.
  complete_write(under_test.stream);
  fixture.advance(kHeartbeat);
  REQUIRE(under_test.sink->writes.size() == 2 + kFrames);
  CHECK(under_test.sink->writes.back()->kind() == v1::FILTER_UPDATE_KIND_HEARTBEAT);
  CHECK(under_test.sink->writes.back()->sequence() == kFrames);
}
