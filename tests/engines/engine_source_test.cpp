// Engine (ZeroMQ) sources against tools/fake_engine.py, which publishes vLLM's exact bytes on
// loopback (docs/protocol/engine-sources.md). Every wait is on an engine's answer or on the
// relay's GetState; nothing sleeps.
#include <catch2/catch.hpp>

#include "tests/engines/engine_support.hpp"
#include "tests/integration/replica.hpp"
#include "tests/integration/scrape.hpp"

using namespace kvrelay::test;

namespace {

using Json = nlohmann::json;

// Publishes every batch; returns the seq of the last.
std::uint64_t publish_all(FakeEngineProcess& engine, const EngineWorkload& workload,
                          const std::vector<EngineBatch>& batches) {
  std::uint64_t seq = 0;
  for (const EngineBatch& batch : batches) seq = engine.batch(workload.engine_events(batch));
  return seq;
}

// One stored block of engine id `hash` and tokens {hash, 2, 3, 4}, as a batch's events.
Json one_block(int hash) {
  return Json::array({{{"kind", "stored"}, {"hashes", {hash}}, {"token_ids", {hash, 2, 3, 4}}, {"block_size", 4}}});
}

struct Encoding {
  std::vector<std::string> args;
  WorkloadShape shape;
};

// A relay with /metrics on loopback, and its engine source's counters (docs/metrics.md).
kvrelay::RelayOptions with_metrics() {
  kvrelay::RelayOptions options = loopback_options();
  options.metrics_listen = "127.0.0.1:0";
  return options;
}

Labels engine_source_labels(std::string key = "", std::string value = "") {
  Labels labels{{"serving_endpoint", "prod/engines/generate"}, {"worker", "1"}, {"dp_rank", "0"}};
  if (!key.empty()) labels[key] = value;
  return labels;
}

double batches_counted(const Scrape& scrape, const std::string& result) {
  return scrape.count("kv_relay_engine_source_batches_total", engine_source_labels("result", result));
}

}  // namespace

TEST_CASE("engines: a pool fed over ZeroMQ and a pool fed by push with the same workload are bit-identical",
          "[engines]") {
  const Encoding encoding = GENERATE(
      Encoding{{"--encoding", "map", "--hashes", "int"}, {4, false, true, true, "extra_keys"}},
      Encoding{{"--encoding", "map", "--hashes", "bytes", "--envelope", "map"}, {4, false, true, false, "cache_salt"}},
      Encoding{{"--encoding", "positional", "--hashes", "signed"}, {4, false, false, true, ""}},
      Encoding{{"--encoding", "positional", "--envelope", "legacy", "--positional-fields", "6"},
               {4, false, false, false, ""}},
      Encoding{{"--encoding", "map"}, {4, true, false, true, ""}});
  INFO("engine " << Json(encoding.args).dump() << (encoding.shape.eagle ? " eagle" : ""));
  FakeEngineProcess engine(encoding.args);
  WorkerShape shape;
  shape.block_size = encoding.shape.block_size;
  auto request = engine_worker(1, {&engine}, shape);
  request.mutable_card()->mutable_runtime_config()->set_enable_eagle(encoding.shape.eagle);
  EngineWorkload workload(7, encoding.shape);
  const auto batches = workload.next(120);
  // First, and on its own: a relay in this process stops cleanly only once the other is gone.
  const auto twin = push_twin(request, workload, batches);

  TestRelay relay;
  relay.put_worker(request);
  engine.await_subscribers(1);
  const std::uint64_t last = publish_all(engine, workload, batches);
  const auto pool = settled_pool(relay, last);
  CHECK(pool.unique_blocks() > 0);
  CHECK(twin.unique_blocks() == pool.unique_blocks());
  CHECK(twin.filter_digest() == pool.filter_digest());

  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->transport() == "zmq");
  CHECK(source->connected());
  CHECK(source->endpoint() == engine.pub());
  CHECK(source->resets() == 0);
}

TEST_CASE("engines: a pool rebuilt as a new generation reads the engine's cache again from its replay socket",
          "[engines]") {
  FakeEngineProcess engine({"--replay"});
  EngineWorkload workload(13, {});
  const auto batches = workload.next(20);
  auto worker = engine_worker(1, {&engine});
  // Another revision of the model: a new cache-semantics domain, so a new pool generation,
  // which the engine source (decoding as before) keeps feeding.
  auto revised = worker;
  revised.mutable_card()->set_source_path("models/llama-revision-2");
  const auto twin = push_twin(revised, workload, batches);
  TestRelay relay(with_metrics());
  relay.put_worker(worker);
  engine.await_subscribers(1);
  publish_all(engine, workload, std::vector(batches.begin(), batches.begin() + 10));
  const auto before = settled_pool(relay, 9);
  relay.put_worker(revised);
  publish_all(engine, workload, std::vector(batches.begin() + 10, batches.end()));
  // Everything the engine cached, the first ten batches too, reaches the rebuilt pool.
  const auto state = await_state(relay, [&](const ingest_v1::RelayState& s) {
    return s.pools_size() > 0 && !engine_pool(s).publication_pending() &&
           engine_pool(s).filter_digest() == twin.filter_digest();
  });
  const auto& pool = engine_pool(state);
  // Two resets in the pool: the new generation's, then the new epoch the source starts over in.
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->resets() == 2);
  CHECK(pool.producer().pool_id().SerializeAsString() != before.producer().pool_id().SerializeAsString());
  CHECK(pool.unique_blocks() == twin.unique_blocks());
  const auto metrics = scrape(relay);
  CHECK(metrics.count("kv_relay_engine_source_resets_total", engine_source_labels("cause", "new_generation")) == 1);
}

TEST_CASE("engines: a gap is filled from the replay socket in order and nothing is reset", "[engines]") {
  FakeEngineProcess engine({"--replay"});
  EngineWorkload workload(11, {});
  const auto batches = workload.next(30);
  const auto twin = push_twin(engine_worker(1, {&engine}), workload, batches);
  TestRelay relay(with_metrics());
  relay.put_worker(engine_worker(1, {&engine}));
  engine.await_subscribers(1);
  publish_all(engine, workload, std::vector(batches.begin(), batches.begin() + 10));
  // Batches 10..19 are missed by the relay but held by the engine's replay buffer.
  Json missed = Json::array();
  for (std::size_t i = 10; i < 20; ++i) missed.push_back(workload.engine_events(batches[i]));
  engine.command({{"op", "skip"}, {"batches", missed}});
  const std::uint64_t last = publish_all(engine, workload, std::vector(batches.begin() + 20, batches.end()));
  REQUIRE(last == 29);
  const auto pool = settled_pool(relay, last);
  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->resets() == 0);
  CHECK(twin.filter_digest() == pool.filter_digest());
  // Every batch applied once (one that came both live and by replay also counts as skipped).
  const auto metrics = scrape_until(relay, [](const Scrape& now) { return batches_counted(now, "applied") >= 30; });
  CHECK(batches_counted(metrics, "applied") == 30);
  CHECK(metrics.count("kv_relay_engine_source_gaps_total", engine_source_labels()) == 1);
  CHECK(metrics.count("kv_relay_engine_source_replays_total", engine_source_labels()) == 1);
}

TEST_CASE("engines: every delta sent to a stream is timed from its events' receipt (engine batches carry one)",
          "[engines]") {
  FakeEngineProcess engine({});
  EngineWorkload workload(13, {});
  TestRelay relay(with_metrics());
  auto catalog = watch_catalog(relay);
  relay.put_worker(engine_worker(1, {&engine}));
  engine.await_subscribers(1);
  const auto producer = await_single_pool(*catalog);
  // Attached before any event: every delta of the pool reaches this stream.
  auto stream = subscribe_pool(relay, producer);
  Replica replica(producer);
  while (!replica.installed()) {
    const auto frame = stream->next();
    REQUIRE(frame.has_value());
    replica.apply(*frame);
  }
  const std::uint64_t last = publish_all(engine, workload, workload.next(20));
  const auto pool = settled_pool(relay, last);
  REQUIRE(pool.layout_generation() == producer.layout_generation());
  REQUIRE(pool.sequence() > 0);
  while (replica.sequence() < pool.sequence()) {
    const auto frame = stream->next();
    REQUIRE(frame.has_value());
    replica.apply(*frame);
  }
  const auto metrics = scrape_until(relay, [&](const Scrape& now) {
    return now.count("kv_relay_event_to_wire_seconds_count") >= static_cast<double>(pool.sequence());
  });
  CHECK(metrics.count("kv_relay_event_to_wire_seconds_count") == static_cast<double>(pool.sequence()));
}

TEST_CASE("engines: an unrecoverable gap or an evicted replay or an engine restart cold-resets the source",
          "[engines]") {
  const bool with_replay = GENERATE(false, true);
  std::vector<std::string> args;
  if (with_replay) args.push_back("--replay");
  FakeEngineProcess engine(args);
  TestRelay relay(with_metrics());
  relay.put_worker(engine_worker(1, {&engine}));
  engine.await_subscribers(1);
  const Json first = Json::array(
      {{{"kind", "stored"}, {"hashes", {1, 2}}, {"token_ids", {1, 2, 3, 4, 5, 6, 7, 8}}, {"block_size", 4}}});
  engine.batch(first);
  // A second batch, so that an engine restart's seq 0 is below the last one the relay saw.
  const Json second =
      Json::array({{{"kind", "stored"}, {"hashes", {3}}, {"token_ids", {10, 11, 12, 13}}, {"block_size", 4}}});
  std::uint64_t seq = engine.batch(second);
  REQUIRE(seq == 1);
  CHECK(settled_pool(relay, seq).unique_blocks() == 3);

  std::string cause;  // what the reset is counted as
  SECTION("gap") {
    engine.command({{"op", "drop"}, {"count", 2}});  // neither sent nor replayable
    if (with_replay) engine.command({{"op", "evict"}});
    cause = with_replay ? "replay_evicted" : "sequence_gap";
  }
  SECTION("restart") {
    engine.command({{"op", "restart"}});
    cause = "engine_restart";
  }

  const Json after =
      Json::array({{{"kind", "stored"}, {"hashes", {9}}, {"token_ids", {9, 9, 9, 9}}, {"block_size", 4}}});
  seq = engine.batch(after);
  const auto pool = settled_pool(relay, seq);
  CHECK(pool.unique_blocks() == 1);  // blocks 1, 2 and 3 left with the reset
  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->resets() == 1);
  const Scrape metrics = scrape(relay);
  INFO("cause " << cause);
  for (const std::string counted : {"sequence_gap", "engine_restart", "replay_evicted", "replay_gap", "replay_timeout",
                                    "replay_overflow", "disconnected"}) {
    INFO("counted " << counted);
    CHECK(metrics.count("kv_relay_engine_source_resets_total", engine_source_labels("cause", counted)) ==
          (counted == cause ? 1 : 0));
  }
}

TEST_CASE("engines: an engine restart first seen past seq 0 is replayed from seq 0", "[engines]") {
  FakeEngineProcess engine({"--replay"});
  TestRelay relay(with_metrics());
  relay.put_worker(engine_worker(1, {&engine}));
  engine.await_subscribers(1);
  std::uint64_t seq = 0;
  for (int hash = 1; hash <= 5; ++hash) seq = engine.batch(one_block(hash));
  REQUIRE(settled_pool(relay, seq).unique_blocks() == 5);
  // The new process's seqs 0 and 1 never reach the relay live; its seq 2 is the first it sees.
  engine.command({{"op", "restart"}});
  engine.command({{"op", "skip"}, {"batches", Json::array({one_block(11), one_block(12)})}});
  seq = engine.batch(one_block(13));
  REQUIRE(seq == 2);
  const auto pool = settled_pool(relay, seq);
  CHECK(pool.unique_blocks() == 3);  // 11, 12 and 13; the old process's blocks left with the reset
  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->resets() == 1);
  // The restarted process's seq 0 and 1 were asked of the replay socket: no gap in its seqs.
  const auto metrics = scrape(relay);
  CHECK(metrics.count("kv_relay_engine_source_replays_total", engine_source_labels()) == 1);
  CHECK(metrics.count("kv_relay_engine_source_gaps_total", engine_source_labels()) == 0);
  CHECK(metrics.count("kv_relay_engine_source_resets_total", engine_source_labels("cause", "engine_restart")) == 1);
}

TEST_CASE("engines: malformed frames and payloads are dropped and the source keeps going", "[engines]") {
  FakeEngineProcess engine({});
  TestRelay relay(with_metrics());
  relay.put_worker(engine_worker(1, {&engine}));
  engine.await_subscribers(1);
  // Frames that are not [topic, 8-byte seq, payload] never reach the sequencing.
  engine.command({{"op", "raw"}, {"frames", {"", "0000000000000000"}}});
  engine.command({{"op", "raw"}, {"frames", {"", "0001", "90"}}});
  // Payloads that are no batch take their seq (the engine then skips it) and nothing else.
  engine.command({{"op", "raw"}, {"frames", {"", "0000000000000000", "c1c1c1"}}});
  engine.command({{"op", "drop"}, {"count", 1}});
  engine.command({{"op", "raw"}, {"frames", {"", "0000000000000001", "93cb00000000000000009100c0"}}});  // event 0
  engine.command({{"op", "drop"}, {"count", 1}});
  const Json good =
      Json::array({{{"kind", "stored"}, {"hashes", {5}}, {"token_ids", {1, 2, 3, 4}}, {"block_size", 4}},
                   {{"kind", "stored"}, {"hashes", {6}}, {"token_ids", {1, 2, 3, 4, 5, 6, 7, 8}}, {"block_size", 8}}});
  const std::uint64_t seq = engine.batch(good);
  REQUIRE(seq == 2);
  CHECK(settled_pool(relay, seq).unique_blocks() == 1);  // the 8-token block has the wrong block_size
  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->resets() == 0);
  // Each message counted as what it was: the payload that is no batch took its seq (no gap),
  // and the batch whose only event is no event was applied, its event rejected. A batch is
  // counted applied when the publisher's answer reaches its source, after the pool shows it.
  const auto metrics = scrape_until(relay, [](const Scrape& now) { return batches_counted(now, "applied") >= 2; });
  CHECK(batches_counted(metrics, "malformed_frames") == 2);
  CHECK(batches_counted(metrics, "malformed_payload") == 1);
  CHECK(batches_counted(metrics, "applied") == 2);
  CHECK(metrics.count("kv_relay_engine_source_gaps_total", engine_source_labels()) == 0);
}

TEST_CASE("engines: a cold reset reaches the pool even when no batch of its step decodes", "[engines]") {
  FakeEngineProcess engine({});
  TestRelay relay(with_metrics());
  relay.put_worker(engine_worker(1, {&engine}));
  engine.await_subscribers(1);
  const Json block =
      Json::array({{{"kind", "stored"}, {"hashes", {5}}, {"token_ids", {1, 2, 3, 4}}, {"block_size", 4}}});
  REQUIRE(settled_pool(relay, engine.batch(block)).unique_blocks() == 1);
  // Seqs 1 and 2 are lost, and the batch after the gap is no batch: the source is reset all
  // the same, and its block leaves the pool now, not with some later batch.
  engine.command({{"op", "drop"}, {"count", 2}});
  engine.command({{"op", "raw"}, {"frames", {"", "0000000000000003", "c1"}}});
  const auto state = await_state(relay, [](const ingest_v1::RelayState& state) {
    const auto* source = find_source(state, 1, 0);
    return source != nullptr && source->resets() == 1 && engine_pool(state).unique_blocks() == 0;
  });
  CHECK(engine_pool(state).active_sources() == 1);
  // The empty batch that carried the reset is not one the engine sent: the engine's batches
  // are the one applied, the one after the gap that did not decode, and the next one.
  engine.command({{"op", "drop"}, {"count", 1}});  // the raw batch took seq 3: the engine skips it
  const std::uint64_t seq = engine.batch(one_block(7));
  REQUIRE(seq == 4);
  REQUIRE(settled_pool(relay, seq).unique_blocks() == 1);
  const auto metrics = scrape_until(relay, [](const Scrape& now) { return batches_counted(now, "applied") >= 2; });
  CHECK(batches_counted(metrics, "applied") == 2);
  CHECK(batches_counted(metrics, "malformed_payload") == 1);
  CHECK(metrics.count("kv_relay_engine_source_gaps_total", engine_source_labels()) == 1);
}

TEST_CASE("engines: a frame above --max-engine-message-bytes ends the connection, which is dialed again", "[engines]") {
  // A lost connection may hide an engine restart, so the source's blocks go with it and it
  // starts over as a fresh source: with a replay socket, from a replay of seq 0.
  const bool with_replay = GENERATE(false, true);
  INFO((with_replay ? "with" : "without") << " a replay socket");
  std::vector<std::string> args{"--dp-rank", "0"};
  if (with_replay) args.push_back("--replay");
  // Rank 1's engine keeps the pool materialized while rank 0's connection is down, so rank 0's
  // source comes back to the pool it left (a pool withdrawn and materialized again would reset it).
  FakeEngineProcess rank0(args);
  FakeEngineProcess rank1({"--dp-rank", "1"});
  auto options = loopback_options();
  options.max_engine_message_bytes = 4096;
  TestRelay relay(options);
  relay.put_worker(engine_worker(1, {&rank0, &rank1}));
  rank0.await_subscriptions_made(1);
  rank1.await_subscriptions_made(1);
  await_engine_seq(relay, 1, 1, rank1.batch(one_block(7)));
  REQUIRE(settled_pool(relay, rank0.batch(one_block(5))).unique_blocks() == 2);

  // A well-formed [topic, seq, payload] message whose payload passes the bound. It takes no seq
  // of the engine's, so the batch after it follows on.
  rank0.command({{"op", "raw"}, {"frames", {"", "0000000000000001", std::string(2 * 8192, 'c')}}});
  rank0.await_subscriptions_made(2);  // the relay subscribed again, on a new connection
  const std::uint64_t seq = rank0.batch(one_block(6));
  REQUIRE(seq == 1);
  // Without replay rank 0's block 5 is gone with its connection; with it, seq 0 comes back.
  CHECK(settled_pool(relay, seq).unique_blocks() == (with_replay ? 3 : 2));
  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK(source->connected());
  CHECK(source->resets() == 1);
}

TEST_CASE("engines: each dp rank has its own engine and a batch for another rank is dropped", "[engines]") {
  FakeEngineProcess rank0({"--dp-rank", "0"});
  FakeEngineProcess rank1({"--dp-rank", "1"});
  TestRelay relay;
  relay.put_worker(engine_worker(1, {&rank0, &rank1}));
  rank0.await_subscribers(1);
  rank1.await_subscribers(1);
  const Json block =
      Json::array({{{"kind", "stored"}, {"hashes", {5}}, {"token_ids", {1, 2, 3, 4}}, {"block_size", 4}}});
  const Json other =
      Json::array({{{"kind", "stored"}, {"hashes", {6}}, {"token_ids", {4, 3, 2, 1}}, {"block_size", 4}}});
  const Json stray =
      Json::array({{{"kind", "stored"}, {"hashes", {7}}, {"token_ids", {7, 7, 7, 7}}, {"block_size", 4}}});
  rank0.batch(block);
  const std::uint64_t seq0 = rank0.batch(stray, 1);  // labelled for rank 1: not rank 0's
  const std::uint64_t seq1 = rank1.batch(other);
  await_engine_seq(relay, 1, 0, seq0);
  const auto pool = settled_pool(relay, seq1, 1);
  CHECK(pool.unique_blocks() == 2);  // rank 0's block, rank 1's block; not the stray one
  const auto state = relay.get_state();
  CHECK(engine_pool(state).active_sources() == 2);
}

TEST_CASE("engines: a pool exists while an engine is connected and is withdrawn when it goes", "[engines]") {
  auto engine = std::make_unique<FakeEngineProcess>(std::vector<std::string>{});
  TestRelay relay;
  auto catalog = watch_catalog(relay);
  await_catalog(*catalog, 0);
  relay.put_worker(engine_worker(1, {engine.get()}));
  const auto producer = await_single_pool(*catalog);
  CHECK(producer.layout_generation() >= 1);
  engine->kill_now();
  await_catalog(*catalog, 0);
  const auto state = relay.get_state();
  const auto* source = find_source(state, 1, 0);
  REQUIRE(source != nullptr);
  CHECK_FALSE(source->connected());
}

TEST_CASE("engines: a rank declared again with another engine address drops the old engine's blocks at once",
          "[engines]") {
  FakeEngineProcess rank0({"--dp-rank", "0"});
  FakeEngineProcess rank1({"--dp-rank", "1"});  // keeps the pool whatever rank 0 does
  FakeEngineProcess moved({"--dp-rank", "0"});  // where rank 0 is read from next: it sends nothing
  TestRelay relay(with_metrics());
  relay.put_worker(engine_worker(1, {&rank0, &rank1}));
  rank0.await_subscribers(1);
  rank1.await_subscribers(1);
  const std::uint64_t seq0 = rank0.batch(one_block(5));
  const std::uint64_t seq1 = rank1.batch(one_block(6));
  await_engine_seq(relay, 1, 0, seq0);
  REQUIRE(settled_pool(relay, seq1, 1).unique_blocks() == 2);

  relay.put_worker(engine_worker(1, {&moved, &rank1}));
  await_state(relay, [](const ingest_v1::RelayState& s) { return engine_pool(s).unique_blocks() == 1; });
  moved.await_subscribers(1);  // rank 0 is read from the new address
  CHECK(scrape(relay).count("kv_relay_source_resets_total", {{"reason", "source_redeclared"}}) == 1);
  // Declared again as it is now: nothing more is dropped.
  relay.put_worker(engine_worker(1, {&moved, &rank1}));
  const std::uint64_t seq1_again = rank1.batch(one_block(7));
  CHECK(settled_pool(relay, seq1_again, 1).unique_blocks() == 2);
  CHECK(scrape(relay).count("kv_relay_source_resets_total", {{"reason", "source_redeclared"}}) == 1);
}
