// The publishers of the broadcast streams (catalog, readiness, pool load, serving load) once a
// drain has begun: a stream admitted just before it subscribes after its publisher closed,
// and is ended at once with the drain's status rather than left open until the deadline.
#include <catch2/catch.hpp>

#include "actors/catalog.hpp"
#include "actors/load_window.hpp"
#include "actors/serving_load_window.hpp"
#include "actors/topology_projector.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

constexpr auto kLoadWindow = std::chrono::milliseconds(100);

// Shuts `publisher` down, then subscribes a recording stream as a late gRPC call would.
template <class Message, class Publisher>
void subscribe_after_shutdown(ActorFixture& fixture, const Publisher& publisher) {
  const auto closing = RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "relay shutting down");
  caf::anon_send(publisher, atoms::shutdown_atom_v, closing);
  fixture.run();
  auto inbox = std::make_shared<Inbox>();
  auto stream = spawn_recorder(fixture, inbox);
  caf::anon_send(publisher, atoms::subscribe_atom_v, caf::actor_cast<UpdateStreamActor<Message>>(stream));
  fixture.run();
  REQUIRE(ending_of(*inbox).has_value());
  CHECK(ending_of(*inbox)->reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE);
  CHECK(ending_of(*inbox)->message == "relay shutting down");
  CHECK(inbox->count<atoms::update_atom, std::shared_ptr<const Message>>() == 0);
  // Not subscribed: nothing more reaches it, a window tick included.
  fixture.advance(kLoadWindow);
  CHECK(inbox->messages.size() == 1);
}

}  // namespace

TEST_CASE("broadcast publishers end a stream that subscribes after their shutdown", "[actors][drain]") {
  ActorFixture fixture;
  SECTION("catalog") {
    subscribe_after_shutdown<CatalogBroadcast>(
        fixture, fixture.spawn(catalog, std::make_shared<CatalogRegistry>(), v1::RelayIdentity{}, nullptr));
  }
  SECTION("readiness") {
    subscribe_after_shutdown<ReadinessBroadcast>(fixture,
                                                 fixture.spawn(topology_projector, v1::RelayIdentity{}, nullptr));
  }
  SECTION("pool load") {
    subscribe_after_shutdown<LoadBroadcast>(fixture,
                                            fixture.spawn(load_window, v1::RelayIdentity{}, kLoadWindow, nullptr));
  }
  SECTION("serving load") {
    subscribe_after_shutdown<ServingLoadBroadcast>(
        fixture,
        fixture.spawn(serving_load_window,
                      ServingLoadWindowConfig{v1::RelayIdentity{}, kLoadWindow, {kLoadWindow, kLoadWindow}, nullptr}));
  }
}
