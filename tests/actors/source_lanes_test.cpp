// Source lanes on their own, with recorders standing in for pool publishers and no membership
// at all: a batch goes from its carrier straight to its pool's publisher, sequenced by its
// source's lane (docs/architecture.md#batch-routing, docs/protocol/decisions.md#d16).
#include <catch2/catch.hpp>

#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "actors/source_lanes.hpp"
#include "metrics/relay_metrics.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

const EndpointKey kEndpoint{"ns", "backend", "generate"};

EventBatchPtr batch(std::uint64_t epoch, std::uint64_t sequence, std::uint64_t worker_id = 1) {
  auto made = std::make_shared<ingest_v1::KvEventBatch>();
  made->mutable_endpoint()->set_namespace_(kEndpoint.ns);
  made->mutable_endpoint()->set_component(kEndpoint.component);
  made->mutable_endpoint()->set_endpoint(kEndpoint.endpoint);
  made->set_worker_id(worker_id);
  made->set_source_epoch(epoch);
  made->set_sequence(sequence);
  return made;
}

// What a carrier's reply was told, if anything (a batch sent on is answered by its publisher).
struct Answers {
  std::vector<BatchOutcome> outcomes;
};

CarriedBatch carried(EventBatchPtr sent, const std::shared_ptr<Answers>& answers,
                     SourceTransport transport = SourceTransport::kPush, caf::actor_addr carrier = {}) {
  auto reply = std::make_shared<Reply<BatchOutcome>>(
      [answers](const BatchOutcome& outcome) { answers->outcomes.push_back(outcome); }, BatchOutcome{.lost = true});
  return {std::move(sent), std::move(reply), 0, transport, std::move(carrier)};
}

// A publisher that records the batches it is sent, with their reset flags.
struct RecordedPublisher {
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
  PoolPublisherActor actor;

  explicit RecordedPublisher(ActorFixture& fixture)
      : actor(caf::actor_cast<PoolPublisherActor>(spawn_recorder(fixture, inbox))) {}

  // (sequence, the reset it starts with) of every batch received, in order.
  std::vector<std::pair<std::uint64_t, SourceReset>> received() const {
    std::vector<std::pair<std::uint64_t, SourceReset>> out;
    for (const auto& message : inbox->messages) {
      if (!message.match_elements<atoms::apply_batch_atom, EventBatchPtr, SourceReset, BatchReplyPtr, std::int64_t>())
        continue;
      out.emplace_back(message.get_as<EventBatchPtr>(1)->sequence(), message.get_as<SourceReset>(2));
    }
    return out;
  }
};

using Received = std::vector<std::pair<std::uint64_t, SourceReset>>;
constexpr SourceReset kInOrder = SourceReset::kNone;
constexpr SourceReset kSourceReset = SourceReset::kSource;
constexpr SourceReset kNewGeneration = SourceReset::kNewGeneration;

// kv_relay_source_resets_total{reason=`reason`}.
double resets_counted(const metrics::RelayMetrics& metrics, const std::string& reason) {
  return counted(metrics, "kv_relay_source_resets_total", "reason", reason);
}

}  // namespace

TEST_CASE("lanes: in-order batches go straight to the publisher, a stale one is refused there", "[actors][lanes]") {
  ActorFixture fixture;
  RecordedPublisher pool(fixture);
  SourceLane lane;
  lane.declare({SourceTransport::kPush, {}, PoolRoute{pool.actor, 1}});
  auto answers = std::make_shared<Answers>();

  for (std::uint64_t sequence : {0, 1, 2}) lane.carry(carried(batch(7, sequence), answers), nullptr);
  lane.carry(carried(batch(7, 1), answers), nullptr);  // already seen
  fixture.run();

  CHECK(pool.received() == Received{{0, kInOrder}, {1, kInOrder}, {2, kInOrder}});
  REQUIRE(answers->outcomes.size() == 1);  // only the refusal: the publisher answers the others
  CHECK_FALSE(answers->outcomes[0].applied);
  CHECK_FALSE(answers->outcomes[0].lost);
  CHECK(lane.report().last_sequence == std::optional<std::uint64_t>(2));
  CHECK(lane.report().resets == 0);
}

TEST_CASE("lanes: a new epoch, a sequence gap or a rebuilt pool reset the source first", "[actors][lanes]") {
  ActorFixture fixture;
  RecordedPublisher first(fixture), rebuilt(fixture);
  SourceLane lane;
  lane.declare({SourceTransport::kPush, {}, PoolRoute{first.actor, 1}});
  auto answers = std::make_shared<Answers>();

  lane.carry(carried(batch(7, 0), answers), nullptr);
  lane.carry(carried(batch(7, 3), answers), nullptr);  // 1 and 2 never came
  lane.carry(carried(batch(8, 0), answers), nullptr);  // the feeder started over
  lane.carry(carried(batch(8, 1), answers), nullptr);
  // A re-layout keeps publisher and lineage: nothing to replay.
  lane.declare({SourceTransport::kPush, {}, PoolRoute{first.actor, 1}});
  lane.carry(carried(batch(8, 2), answers), nullptr);
  // A rebuilt pool holds none of the source's blocks: its next batch resets it there.
  lane.declare({SourceTransport::kPush, {}, PoolRoute{rebuilt.actor, 2}});
  lane.carry(carried(batch(8, 3), answers), nullptr);
  lane.carry(carried(batch(8, 4), answers), nullptr);
  fixture.run();

  CHECK(first.received() ==
        Received{{0, kInOrder}, {3, kSourceReset}, {0, kSourceReset}, {1, kInOrder}, {2, kInOrder}});
  CHECK(rebuilt.received() == Received{{3, kNewGeneration}, {4, kInOrder}});
  CHECK(answers->outcomes.empty());
  CHECK(lane.report().resets == 3);
}

TEST_CASE("lanes: the reset of a rebuilt pool's source is counted new_generation whatever else its batch says",
          "[actors][lanes]") {
  ActorFixture fixture;
  RecordedPublisher first(fixture), rebuilt(fixture);
  metrics::RelayMetrics metrics;
  SourceLane lane;
  lane.declare({SourceTransport::kPush, {}, PoolRoute{first.actor, 1}});
  auto answers = std::make_shared<Answers>();

  lane.carry(carried(batch(7, 0), answers), &metrics);
  lane.declare({SourceTransport::kPush, {}, PoolRoute{rebuilt.actor, 2}});
  lane.carry(carried(batch(8, 5), answers), &metrics);  // a new epoch and a gap, into the rebuilt pool
  lane.carry(carried(batch(8, 7), answers), &metrics);  // then a gap in the rebuilt pool
  fixture.run();

  CHECK(rebuilt.received() == Received{{5, kNewGeneration}, {7, kSourceReset}});
  CHECK(resets_counted(metrics, "new_generation") == 1);
  CHECK(resets_counted(metrics, "epoch_changed") == 0);
  CHECK(resets_counted(metrics, "sequence_gap") == 1);
}

TEST_CASE("lanes: a batch is a duplicate only of one sent to the same pool generation", "[actors][lanes]") {
  ActorFixture fixture;
  RecordedPublisher fenced(fixture), rebuilt(fixture);
  SourceLane lane;
  lane.declare({SourceTransport::kPush, {}, PoolRoute{fenced.actor, 1}});
  auto answers = std::make_shared<Answers>();
  lane.carry(carried(batch(7, 0), answers), nullptr);
  lane.carry(carried(batch(7, 1), answers), nullptr);  // the fenced generation refuses it
  // The feeder sends 1 again once the pool is rebuilt: it starts the source over there.
  lane.declare({SourceTransport::kPush, {}, PoolRoute{rebuilt.actor, 2}});
  lane.carry(carried(batch(7, 1), answers), nullptr);
  lane.carry(carried(batch(7, 1), answers), nullptr);  // in the same generation: a duplicate
  fixture.run();

  CHECK(fenced.received() == Received{{0, kInOrder}, {1, kInOrder}});
  CHECK(rebuilt.received() == Received{{1, kNewGeneration}});
  REQUIRE(answers->outcomes.size() == 1);
  CHECK_FALSE(answers->outcomes[0].applied);
  CHECK(lane.report().last_sequence == std::optional<std::uint64_t>(1));
}

TEST_CASE("lanes: the router refuses what no current lane carries", "[actors][lanes]") {
  ActorFixture fixture;
  RecordedPublisher pool(fixture);
  auto routes = std::make_shared<RoutingRegistry>();
  const BatchRouter router(routes, nullptr);
  auto push = std::make_shared<SourceLane>(), engine = std::make_shared<SourceLane>(),
       idle = std::make_shared<SourceLane>();
  const caf::actor engine_reader = spawn_recorder(fixture, std::make_shared<Inbox>());
  const caf::actor replaced_reader = spawn_recorder(fixture, std::make_shared<Inbox>());
  push->declare({SourceTransport::kPush, {}, PoolRoute{pool.actor, 1}});
  engine->declare({SourceTransport::kZmq, engine_reader.address(), PoolRoute{pool.actor, 1}});
  idle->declare({SourceTransport::kPush, {}, std::nullopt});
  auto view = std::make_shared<RoutingView>();
  view->lanes = {
      {SourceId{kEndpoint, 1, 0}, push}, {SourceId{kEndpoint, 2, 0}, engine}, {SourceId{kEndpoint, 3, 0}, idle}};
  routes->publish(view);
  auto answers = std::make_shared<Answers>();

  router.route(carried(batch(1, 0, 9), answers));                                                    // not declared
  router.route(carried(batch(1, 0, 1), answers, SourceTransport::kZmq, engine_reader.address()));    // declared as push
  router.route(carried(batch(1, 0, 2), answers, SourceTransport::kZmq, replaced_reader.address()));  // a predecessor
  router.route(carried(batch(1, 0, 3), answers));                                                    // no pool
  router.route(carried(batch(1, 0, 2), answers));  // pushed to a rank declared as zmq
  fixture.run();
  CHECK(answers->outcomes.size() == 5);
  for (const BatchOutcome& outcome : answers->outcomes) CHECK_FALSE(outcome.applied);
  CHECK(pool.received().empty());

  router.route(carried(batch(1, 0, 1), answers));
  router.route(carried(batch(1, 0, 2), answers, SourceTransport::kZmq, engine_reader.address()));
  fixture.run();
  CHECK(pool.received() == Received{{0, kInOrder}, {0, kInOrder}});

  push->retire();  // membership forgot the source; a carrier may still hold the old view
  router.route(carried(batch(1, 1, 1), answers));
  fixture.run();
  CHECK(answers->outcomes.size() == 6);
  CHECK_FALSE(answers->outcomes.back().applied);
  CHECK(pool.received().size() == 2);

  routes->publish(RoutingView::closed());  // membership is gone
  router.route(carried(batch(1, 1, 2), answers, SourceTransport::kZmq, engine_reader.address()));
  REQUIRE(answers->outcomes.size() == 7);
  CHECK(answers->outcomes.back().lost);
  CHECK(pool.received().size() == 2);
}

// Two streams of one source at once (a feeder that reconnected while its old stream still
// sends): whatever the interleaving, the publisher receives the accepted batches in the order
// their sequences were accepted -- strictly increasing -- and every other one is refused.
TEST_CASE("lanes: batches carried from two threads reach the publisher in sequence order", "[actors][lanes]") {
  caf::actor_system_config config;
  config.set("scheduler.max-threads", 2);
  caf::actor_system system(config);
  struct Arrivals {
    std::mutex mutex;
    std::vector<std::uint64_t> sequences;
  };
  auto received = std::make_shared<Arrivals>();
  // `received` is an argument, not a capture (see spawn_recorder in actor_fixture.hpp).
  auto publisher = system.spawn(
      [](caf::event_based_actor* self, std::shared_ptr<Arrivals> received) -> caf::behavior {
        self->set_default_handler(
            [received](caf::scheduled_actor*, caf::message_view& view) -> caf::result<caf::message> {
              const caf::message message = view.move_content_to_message();
              std::lock_guard lock(received->mutex);
              received->sequences.push_back(message.get_as<EventBatchPtr>(1)->sequence());
              return caf::message{};
            });
        return {[](atoms::sample_atom) {}};
      },
      received);
  SourceLane lane;
  lane.declare({SourceTransport::kPush, {}, PoolRoute{caf::actor_cast<PoolPublisherActor>(publisher), 1}});

  constexpr std::uint64_t kPerThread = 5'000;
  std::atomic<std::uint64_t> next_sequence{0};
  std::mutex refused_mutex;
  std::set<std::uint64_t> refused;
  auto feeder = [&] {
    for (std::uint64_t i = 0; i < kPerThread; ++i) {
      const std::uint64_t sequence = next_sequence.fetch_add(1);
      auto reply = std::make_shared<Reply<BatchOutcome>>(
          [&, sequence](const BatchOutcome& outcome) {
            std::lock_guard lock(refused_mutex);
            if (!outcome.applied) refused.insert(sequence);
          },
          BatchOutcome{.applied = true});  // dropped by the recorder unanswered: not a refusal
      lane.carry({batch(1, sequence), std::move(reply), 0, SourceTransport::kPush, {}}, nullptr);
    }
  };
  std::thread a(feeder), b(feeder);
  a.join();
  b.join();
  // Every batch was sent before this request: its answer means the publisher has them all.
  caf::scoped_actor self{system};
  self->request(publisher, caf::infinite, atoms::sample_atom_v).receive([] {}, [](const caf::error&) {});
  std::vector<std::uint64_t> expected;  // every sequence the lane did not refuse, in order
  {
    std::lock_guard lock(refused_mutex);
    for (std::uint64_t sequence = 0; sequence < 2 * kPerThread; ++sequence) {
      if (!refused.contains(sequence)) expected.push_back(sequence);
    }
  }
  REQUIRE_FALSE(expected.empty());
  std::lock_guard lock(received->mutex);
  CHECK(received->sequences == expected);
  caf::anon_send_exit(publisher, caf::exit_reason::user_shutdown);
}
