// Membership alone, on virtual time, with recorders for its peers: a fenced pool generation
// is withdrawn at once and its successor materialized after a backoff that grows while
// generations keep fencing soon after they were built.
#include <catch2/catch.hpp>

#include "actors/membership.hpp"
#include "actors/source_lanes.hpp"
#include "metrics/relay_metrics.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;
using std::chrono::milliseconds;

namespace {

ingest_v1::PutWorkerRequest worker_with_push_source() {
  ingest_v1::PutWorkerRequest request;
  request.mutable_endpoint()->set_namespace_("ns");
  request.mutable_endpoint()->set_component("backend");
  request.mutable_endpoint()->set_endpoint("generate");
  request.set_worker_id(1);
  auto* card = request.mutable_card();
  card->set_display_name("llama");
  card->set_kv_cache_block_size(4);
  card->set_worker_type(ingest_v1::WORKER_TYPE_AGGREGATED);
  card->set_model_type(1);
  card->mutable_runtime_config()->set_data_parallel_size(1);
  auto* source = request.add_kv_sources();
  source->set_dp_rank(0);
  source->mutable_push();
  return request;
}

struct MembershipUnderTest {
  ActorFixture& fixture;
  std::shared_ptr<Inbox> catalog_inbox = std::make_shared<Inbox>();
  std::shared_ptr<Inbox> peers_inbox = std::make_shared<Inbox>();                 // readiness facts and load pools
  std::shared_ptr<RoutingRegistry> routes = std::make_shared<RoutingRegistry>();  // where batches go
  MembershipActor membership;

  explicit MembershipUnderTest(ActorFixture& f, metrics::RelayMetrics* metrics = nullptr) : fixture(f) {
    const caf::actor catalog = spawn_recorder(fixture, catalog_inbox);
    const caf::actor peers = spawn_recorder(fixture, peers_inbox);
    MembershipPeers handles{caf::actor_cast<CatalogActor>(catalog), caf::actor_cast<TopologyProjectorActor>(peers),
                            caf::actor_cast<LoadWindowActor>(peers), caf::actor_cast<ServingLoadWindowActor>(peers)};
    MembershipConfig config;
    config.routes = routes;
    config.metrics = metrics;
    membership = fixture.spawn(membership_actor, std::move(config), std::move(handles));
    caf::anon_send(membership, atoms::put_worker_atom_v, worker_with_push_source());
    fixture.run();
  }

  // The pools of the catalog membership sent last.
  std::vector<CatalogEntry> catalog() const {
    std::vector<CatalogEntry> last;
    for (const auto& message : catalog_inbox->messages) {
      if (message.match_elements<atoms::catalog_atom, std::vector<CatalogEntry>>()) {
        last = message.get_as<std::vector<CatalogEntry>>(1);
      }
    }
    return last;
  }

  std::uint64_t generation() const {
    const auto pools = catalog();
    REQUIRE(pools.size() == 1);
    return pools[0].descriptor.producer().layout_generation();
  }

  ingest_v1::RelayState relay_state() {
    auto answer = std::make_shared<std::optional<ingest_v1::RelayState>>();
    fixture.spawn(
        [answer](caf::event_based_actor* self, const MembershipActor& target) {
          self->request(target, caf::infinite, atoms::get_state_atom_v)
              .then([answer](const ingest_v1::RelayState& state) { *answer = state; });
        },
        membership);
    fixture.run();
    REQUIRE(answer->has_value());
    return **answer;
  }

  // The wait the endpoint's conflict names: "... its successor is materialized after N ms".
  milliseconds rebuild_wait() {
    const auto state = relay_state();
    REQUIRE(state.endpoints_size() == 1);
    REQUIRE(state.endpoints(0).conflicts_size() == 1);
    const std::string& conflict = state.endpoints(0).conflicts(0);
    const auto after = conflict.find("materialized after ");
    REQUIRE(after != std::string::npos);
    return milliseconds(std::stoll(conflict.substr(after + std::string("materialized after ").size())));
  }

  // The pool's publisher fences its generation, as when a stream finds a broken delta.
  void fence() {
    const auto pools = catalog();
    REQUIRE(pools.size() == 1);
    const caf::actor detector = spawn_recorder(fixture, std::make_shared<Inbox>());
    caf::anon_send(pools[0].publisher, atoms::broken_sequence_atom_v, caf::actor_cast<PoolFrameSinkActor>(detector),
                   pools[0].descriptor.producer().layout_generation(),
                   std::string("a delta that does not continue its sequence"));
    fixture.run();
  }
};

}  // namespace

TEST_CASE("membership actor: a fenced pool is withdrawn at once and rebuilt after a growing backoff",
          "[actors][membership]") {
  ActorFixture fixture;
  MembershipUnderTest under_test(fixture);
  const std::uint64_t first = under_test.generation();

  under_test.fence();
  CHECK(under_test.catalog().empty());
  const auto waiting = under_test.relay_state();
  REQUIRE(waiting.endpoints_size() == 1);
  CHECK_FALSE(waiting.endpoints(0).pool_materialized());
  REQUIRE(waiting.endpoints(0).conflicts_size() == 1);
  CHECK_THAT(waiting.endpoints(0).conflicts(0), Catch::Contains("was fenced"));
  fixture.advance(milliseconds(49));  // the first wait is drawn from [50, 100] ms
  CHECK(under_test.catalog().empty());
  fixture.advance(milliseconds(51));
  const std::uint64_t second = under_test.generation();
  CHECK(second > first);
  CHECK(under_test.relay_state().endpoints(0).conflicts_size() == 0);

  under_test.fence();  // fenced soon after it was built: the wait doubles, to [100, 200] ms
  const milliseconds drawn = under_test.rebuild_wait();
  CHECK(drawn >= milliseconds(100));
  CHECK(drawn <= milliseconds(200));
  fixture.advance(drawn - milliseconds(1));
  CHECK(under_test.catalog().empty());
  fixture.advance(milliseconds(1));
  const std::uint64_t third = under_test.generation();
  CHECK(third > second);

  fixture.advance(milliseconds(5000));  // a generation that served the longest wait starts the count over
  under_test.fence();
  fixture.advance(milliseconds(100));
  CHECK(under_test.generation() > third);
}

TEST_CASE("membership actor: once the relay drains, a rebuild that comes due builds no pool", "[actors][membership]") {
  ActorFixture fixture;
  MembershipUnderTest under_test(fixture);
  under_test.fence();  // its successor is held for 50-100 ms
  caf::anon_send(under_test.membership, atoms::shutdown_atom_v,
                 RpcStatus{StatusCode::kUnavailable, "the relay is shutting down", {}});
  fixture.run();
  fixture.advance(milliseconds(100));
  CHECK(under_test.catalog().empty());
  // A worker declared after the drain began (its call admitted just before) builds none either.
  auto other = worker_with_push_source();
  other.mutable_endpoint()->set_component("other");
  caf::anon_send(under_test.membership, atoms::put_worker_atom_v, other);
  fixture.run();
  CHECK(under_test.catalog().empty());
}

// kv_relay_ingest_batches_total{result=`result`}.
double batches_counted(const metrics::RelayMetrics& metrics, const std::string& result) {
  return counted(metrics, "kv_relay_ingest_batches_total", "result", result);
}

TEST_CASE("membership actor: once the relay drains, a pushed batch is refused as draining, not as unknown",
          "[actors][membership]") {
  ActorFixture fixture;
  metrics::RelayMetrics metrics;
  MembershipUnderTest under_test(fixture, &metrics);
  const auto before = under_test.routes->current();  // as a carrier may still hold it
  REQUIRE(before->lanes.size() == 1);
  caf::anon_send(under_test.membership, atoms::shutdown_atom_v,
                 RpcStatus{StatusCode::kUnavailable, "the relay is shutting down", {}});
  fixture.run();
  auto batch = std::make_shared<ingest_v1::KvEventBatch>();
  *batch->mutable_endpoint() = worker_with_push_source().endpoint();
  batch->set_worker_id(1);
  std::optional<BatchOutcome> answered;
  auto reply = std::make_shared<Reply<BatchOutcome>>([&](const BatchOutcome& outcome) { answered = outcome; },
                                                     BatchOutcome{.lost = true});
  BatchRouter(under_test.routes, &metrics).route({batch, reply, 0, SourceTransport::kPush, {}});
  fixture.run();
  REQUIRE(answered.has_value());
  CHECK_FALSE(answered->applied);
  CHECK_FALSE(answered->lost);  // the feeder's stream goes on until it closes it
  CHECK(batches_counted(metrics, "draining") == 1);
  CHECK(batches_counted(metrics, "unknown_source") == 0);

  // Carried through the view from before the drain, it finds its lane drained: it never reaches
  // the retired publisher.
  answered.reset();
  auto second_reply = std::make_shared<Reply<BatchOutcome>>([&](const BatchOutcome& outcome) { answered = outcome; },
                                                            BatchOutcome{.lost = true});
  before->lanes.begin()->second->carry({batch, second_reply, 0, SourceTransport::kPush, {}}, &metrics);
  fixture.run();
  REQUIRE(answered.has_value());
  CHECK_FALSE(answered->applied);
  CHECK_FALSE(answered->lost);
  CHECK(batches_counted(metrics, "draining") == 2);
}
