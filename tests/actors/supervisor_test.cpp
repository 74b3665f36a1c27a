// The supervisor alone, on the deterministic scheduler: a watched actor that ends is a
// failure, reported once; while the relay drains, only an end the relay did not ask for is
// (actors/supervisor.hpp), and the supervisor ends with the last watched actor.
#include <catch2/catch.hpp>

#include "actors/supervisor.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

// A stand-in for a core actor: it ends when told to quit (exit reason normal). It takes an
// argument it does not need: CAF 0.17 dereferences a null argument tuple when a function actor
// takes none (UBSan reports it).
caf::behavior core_actor(caf::event_based_actor* self, const std::string& /*name*/) {
  return {[self](atoms::shutdown_atom, const RpcStatus&) { self->quit(); }};
}

struct Watched {
  ActorFixture fixture;
  caf::actor membership = fixture.spawn(core_actor, "membership");
  caf::actor catalog = fixture.spawn(core_actor, "catalog");
  std::vector<std::string> failures;
  bool supervisor_ended = false;
  SupervisorActor supervisor;

  Watched() {
    supervisor = fixture.spawn(kvrelay::supervisor,
                               std::vector<SupervisedActor>{{"membership", membership}, {"catalog", catalog}},
                               [this](const std::string& failure) { failures.push_back(failure); });
    caf::actor_cast<caf::abstract_actor*>(supervisor)->attach_functor([this] { supervisor_ended = true; });
    fixture.run();
  }
  void drain() {
    caf::anon_send(supervisor, atoms::shutdown_atom_v, RpcStatus{});
    fixture.run();
  }
};

// Ends `actor` with an error, as a handler that throws ends it.
void crash(const caf::actor& actor) {
  caf::anon_send(actor, caf::exit_msg{caf::actor_addr{}, caf::make_error(caf::sec::runtime_error, "handler threw")});
}

}  // namespace

TEST_CASE("supervisor: a core actor that ends before the drain is reported once", "[actors][supervision]") {
  Watched watched;
  caf::anon_send(watched.membership, atoms::shutdown_atom_v, RpcStatus{});  // even a normal end
  crash(watched.catalog);
  watched.fixture.run();
  REQUIRE(watched.failures.size() == 1);
  CHECK_THAT(watched.failures[0], Catch::StartsWith("membership exited: "));
  CHECK_FALSE(watched.supervisor_ended);  // it ends with the drain
  watched.drain();
  CHECK(watched.supervisor_ended);
}

TEST_CASE("supervisor: while draining, ends as asked are expected and a crash is still reported",
          "[actors][supervision]") {
  Watched watched;
  watched.drain();
  CHECK_FALSE(watched.supervisor_ended);  // its actors still run

  caf::anon_send(watched.catalog, atoms::shutdown_atom_v, RpcStatus{});  // normal
  watched.fixture.run();
  CHECK(watched.failures.empty());

  SECTION("the runtime's user_shutdown") {
    caf::anon_send_exit(watched.membership, caf::exit_reason::user_shutdown);
    watched.fixture.run();
    CHECK(watched.failures.empty());
  }
  SECTION("a handler that threw while retiring pools") {
    crash(watched.membership);
    watched.fixture.run();
    REQUIRE(watched.failures.size() == 1);
    CHECK_THAT(watched.failures[0], Catch::StartsWith("membership exited: ") && Catch::Contains("handler threw"));
  }
  CHECK(watched.supervisor_ended);  // with the last of them
}
