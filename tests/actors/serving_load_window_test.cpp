// The serving-load window alone, on virtual time (docs/protocol/serving-load.md#retention):
// sources count while their last accepted report is at most the freshness old (inclusive),
// an undeclared silent frontend is forgotten after the retention, a declared one never is.
#include <catch2/catch.hpp>

#include "actors/serving_load_window.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

constexpr auto kServingWindow = std::chrono::milliseconds(1000);
constexpr auto kFreshness = std::chrono::milliseconds(3000);
constexpr auto kRetention = std::chrono::milliseconds(10000);

struct Window {
  ActorFixture fixture;
  ServingLoadWindowActor actor;
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();

  Window() {
    actor =
        fixture.spawn(serving_load_window,
                      ServingLoadWindowConfig{v1::RelayIdentity{}, kServingWindow, {kFreshness, kRetention}, nullptr});
    auto stream = spawn_recorder(fixture, inbox);
    caf::anon_send(actor, atoms::subscribe_atom_v, caf::actor_cast<UpdateStreamActor<ServingLoadBroadcast>>(stream));
    fixture.run();
  }

  // The newest window the stream received.
  ServingLoadUpdatePtr latest() const {
    ServingLoadUpdatePtr newest;
    for (const auto& message : inbox->messages) {
      if (message.match_elements<atoms::update_atom, ServingLoadUpdatePtr>())
        newest = message.get_as<ServingLoadUpdatePtr>(1);
    }
    REQUIRE(newest != nullptr);
    return newest;
  }

  // Moves on by one window period and returns the window it published.
  ServingLoadUpdatePtr tick() {
    fixture.advance(kServingWindow);
    return latest();
  }

  void frontend(std::uint64_t incarnation, std::uint64_t sequence, std::uint64_t started, std::uint64_t id = 7) {
    ingest_v1::FrontendLoadReport report;
    report.set_namespace_("lab");
    report.set_frontend_id(id);
    report.set_incarnation(incarnation);
    report.set_sequence(sequence);
    auto* model = report.add_models();
    model->set_canonical_model_id("mistral");
    model->mutable_totals()->set_requests_started(started);
    caf::anon_send(actor, atoms::frontend_load_atom_v, report);
    fixture.run();
  }
};

const v1::ModelServingLoad* mistral(const ServingLoadUpdatePtr& window) {
  for (const auto& model : window->message().models()) {
    if (model.canonical_model_id() == "mistral") return &model;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("serving-load window actor: a frontend counts until its report is older than the freshness",
          "[actors][serving_load]") {
  Window w;
  w.frontend(1, 1, 10);
  // Windows 1 s, 2 s and 3 s after the report: fresh (3 s is still fresh).
  for (int i = 1; i <= 3; ++i) {
    const auto window = w.tick();
    INFO("window " << i);
    REQUIRE(mistral(window) != nullptr);
    CHECK(mistral(window)->load().status() == v1::DATA_STATUS_COMPLETE);
    CHECK(mistral(window)->deployment().observed_frontends() == 1);
  }
  // 4 s: stale and undeclared, so not expected either; a model no pool registers goes.
  CHECK(mistral(w.tick()) == nullptr);
  // It reports again: the model is back, its totals grown by the difference (example D).
  w.frontend(1, 2, 12);
  const auto back = w.tick();
  REQUIRE(mistral(back) != nullptr);
  CHECK(mistral(back)->load().requests().requests_started_total() == 12);
}

TEST_CASE("serving-load window actor: a duplicate report does not keep a frontend fresh", "[actors][serving_load]") {
  Window w;
  w.frontend(1, 5, 10);
  for (int i = 0; i < 3; ++i) {
    w.frontend(1, 5, 10);  // the same sequence again
    REQUIRE(mistral(w.tick()) != nullptr);
  }
  w.frontend(1, 4, 10);
  CHECK(mistral(w.tick()) == nullptr);
}

TEST_CASE("serving-load window actor: a declared frontend gone stale degrades its namespace and is kept",
          "[actors][serving_load]") {
  Window w;
  ingest_v1::SetFrontendsRequest declare;
  declare.set_namespace_("lab");
  declare.add_frontend_ids(7);
  caf::anon_send(w.actor, atoms::frontends_atom_v, declare);
  w.frontend(1, 1, 10);
  CHECK(mistral(w.tick())->load().status() == v1::DATA_STATUS_COMPLETE);
  w.fixture.advance(kFreshness);
  // Stale and declared: expected 1, observed 0; a model only stale frontends list is gone.
  CHECK(mistral(w.latest()) == nullptr);
  // Another frontend lists it: expected 2 (the declared one and the fresh one), observed 1.
  w.frontend(1, 1, 3, 8);
  const auto degraded = w.tick();
  REQUIRE(mistral(degraded) != nullptr);
  CHECK(mistral(degraded)->load().status() == v1::DATA_STATUS_DEGRADED);
  CHECK(mistral(degraded)->deployment().expected_frontends() == 2);
  CHECK(mistral(degraded)->deployment().observed_frontends() == 1);
  // Past the retention the declared frontend is still remembered: its incarnation resumes.
  w.fixture.advance(kRetention);
  w.frontend(1, 2, 15);
  const auto window = w.tick();
  REQUIRE(mistral(window) != nullptr);
  // Growth 5 on frontend 7's kept baseline, and frontend 8's 3 (it is forgotten, its totals are not).
  CHECK(mistral(window)->load().requests().requests_started_total() == 18);
}

TEST_CASE("serving-load window actor: an undeclared frontend silent past the retention is forgotten",
          "[actors][serving_load]") {
  Window w;
  w.frontend(1, 3, 10);
  w.fixture.advance(kRetention + kServingWindow);  // forgotten: state and baselines, not the totals
  CHECK(mistral(w.latest()) == nullptr);
  w.frontend(1, 4, 15);  // the same incarnation: counted in full again
  const auto window = w.tick();
  REQUIRE(mistral(window) != nullptr);
  CHECK(mistral(window)->load().requests().requests_started_total() == 25);
}

TEST_CASE("serving-load window actor: a router's views expire after the freshness", "[actors][serving_load]") {
  Window w;
  LoadPool pool;
  pool.facts.endpoint = {"prod", "backend", "generate"};
  pool.facts.producer.set_layout_generation(1);
  pool.facts.producer.mutable_pool_id()->set_dc_id(7);
  pool.facts.runtime_configs[1] = RuntimeConfig{};
  pool.facts.models = {"llama"};
  caf::anon_send(w.actor, atoms::load_pools_atom_v, std::vector<LoadPool>{pool});
  ingest_v1::SchedulerLoadReport report;
  report.mutable_endpoint()->set_namespace_("prod");
  report.mutable_endpoint()->set_component("backend");
  report.mutable_endpoint()->set_endpoint("generate");
  report.set_router_id(100);
  report.set_router_epoch(1);
  report.set_sequence(1);
  auto* rank = report.add_ranks();
  rank->set_worker_id(1);
  rank->set_active_decode_blocks(6);
  caf::anon_send(w.actor, atoms::scheduler_load_atom_v, report);
  w.fixture.run();
  for (int i = 1; i <= 3; ++i) {
    const auto window = w.tick();
    REQUIRE(window->message().pools_size() == 1);
    CHECK(window->message().pools(0).load().status() == v1::DATA_STATUS_COMPLETE);
    CHECK(window->message().pools(0).load().tokens().active_decode_blocks() == 6);
  }
  const auto expired = w.tick();
  REQUIRE(expired->message().pools_size() == 1);
  CHECK(expired->message().pools(0).load().status() == v1::DATA_STATUS_UNAVAILABLE);
  CHECK(expired->message().pools(0).load().source_observed_ms() == 0);
}

TEST_CASE("serving-load window actor: tick k carries window k, also when nobody asked for window 0",
          "[actors][serving_load]") {
  ActorFixture fixture;
  auto actor =
      fixture.spawn(serving_load_window,
                    ServingLoadWindowConfig{v1::RelayIdentity{}, kServingWindow, {kFreshness, kRetention}, nullptr});
  fixture.run();
  fixture.advance(kServingWindow);  // tick 1, with no stream yet
  auto inbox = std::make_shared<Inbox>();
  caf::anon_send(actor, atoms::subscribe_atom_v,
                 caf::actor_cast<UpdateStreamActor<ServingLoadBroadcast>>(spawn_recorder(fixture, inbox)));
  fixture.run();
  fixture.advance(kServingWindow);
  std::vector<std::uint64_t> sequences;
  for (const auto& message : inbox->messages) {
    if (message.match_elements<atoms::update_atom, ServingLoadUpdatePtr>()) {
      sequences.push_back(message.get_as<ServingLoadUpdatePtr>(1)->message().window_sequence());
    }
  }
  CHECK(sequences == std::vector<std::uint64_t>{1, 2});
}
