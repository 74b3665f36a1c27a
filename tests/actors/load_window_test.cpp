// The load window alone, on virtual time: one complete window per period, no burst after a
// late tick, reports reflected in the next window.
#include <catch2/catch.hpp>

#include "actors/load_window.hpp"
#include "tests/actors/actor_fixture.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

constexpr auto kWindow = std::chrono::milliseconds(100);

std::vector<LoadUpdatePtr> windows_in(const Inbox& inbox) {
  std::vector<LoadUpdatePtr> windows;
  for (const auto& message : inbox.messages) {
    if (message.match_elements<atoms::update_atom, LoadUpdatePtr>())
      windows.push_back(message.get_as<LoadUpdatePtr>(1));
  }
  return windows;
}

LoadPool one_pool() {
  LoadPool pool;
  pool.facts.endpoint = {"prod", "backend", "generate"};
  pool.facts.producer.set_layout_generation(1);
  pool.facts.producer.mutable_pool_id()->set_dc_id(7);
  RuntimeConfig config;
  config.total_kv_blocks = 100;
  pool.facts.runtime_configs[1] = config;
  return pool;
}

// Worker 1 (rank 0) of one_pool()'s endpoint, using `used_blocks`.
ingest_v1::LoadReport worker_1_report(std::uint64_t used_blocks) {
  ingest_v1::LoadReport report;
  report.mutable_endpoint()->set_namespace_("prod");
  report.mutable_endpoint()->set_component("backend");
  report.mutable_endpoint()->set_endpoint("generate");
  report.set_worker_id(1);
  report.set_kv_used_blocks(used_blocks);
  return report;
}

// worker_1_report(used_blocks) in a batch whose outcome nobody reads.
LoadReportBatch worker_1_batch(std::uint64_t used_blocks) {
  return LoadReportBatch{{worker_1_report(used_blocks)},
                         std::make_shared<Reply<LoadOutcome>>([](const LoadOutcome&) {}, LoadOutcome{0, 1})};
}

// one_pool(), publishing its coverage to stats, handed to `window`.
LoadPool pool_in(ActorFixture& fixture, const LoadWindowActor& window) {
  LoadPool pool = one_pool();
  pool.stats = std::make_shared<metrics::PoolStats>();
  caf::anon_send(window, atoms::load_pools_atom_v, std::vector<LoadPool>{pool});
  fixture.run();
  return pool;
}

}  // namespace

TEST_CASE("load window actor: one window per period, a late tick does not burst", "[actors][load]") {
  ActorFixture fixture;
  auto window = fixture.spawn(load_window, v1::RelayIdentity{}, kWindow, nullptr);
  auto inbox = std::make_shared<Inbox>();
  auto stream = spawn_recorder(fixture, inbox);
  caf::anon_send(window, atoms::subscribe_atom_v, caf::actor_cast<UpdateStreamActor<LoadBroadcast>>(stream));
  fixture.run();
  REQUIRE(windows_in(*inbox).size() == 1);  // the current window at once
  CHECK(windows_in(*inbox)[0]->message().window_sequence() == 0);

  fixture.advance(kWindow);
  REQUIRE(windows_in(*inbox).size() == 2);
  CHECK(windows_in(*inbox)[1]->message().window_sequence() == 1);

  fixture.advance(3 * kWindow + kWindow / 2);  // late: one window, then the schedule moves on
  REQUIRE(windows_in(*inbox).size() == 3);
  CHECK(windows_in(*inbox)[2]->message().window_sequence() == 2);
  // The next tick is a whole period after the late one, not at a slot the late one missed.
  fixture.advance(kWindow - std::chrono::milliseconds(1));
  CHECK(windows_in(*inbox).size() == 3);
  fixture.advance(std::chrono::milliseconds(1));
  CHECK(windows_in(*inbox).size() == 4);
}

TEST_CASE("load window actor: a report shows in the next window, with its coverage", "[actors][load]") {
  ActorFixture fixture;
  auto window = fixture.spawn(load_window, v1::RelayIdentity{}, kWindow, nullptr);
  auto inbox = std::make_shared<Inbox>();
  auto stream = spawn_recorder(fixture, inbox);
  caf::anon_send(window, atoms::load_pools_atom_v, std::vector<LoadPool>{one_pool()});
  caf::anon_send(window, atoms::subscribe_atom_v, caf::actor_cast<UpdateStreamActor<LoadBroadcast>>(stream));
  fixture.run();

  const ingest_v1::LoadReport report = worker_1_report(40);
  std::optional<LoadOutcome> done;
  auto reply =
      std::make_shared<Reply<LoadOutcome>>([&done](const LoadOutcome& outcome) { done = outcome; }, LoadOutcome{0, 1});
  caf::anon_send(window, atoms::report_atom_v, LoadReportBatch{{report}, std::move(reply)});
  fixture.run();
  REQUIRE(done.has_value());
  CHECK(done->applied == 1);
  CHECK(done->rejected == 0);
  CHECK(windows_in(*inbox).size() == 1);  // nothing until the tick
  fixture.advance(kWindow);
  const auto windows = windows_in(*inbox);
  REQUIRE(windows.size() == 2);
  REQUIRE(windows[1]->message().pools_size() == 1);
  v1::KvPoolLoadUpdate sent;  // what every stream sends: the bytes serialized once
  REQUIRE(sent.ParseFromString(windows[1]->bytes()));
  CHECK(sent.window_sequence() == 1);
  REQUIRE(sent.pools_size() == 1);
  CHECK(sent.pools(0).kv_used_blocks() == 40);
  CHECK(windows[1]->message().pools(0).kv_used_blocks() == 40);
  CHECK(windows[1]->message().pools(0).total_kv_blocks() == 100);
  CHECK(windows[1]->message().pools(0).kv_observed_ranks() == 1);
  CHECK(windows[1]->message().pools(0).kv_expected_ranks() == 1);
}

TEST_CASE("load window actor: forgetting a worker's load lowers the published coverage", "[actors][load]") {
  ActorFixture fixture;
  auto window = fixture.spawn(load_window, v1::RelayIdentity{}, kWindow, nullptr);
  const LoadPool pool = pool_in(fixture, window);
  CHECK(pool.stats->expected_ranks.load() == 1);
  CHECK(pool.stats->observed_ranks.load() == 0);

  caf::anon_send(window, atoms::report_atom_v, worker_1_batch(40));
  fixture.run();
  CHECK(pool.stats->observed_ranks.load() == 1);

  // As membership sends it when the worker goes.
  caf::anon_send(window, atoms::forget_load_atom_v, pool.facts.endpoint, std::uint64_t{1});
  fixture.run();
  CHECK(pool.stats->observed_ranks.load() == 0);
  CHECK(pool.stats->expected_ranks.load() == 1);
}

TEST_CASE("load window actor: a reporter's forget voids only the reports it made last", "[actors][load]") {
  ActorFixture fixture;
  auto window = fixture.spawn(load_window, v1::RelayIdentity{}, kWindow, nullptr);
  const LoadPool pool = pool_in(fixture, window);
  // Two engine scrapers of worker 1: the one its old page declared, and its replacement.
  const caf::actor old_scraper = spawn_recorder(fixture, std::make_shared<Inbox>());
  const caf::actor new_scraper = spawn_recorder(fixture, std::make_shared<Inbox>());
  const auto report_from = [&](const caf::actor& scraper, std::uint64_t used_blocks) {
    caf::send_as(scraper, window, atoms::report_atom_v, worker_1_batch(used_blocks));
    fixture.run();
  };
  const auto forget_from = [&](const caf::actor& scraper) {
    caf::send_as(scraper, window, atoms::forget_reports_atom_v, pool.facts.endpoint, std::uint64_t{1});
    fixture.run();
  };
  report_from(old_scraper, 40);
  report_from(new_scraper, 50);
  forget_from(old_scraper);  // its last word, come after the new scraper's first report
  CHECK(pool.stats->observed_ranks.load() == 1);
  forget_from(new_scraper);
  CHECK(pool.stats->observed_ranks.load() == 0);
  report_from(new_scraper, 60);
  caf::anon_send(window, atoms::forget_reports_atom_v, pool.facts.endpoint, std::uint64_t{1});  // no reporter
  fixture.run();
  CHECK(pool.stats->observed_ranks.load() == 1);
}

TEST_CASE("load window actor: window 0 holds the pools it was given before its first subscriber", "[actors][load]") {
  ActorFixture fixture;
  auto window = fixture.spawn(load_window, v1::RelayIdentity{}, kWindow, nullptr);
  caf::anon_send(window, atoms::load_pools_atom_v, std::vector<LoadPool>{one_pool()});  // a topology file's pool
  fixture.run();
  auto inbox = std::make_shared<Inbox>();
  caf::anon_send(window, atoms::subscribe_atom_v,
                 caf::actor_cast<UpdateStreamActor<LoadBroadcast>>(spawn_recorder(fixture, inbox)));
  fixture.run();
  const auto windows = windows_in(*inbox);
  REQUIRE(windows.size() == 1);
  CHECK(windows[0]->message().window_sequence() == 0);
  REQUIRE(windows[0]->message().pools_size() == 1);
  CHECK(windows[0]->message().pools(0).kv_expected_ranks() == 1);
}

TEST_CASE("load window actor: the first tick builds window 1 even when nobody asked for window 0", "[actors][load]") {
  ActorFixture fixture;
  auto window = fixture.spawn(load_window, v1::RelayIdentity{}, kWindow, nullptr);
  fixture.run();
  fixture.advance(kWindow);  // a tick, and nobody has asked yet
  auto inbox = std::make_shared<Inbox>();
  caf::anon_send(window, atoms::subscribe_atom_v,
                 caf::actor_cast<UpdateStreamActor<LoadBroadcast>>(spawn_recorder(fixture, inbox)));
  fixture.run();
  REQUIRE(windows_in(*inbox).size() == 1);
  CHECK(windows_in(*inbox)[0]->message().window_sequence() == 1);
  fixture.advance(kWindow);
  REQUIRE(windows_in(*inbox).size() == 2);
  CHECK(windows_in(*inbox)[1]->message().window_sequence() == 2);
}
