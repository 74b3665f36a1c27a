// The catalog and readiness streams' actor alone, on virtual time: the latest update is
// re-sent on the heartbeat's schedule, and a heartbeat of 0 sends nothing but real updates.
#include <catch2/catch.hpp>

#include "actors/stream_actors.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

// A catalog stream with `heartbeat`, sent revision 3 and holding its first write in flight.
std::pair<caf::actor, std::shared_ptr<RecordingSink<CatalogBroadcast>>> stream_of_revision_3(
    ActorFixture& fixture, std::chrono::milliseconds heartbeat) {
  auto sink = std::make_shared<RecordingSink<CatalogBroadcast>>();
  auto source = spawn_recorder(fixture, std::make_shared<Inbox>());
  auto stream = fixture.spawn(latest_value_stream<CatalogBroadcast>, sink,
                              caf::actor_cast<UpdateSourceActor<CatalogBroadcast>>(source), std::string("catalog"),
                              heartbeat, nullptr);
  fixture.run();
  v1::KvPoolCatalogUpdate update;
  update.set_revision(3);
  caf::anon_send(stream, atoms::update_atom_v, std::make_shared<const CatalogBroadcast>(update));
  fixture.run();
  REQUIRE(sink->writes.size() == 1);
  return {caf::actor_cast<caf::actor>(stream), std::move(sink)};
}

}  // namespace

TEST_CASE("latest-value stream actor: heartbeats re-send the latest update, and 0 turns them off",
          "[actors][heartbeat]") {
  const auto heartbeat = std::chrono::milliseconds(GENERATE(0, 100));
  INFO("heartbeat " << heartbeat.count() << " ms");
  ActorFixture fixture;
  auto [stream, sink] = stream_of_revision_3(fixture, heartbeat);

  // Ten intervals of 100 ms, each write completed as the transport would; then an hour.
  for (int interval = 0; interval < 10; ++interval) {
    complete_write(caf::actor_cast<StreamTransportActor>(stream));
    fixture.run();
    fixture.advance(std::chrono::milliseconds(100));
  }
  complete_write(caf::actor_cast<StreamTransportActor>(stream));
  fixture.run();
  fixture.advance(std::chrono::hours(1));
  if (heartbeat.count() == 0) {
    CHECK(sink->writes.size() == 1);
  } else {
    CHECK(sink->writes.size() == 1 + 10 + 1);  // one per interval, and one more in the hour: one write in flight
    for (const auto& write : sink->writes) CHECK(write->message().revision() == 3);
  }
  CHECK_FALSE(sink->finished.has_value());
}

TEST_CASE("latest-value stream actor: a heartbeat due while a write is in flight waits for it", "[actors][heartbeat]") {
  ActorFixture fixture;
  auto [stream, sink] = stream_of_revision_3(fixture, std::chrono::milliseconds(100));

  fixture.advance(std::chrono::milliseconds(100));  // the heartbeat is due; the transport has not finished
  CHECK(sink->writes.size() == 1);                  // one write in flight at most
  complete_write(caf::actor_cast<StreamTransportActor>(stream));
  fixture.run();
  REQUIRE(sink->writes.size() == 2);  // the held heartbeat goes out then
  CHECK(sink->writes[1]->message().revision() == 3);
}

namespace {

void send_revision(caf::actor stream, std::uint64_t revision) {
  v1::KvPoolCatalogUpdate update;
  update.set_revision(revision);
  caf::anon_send(stream, atoms::update_atom_v, std::make_shared<const CatalogBroadcast>(update));
}

}  // namespace

TEST_CASE("latest-value stream actor: updates that arrive during a write coalesce into the newest",
          "[actors][heartbeat]") {
  ActorFixture fixture;
  auto [stream, sink] = stream_of_revision_3(fixture, std::chrono::milliseconds(0));
  for (std::uint64_t revision = 4; revision <= 7; ++revision) send_revision(stream, revision);
  fixture.run();
  CHECK(sink->writes.size() == 1);  // revision 3 still in flight
  complete_write(caf::actor_cast<StreamTransportActor>(stream));
  fixture.run();
  REQUIRE(sink->writes.size() == 2);
  CHECK(sink->writes[1]->message().revision() == 7);  // 4, 5 and 6 skipped
  complete_write(caf::actor_cast<StreamTransportActor>(stream));
  fixture.run();
  CHECK(sink->writes.size() == 2);  // nothing left to send
}

TEST_CASE("latest-value stream actor: a change-driven send leaves the heartbeat schedule where it was",
          "[actors][heartbeat]") {
  ActorFixture fixture;
  auto [stream, sink] = stream_of_revision_3(fixture, std::chrono::milliseconds(100));
  complete_write(caf::actor_cast<StreamTransportActor>(stream));
  fixture.advance(std::chrono::milliseconds(90));
  send_revision(stream, 4);  // 90 ms into the interval
  fixture.run();
  REQUIRE(sink->writes.size() == 2);
  complete_write(caf::actor_cast<StreamTransportActor>(stream));
  fixture.run();
  fixture.advance(std::chrono::milliseconds(10));  // the heartbeat still falls at 100 ms
  REQUIRE(sink->writes.size() == 3);
  CHECK(sink->writes[2]->message().revision() == 4);
}
