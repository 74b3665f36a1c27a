// The load and serving-load streams' actor alone: a client more windows behind than its queue
// holds ends SUBSCRIBER_LAGGED, and a publication that stops ends the stream
// PUBLICATION_UNAVAILABLE, each status naming its plane.
#include <catch2/catch.hpp>

#include "actors/stream_actors.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

struct WindowStream {
  std::shared_ptr<RecordingSink<ServingLoadBroadcast>> sink = std::make_shared<RecordingSink<ServingLoadBroadcast>>();
  caf::actor source;
  caf::actor stream;

  WindowStream(ActorFixture& fixture, std::size_t queued_windows) {
    source = spawn_recorder(fixture, std::make_shared<Inbox>());
    stream = caf::actor_cast<caf::actor>(fixture.spawn(
        bounded_stream<ServingLoadBroadcast>, sink, caf::actor_cast<UpdateSourceActor<ServingLoadBroadcast>>(source),
        std::string("serving load"), OutboxLimits{queued_windows, std::size_t{1} << 30}, nullptr));
    fixture.run();
  }

  void send_window(std::uint64_t sequence) {
    v1::ServingLoadUpdate window;
    window.set_window_sequence(sequence);
    caf::anon_send(stream, atoms::update_atom_v, std::make_shared<const ServingLoadBroadcast>(window));
  }
};

}  // namespace

TEST_CASE("bounded stream actor: a client past its queue ends SUBSCRIBER_LAGGED, counting the windows it missed",
          "[actors][load]") {
  ActorFixture fixture;
  WindowStream under_test(fixture, 2);
  for (std::uint64_t sequence = 1; sequence <= 3; ++sequence) under_test.send_window(sequence);
  fixture.run();
  REQUIRE(under_test.sink->writes.size() == 1);  // window 1 in flight, 2 and 3 queued
  CHECK_FALSE(under_test.sink->finished.has_value());

  under_test.send_window(4);
  fixture.run();
  REQUIRE(under_test.sink->finished.has_value());
  CHECK(under_test.sink->finished->reason == v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED);
  CHECK(under_test.sink->finished->code == StatusCode::kResourceExhausted);
  CHECK(under_test.sink->finished->message == "serving load subscriber lagged by 3 complete windows; resubscribe");
}

TEST_CASE("bounded stream actor: a client that keeps up is never lagged", "[actors][load]") {
  ActorFixture fixture;
  WindowStream under_test(fixture, 2);
  for (std::uint64_t sequence = 1; sequence <= 20; ++sequence) {
    under_test.send_window(sequence);
    fixture.run();
    complete_write(caf::actor_cast<StreamTransportActor>(under_test.stream));
    fixture.run();
  }
  REQUIRE(under_test.sink->writes.size() == 20);
  for (std::size_t i = 0; i < 20; ++i) CHECK(under_test.sink->writes[i]->message().window_sequence() == i + 1);
  CHECK_FALSE(under_test.sink->finished.has_value());
}

TEST_CASE("bounded stream actor: queued windows go out oldest first", "[actors][load]") {
  ActorFixture fixture;
  WindowStream under_test(fixture, 2);
  for (std::uint64_t sequence = 1; sequence <= 3; ++sequence) under_test.send_window(sequence);
  fixture.run();  // window 1 in flight, 2 and 3 queued
  for (int write = 0; write < 3; ++write) {
    complete_write(caf::actor_cast<StreamTransportActor>(under_test.stream));
    fixture.run();
  }
  REQUIRE(under_test.sink->writes.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(under_test.sink->writes[i]->message().window_sequence() == i + 1);
  CHECK_FALSE(under_test.sink->finished.has_value());
}

TEST_CASE("bounded stream actor: a publication that stops ends the stream PUBLICATION_UNAVAILABLE", "[actors][load]") {
  ActorFixture fixture;
  WindowStream under_test(fixture, 2);
  caf::anon_send_exit(under_test.source, caf::exit_reason::user_shutdown);
  fixture.run();
  REQUIRE(under_test.sink->finished.has_value());
  CHECK(under_test.sink->finished->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  CHECK(under_test.sink->finished->message == "serving load publication stopped");
}
