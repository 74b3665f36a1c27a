// The consumer library against a scripted relay: hand-crafted faults the real relay never
// sends, and the reaction the contract asks for each one.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>
#include <sstream>

#include "core/ckf.hpp"
#include "core/token_hashing.hpp"
#include "kvrelay/client/consumer.hpp"
#include "tests/app/process.hpp"
#include "tests/client/fake_relay.hpp"

using namespace kvrelay;
using namespace kvrelay::test;
using client::RelayView;
using client::ReplicaStatus;

namespace {

constexpr auto kAwaitFake = std::chrono::seconds(30);

std::vector<std::uint32_t> prompt() {
  std::vector<std::uint32_t> tokens(40);
  for (std::uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 7 * i + 3;
  return tokens;
}

// A filter holding the first `depth` blocks (block size 4, no salt) of prompt().
std::vector<std::uint64_t> filter_words(std::size_t depth) {
  hashing::BlockHashOptions options;
  options.kv_block_size = 4;
  const auto hashes = hashing::sequence_hashes(hashing::block_hashes(prompt(), options));
  ckf::Filter filter(kBuckets, kSeed);
  std::vector<ckf::BucketWrite> writes;
  for (std::size_t i = 0; i < depth; ++i) REQUIRE(filter.insert(hashes[i], writes) == ckf::InsertOutcome::kInserted);
  return {filter.words().begin(), filter.words().end()};
}

StreamScript<v1::FilterUpdate> snapshot_script(const v1::ProducerIdentity& identity, std::size_t depth = 3,
                                               std::uint64_t incarnation = 7) {
  StreamScript<v1::FilterUpdate> script;
  for (auto& chunk : snapshot_frames(identity, 5, filter_words(depth))) {
    *chunk.mutable_relay() = relay_identity(incarnation);
    script.push_back(std::move(chunk));
  }
  return script;
}

// Every pool stream answers with a snapshot and stays open.
void serve_snapshots(FakeRelay& relay) {
  relay.set_pool_script([](const auto& request, int) { return snapshot_script(request.expected_producer()); });
}

client::ConsumerOptions options_for(const FakeRelay& relay) {
  client::ConsumerOptions options;
  options.targets = {relay.address()};
  options.backoff_initial = std::chrono::milliseconds(5);
  options.backoff_max = std::chrono::milliseconds(50);
  return options;
}

client::ConsumerOptions with_backoff_max(client::ConsumerOptions options, std::chrono::milliseconds max) {
  options.backoff_max = max;
  return options;
}

class Scenario {
 public:
  // `backoff_max` apart from the tests' 50 ms where a test measures the waits themselves.
  explicit Scenario(std::chrono::milliseconds backoff_max = std::chrono::milliseconds(50))
      : consumer_(with_backoff_max(options_for(relay_), backoff_max)) {}
  FakeRelay& relay() { return relay_; }
  client::Consumer& consumer() { return consumer_; }
  void start() { consumer_.start(); }
  void serve_snapshots() { ::serve_snapshots(relay_); }
  RelayView view() const { return consumer_.view().relays.at(0); }
  void await(const std::function<bool(const RelayView&)>& done) {
    REQUIRE(consumer_.await([&](const client::ConsumerView& view) { return done(view.relays.at(0)); }, kAwaitFake));
  }
  void await_pool(ReplicaStatus status, std::uint64_t generation = 1) {
    await([&](const RelayView& relay) {
      return relay.pools.size() == 1 && relay.pools[0].status == status &&
             relay.pools[0].descriptor.producer().layout_generation() == generation;
    });
  }

 private:
  FakeRelay relay_;
  client::Consumer consumer_;
};

}  // namespace

TEST_CASE("fake relay: unsupported entries are quarantined while the rest serves queries", "[client][fake]") {
  auto unsupported = descriptor(2, "qwen");
  for (const auto& breaker : pool_breakers()) {
    SECTION(breaker.name) { breaker.apply(unsupported); }
  }
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1, "llama", {"chat"}), unsupported}));
  auto unknown_state = topology_entry("qwen", v1::SERVING_READINESS_STATE_READY, 2);
  unknown_state.set_state(static_cast<v1::ServingReadinessState>(5));
  scenario.relay().push_readiness(
      readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY), unknown_state}));
  scenario.relay().push_load(load_window(1, {1, 2}));
  scenario.serve_snapshots();
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.readiness.valid && relay.load.valid && relay.pools.size() == 1 &&
           relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  const auto view = scenario.view();
  CHECK(view.quarantined_pools.size() == 1);
  CHECK(view.quarantined_entries.size() == 1);
  CHECK(scenario.relay().pool_requests() == 1);  // never for the quarantined pool

  const auto matches = scenario.consumer().overlap("chat", prompt());
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].depth == 3u);
  CHECK(matches[0].prompt_blocks == 10);
  CHECK(matches[0].readiness == v1::SERVING_READINESS_STATE_READY);
  REQUIRE(matches[0].load);
  CHECK(matches[0].load->used_blocks == 10);
  CHECK(scenario.consumer().overlap("qwen", prompt()).empty());

  // The same pool turning unsupported drops its replica and load with it: no fallback.
  auto now_unsupported = descriptor(1, "llama", {"chat"});
  pool_breaker("unknown pool role").apply(now_unsupported);
  scenario.relay().push_catalog(catalog(2, {now_unsupported}));
  scenario.await([](const RelayView& relay) { return relay.catalog_revision == 2 && relay.pools.empty(); });
  CHECK(scenario.consumer().overlap("chat", prompt()).empty());
}

TEST_CASE("fake relay: a faulty frame invalidates only that replica, which resubscribes from a snapshot",
          "[client][fake]") {
  Scenario scenario;
  const auto identity = producer(1);
  v1::FilterUpdate bad = delta_frame(identity, 5, {{1, 0x10001}});
  std::string expected_fault;
  SECTION("corrupt checksum") {
    bad.mutable_payload()->back() ^= 1;
    expected_fault = "Cbi1:Checksum";
  }
  SECTION("sequence gap") {
    bad = delta_frame(identity, 6, {{1, 0x10001}});
    expected_fault = "SequenceGap";
  }
  SECTION("wrong dc_id in the CBI1 header") {
    bad = delta_frame(identity, 5, {{1, 0x10001}}, 0x99);
    expected_fault = "DcIdMismatch";
  }
  SECTION("unknown filter frame kind") {
    bad.set_kind(static_cast<v1::FilterUpdateKind>(9));
    expected_fault = "FilterUpdateKind";
  }
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.relay().push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}));
  scenario.relay().set_pool_script([=](const auto& request, int attempt) {
    auto script = snapshot_script(request.expected_producer());
    script.push_back(attempt == 0 ? bad : delta_frame(identity, 5, {{1, 0x10001}}));
    return script;
  });
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.readiness.valid && relay.pools.size() == 1 && relay.pools[0].sequence == 6;
  });
  const auto view = scenario.view();
  CHECK(view.pools[0].subscriptions == 2);
  CHECK_THAT(view.pools[0].last_fault, Catch::Contains(expected_fault));
  CHECK(view.catalog.opens == 1);  // the other planes never noticed
  CHECK(view.readiness.opens == 1);
}

TEST_CASE("fake relay: a replica that faults soon after its snapshot every time reopens ever more slowly",
          "[client][fake][backoff]") {
  // Before the scenario, so that they outlive its relay's threads, which run the script.
  const auto identity = producer(1);
  std::mutex opened_mutex;
  std::vector<std::chrono::steady_clock::time_point> opened;
  // Backoff from 5 ms, with a ceiling no stream's life can reach: a stream usable for as long
  // as the ceiling resets the count, and a stream held up by this busy host must not.
  Scenario scenario(std::chrono::seconds(10));
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.relay().set_pool_script([&](const auto& request, int) {
    {
      std::lock_guard lock(opened_mutex);
      opened.push_back(std::chrono::steady_clock::now());
    }
    // The snapshot applies, then a corrupt delta faults the replica.
    auto script = snapshot_script(request.expected_producer());
    auto corrupt = delta_frame(identity, 5, {{1, 0x10001}});
    corrupt.mutable_payload()->back() ^= 1;
    script.push_back(std::move(corrupt));
    return script;
  });
  scenario.start();
  // The 7th subscription begins once the 6th stream ended: six requests reached the relay.
  scenario.await([](const RelayView& relay) { return relay.pools.size() == 1 && relay.pools[0].subscriptions >= 7; });
  std::lock_guard lock(opened_mutex);
  REQUIRE(opened.size() >= 6);
  // The fifth consecutive failure waits at least half of 5 ms * 2^4: the snapshot each stream
  // installed did not reset the count (it used to, and every wait was at most 5 ms).
  CHECK(opened[5] - opened[4] >= std::chrono::milliseconds(40));
  CHECK_THAT(scenario.view().pools[0].last_fault, Catch::Contains("Cbi1:Checksum"));
}

TEST_CASE("fake relay: PRODUCER_CHANGED and INVALID_PUBLICATION wait for a new generation in the catalog",
          "[client][fake]") {
  const std::string reason = GENERATE("RELAY_ERROR_REASON_PRODUCER_CHANGED", "RELAY_ERROR_REASON_INVALID_PUBLICATION");
  INFO(reason);
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.relay().set_pool_script([reason](const auto& request, int) -> StreamScript<v1::FilterUpdate> {
    if (request.expected_producer().layout_generation() == 1) {
      return {StreamEndScript{grpc::StatusCode::FAILED_PRECONDITION, reason}};
    }
    return snapshot_script(request.expected_producer());
  });
  scenario.start();
  scenario.await_pool(ReplicaStatus::kWaiting);
  scenario.relay().push_catalog(catalog(2, {descriptor(1)}));  // same generation: still waiting
  scenario.await([](const RelayView& relay) { return relay.catalog_revision == 2; });
  CHECK(scenario.view().pools[0].status == ReplicaStatus::kWaiting);
  auto next = descriptor(1);
  *next.mutable_producer() = producer(1, 2);
  scenario.relay().push_catalog(catalog(3, {next}));
  scenario.await_pool(ReplicaStatus::kInstalled, 2);
  CHECK(scenario.relay().pool_requests() == 2);  // the stale generation was never retried
}

TEST_CASE("fake relay: a pool stream that ends cleanly is reopened from a fresh snapshot", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.relay().set_pool_script([](const auto& request, int attempt) {
    auto script = snapshot_script(request.expected_producer());
    if (attempt == 0) script.push_back(StreamEndScript{grpc::StatusCode::OK, ""});
    return script;
  });
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.pools.size() == 1 && relay.pools[0].subscriptions == 2 &&
           relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  CHECK(scenario.relay().pool_requests() == 2);
}

TEST_CASE("fake relay: POOL_NOT_FOUND waits for a newer catalog, UNSUPPORTED_FEATURE quarantines", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  std::string first_end;
  grpc::StatusCode code{};
  SECTION("not found") {
    first_end = "RELAY_ERROR_REASON_POOL_NOT_FOUND";
    code = grpc::StatusCode::NOT_FOUND;
  }
  SECTION("unsupported") {
    first_end = "RELAY_ERROR_REASON_UNSUPPORTED_FEATURE";
    code = grpc::StatusCode::FAILED_PRECONDITION;
  }
  scenario.relay().set_pool_script([=](const auto& request, int attempt) -> StreamScript<v1::FilterUpdate> {
    if (attempt == 0) return {StreamEndScript{code, first_end}};
    return snapshot_script(request.expected_producer());
  });
  scenario.relay().push_load(load_window(1, {1}));
  scenario.relay().push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}));
  scenario.start();
  const bool unsupported = code == grpc::StatusCode::FAILED_PRECONDITION;
  scenario.await_pool(unsupported ? ReplicaStatus::kQuarantined : ReplicaStatus::kWaiting);
  scenario.relay().push_catalog(catalog(2, {descriptor(1)}));
  if (unsupported) {
    scenario.await([](const RelayView& relay) { return relay.catalog_revision == 2; });
    CHECK(scenario.view().pools[0].status == ReplicaStatus::kQuarantined);
    CHECK(scenario.relay().pool_requests() == 1);
    CHECK(scenario.consumer().overlap("llama", prompt()).empty());  // a quarantined pool's names stop resolving
    scenario.await([](const RelayView& relay) { return relay.load.valid && relay.readiness.valid; });
    CHECK_FALSE(scenario.view().pools[0].load.has_value());                          // its load goes with it
    CHECK(scenario.view().pools[0].readiness == v1::SERVING_READINESS_STATE_READY);  // its model's stays
  } else {
    scenario.await_pool(ReplicaStatus::kInstalled);
    CHECK(scenario.relay().pool_requests() == 2);
    scenario.await([](const RelayView& relay) { return relay.load.valid; });
    CHECK(scenario.view().pools[0].load.has_value());
  }
}

TEST_CASE("fake relay: a lag ends only that stream, the replica resubscribes and installs again", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.relay().push_load(load_window(1, {1}));
  scenario.relay().set_pool_script([](const auto& request, int attempt) {
    auto script = snapshot_script(request.expected_producer(), attempt == 0 ? 2 : 4);
    if (attempt == 0)
      script.push_back(StreamEndScript{grpc::StatusCode::RESOURCE_EXHAUSTED, "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED"});
    return script;
  });
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.load.valid && relay.pools.size() == 1 && relay.pools[0].subscriptions == 2 &&
           relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  const auto matches = scenario.consumer().overlap("llama", prompt());
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].depth == 4u);
  CHECK(scenario.view().load.opens == 1);
}

TEST_CASE("fake relay: a contract mismatch stops every stream of that relay", "[client][fake]") {
  Scenario scenario;
  scenario.relay().set_info_marker(0x4B565232);  // "KVR2"
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.start();
  scenario.await([](const RelayView& relay) { return relay.incompatible; });
  const auto view = scenario.view();
  CHECK_THAT(view.incompatibility, Catch::Contains("ContractMarker"));
  CHECK_FALSE(view.catalog.valid);
  CHECK(scenario.relay().pool_requests() == 0);
}

TEST_CASE("fake relay: a relay that refuses GetRelayInfo with CONTRACT_MISMATCH is incompatible", "[client][fake]") {
  Scenario scenario;
  scenario.relay().set_info_refusal(
      StreamEndScript{grpc::StatusCode::FAILED_PRECONDITION, "RELAY_ERROR_REASON_CONTRACT_MISMATCH"});
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.start();
  scenario.await([](const RelayView& relay) { return relay.incompatible; });
  const auto view = scenario.view();
  CHECK_THAT(view.incompatibility, Catch::Contains("GetRelayInfo: status 9") && Catch::Contains("CONTRACT_MISMATCH"));
  CHECK(view.catalog.opens == 0);
  CHECK(scenario.relay().pool_requests() == 0);
}

TEST_CASE("fake relay: a GetRelayInfo answer without the relay's identity is asked again, not a mismatch",
          "[client][fake]") {
  Scenario scenario;
  scenario.relay().set_info_identity(false);
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.start();
  scenario.await([](const RelayView& relay) { return relay.catalog.last_error.find("GetRelayInfo") == 0; });
  CHECK_FALSE(scenario.view().incompatible);
  CHECK(scenario.view().catalog.opens == 0);
  scenario.relay().set_info_identity(true);  // the next check, after the backoff, passes
  scenario.await([](const RelayView& relay) { return relay.catalog.valid; });
  CHECK_FALSE(scenario.view().incompatible);
}

TEST_CASE("fake relay: a streamed message of another contract or protocol version is a contract mismatch",
          "[client][fake]") {
  Scenario scenario;
  std::string expected;
  SECTION("a catalog update of protocol version 2") {
    auto update = catalog(1, {descriptor(1)});
    update.set_protocol_version(2);
    scenario.relay().push_catalog(update);
    expected = "ProtocolVersion";
  }
  SECTION("a pool frame with another marker") {
    scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
    scenario.relay().set_pool_script([](const auto& request, int) {
      auto script = snapshot_script(request.expected_producer());
      std::get<v1::FilterUpdate>(script.front()).set_contract_marker(0x12345678);
      return script;
    });
    expected = "ContractMarker";
  }
  scenario.start();
  scenario.await([](const RelayView& relay) { return relay.incompatible; });
  const auto view = scenario.view();
  CHECK_THAT(view.incompatibility, Catch::Contains(expected));
  CHECK_FALSE(view.catalog.valid);
  CHECK(view.pools.empty());
  CHECK(scenario.relay().pool_requests() <= 1);  // no stream of this relay is opened again
  CHECK(view.catalog.opens == 1);
}

TEST_CASE("fake relay: invalid catalogs and clean ends invalidate the plane, which reopens", "[client][fake]") {
  Scenario scenario;
  SECTION("duplicate pool keys") { scenario.relay().push_catalog(catalog(1, {descriptor(1), descriptor(1, "other")})); }
  SECTION("a clean end of stream") {
    scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
    scenario.relay().push_catalog(StreamEndScript{});
  }
  scenario.relay().push_catalog(catalog(9, {descriptor(2, "qwen")}), 2);  // for the reopened stream
  scenario.serve_snapshots();
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.catalog.valid && relay.catalog_revision == 9 && relay.pools.size() == 1 &&
           relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  CHECK(scenario.view().catalog.opens == 2);
  CHECK(scenario.consumer().overlap("llama", prompt()).empty());
  CHECK(scenario.consumer().overlap("qwen", prompt()).size() == 1);
}

namespace {

// The revision rules the catalog and readiness planes share (docs/protocol/decisions.md#d23),
// scripted for either: `content` 0 and 1 are two different snapshots of the plane.
struct RevisionedPlane {
  std::function<void(FakeRelay&, std::uint64_t revision, int content, int for_stream)> push;
  std::function<client::PlaneView(const RelayView&)> plane;
  std::function<std::uint64_t(const RelayView&)> revision;
  std::function<int(const RelayView&)> content;  // which snapshot the view holds; -1 for none
};

RevisionedPlane catalog_plane() {
  return {[](FakeRelay& relay, std::uint64_t revision, int content, int for_stream) {
            relay.push_catalog(catalog(revision, {descriptor(1, content == 0 ? "llama" : "qwen")}), for_stream);
          },
          [](const RelayView& relay) { return relay.catalog; },
          [](const RelayView& relay) { return relay.catalog_revision; },
          [](const RelayView& relay) {
            if (relay.pools.size() != 1) return -1;
            return relay.pools[0].descriptor.registrations(0).canonical_model_id() == "llama" ? 0 : 1;
          }};
}

RevisionedPlane readiness_plane() {
  return {[](FakeRelay& relay, std::uint64_t revision, int content, int for_stream) {
            const auto state =
                content == 0 ? v1::SERVING_READINESS_STATE_READY : v1::SERVING_READINESS_STATE_UNAVAILABLE;
            relay.push_readiness(readiness(revision, {topology_entry("llama", state)}), for_stream);
          },
          [](const RelayView& relay) { return relay.readiness; },
          [](const RelayView& relay) { return relay.readiness_revision; },
          [](const RelayView& relay) {
            if (relay.readiness_entries.size() != 1) return -1;
            return relay.readiness_entries[0].state() == v1::SERVING_READINESS_STATE_READY ? 0 : 1;
          }};
}

}  // namespace

TEST_CASE("fake relay: heartbeats repeat the revision with the same content, a changed plane must advance it",
          "[client][fake]") {
  const std::string name = GENERATE(std::string("catalog"), std::string("readiness"));
  CAPTURE(name);
  const RevisionedPlane plane = name == "catalog" ? catalog_plane() : readiness_plane();
  Scenario scenario;
  auto& relay = scenario.relay();

  SECTION("same revision, same content: a heartbeat, applied without reopening") {
    plane.push(relay, 1, 0, 1);
    plane.push(relay, 1, 0, 1);
    plane.push(relay, 2, 1, 1);
    scenario.start();
    // Also ends on a fault, so that a rejected heartbeat fails the checks below instead of timing out.
    scenario.await(
        [&](const RelayView& view) { return plane.revision(view) == 2 || !plane.plane(view).last_error.empty(); });
    const auto view = scenario.view();
    CHECK(plane.plane(view).last_error.empty());
    CHECK(plane.plane(view).opens == 1);
    CHECK(plane.plane(view).valid);
    CHECK(plane.content(view) == 1);
  }
  SECTION("same revision, different content: the plane is invalidated and its stream reopened") {
    plane.push(relay, 1, 0, 1);
    plane.push(relay, 1, 1, 1);
    plane.push(relay, 1, 1, 2);  // the reopened stream's first snapshot is taken as is
    scenario.start();
    scenario.await([&](const RelayView& view) { return plane.plane(view).opens == 2 && plane.plane(view).valid; });
    const auto view = scenario.view();
    CHECK_THAT(plane.plane(view).last_error,
               Catch::Contains("RevisionNotAdvanced") && Catch::Contains("changed without advancing its revision 1"));
    CHECK_FALSE(view.incompatible);  // a fault of this plane, not of the relay's contract
    CHECK(plane.content(view) == 1);
  }
}

TEST_CASE("fake relay: a new relay incarnation drops everything learned from the old one", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}, 7));
  scenario.relay().push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}));
  scenario.relay().set_pool_script([](const auto& request, int attempt) {
    return snapshot_script(request.expected_producer(), 3, attempt == 0 ? 7 : 8);
  });
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.readiness.valid && relay.pools.size() == 1 && relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  scenario.relay().set_info_incarnation(8);                       // the restarted relay answers GetRelayInfo as itself
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}, 8));  // revision restarts with the incarnation
  scenario.await([](const RelayView& relay) {
    return relay.identity && relay.identity->relay_incarnation() == 8 && relay.pools.size() == 1 &&
           relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  const auto view = scenario.view();
  CHECK(view.identity_changes == 1);
  CHECK_FALSE(view.readiness.valid);  // the old incarnation's readiness is gone until the relay sends it again
  CHECK(scenario.relay().pool_requests() == 2);
}

TEST_CASE("fake relay: a pool thread held in its tap does not hold up the catalog that retired its pool",
          "[client][fake]") {
  FakeRelay relay;
  std::mutex gate_mutex;
  std::condition_variable gate_changed;
  bool in_tap = false;
  bool gate_open = false;
  auto options = options_for(relay);
  options.frame_tap = [&](const v1::FilterUpdate&) {
    std::unique_lock lock(gate_mutex);
    in_tap = true;
    gate_changed.notify_all();
    gate_changed.wait(lock, [&] { return gate_open; });
  };
  relay.push_catalog(catalog(1, {descriptor(1)}));
  serve_snapshots(relay);
  client::Consumer consumer(options);
  consumer.start();
  {
    std::unique_lock lock(gate_mutex);
    REQUIRE(gate_changed.wait_for(lock, kAwaitFake, [&] { return in_tap; }));
  }
  // The pool leaves while its thread waits in the tap; then the catalog moves on again.
  relay.push_catalog(catalog(2, {}));
  relay.push_catalog(catalog(3, {}));
  const bool caught_up = consumer.await(
      [](const client::ConsumerView& view) { return view.relays.at(0).catalog_revision == 3; }, kAwaitFake);
  {
    std::lock_guard lock(gate_mutex);
    gate_open = true;
  }
  gate_changed.notify_all();
  CHECK(caught_up);
}

TEST_CASE("fake relay: each plane and replica tells when it last applied a message", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.relay().push_load(load_window(1, {1}));
  scenario.serve_snapshots();
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.load.valid && relay.pools.size() == 1 && relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  const auto before = scenario.view();
  REQUIRE(before.catalog.last_message);
  REQUIRE(before.load.last_message);
  REQUIRE(before.pools[0].last_frame);
  CHECK_FALSE(before.readiness.last_message);  // nothing received on that plane yet
  const auto asked = std::chrono::steady_clock::now();
  scenario.relay().push_load(load_window(2, {1}));
  scenario.await([](const RelayView& relay) { return relay.load_window == 2; });
  const auto after = scenario.view();
  REQUIRE(after.load.last_message);
  CHECK(*after.load.last_message >= asked);  // stamped when the new window arrived
  CHECK(after.catalog.last_message == before.catalog.last_message);
}

TEST_CASE("fake relay: a consumer starts once and stops once, however often it is asked", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  scenario.serve_snapshots();
  REQUIRE(scenario.consumer().start());
  CHECK_FALSE(scenario.consumer().start());
  scenario.await_pool(ReplicaStatus::kInstalled);
  CHECK(scenario.view().catalog.opens == 1);   // one catalog stream: the second start did nothing
  scenario.await([](const RelayView& relay) {  // every plane has checked the relay and opened its stream
    return relay.readiness.opens == 1 && relay.load.opens == 1 && relay.serving_load.opens == 1;
  });
  scenario.consumer().stop();
  CHECK(scenario.relay().info_calls() == 4);  // one check per plane: one thread each
  scenario.consumer().stop();
  CHECK_FALSE(scenario.consumer().start());  // after stop: nothing opens again
  const auto view = scenario.view();
  CHECK_FALSE(view.catalog.valid);
  CHECK(view.catalog.opens == 1);
  CHECK(scenario.relay().pool_requests() == 1);
  CHECK(scenario.relay().info_calls() == 4);
}

TEST_CASE("fake relay: a new incarnation that GetRelayInfo names after an ambiguous refusal voids the old one's state",
          "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}, 7));
  scenario.relay().push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}), 1);
  scenario.relay().set_pool_script(
      [](const auto& request, int) { return snapshot_script(request.expected_producer(), 3, 7); });
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.readiness.valid && relay.pools.size() == 1 && relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  // The relay restarted: the catalog stream is refused with no reason, so the consumer asks
  // GetRelayInfo before it reopens, and learns the new incarnation there.
  scenario.relay().set_info_incarnation(8);
  scenario.relay().push_catalog(StreamEndScript{grpc::StatusCode::FAILED_PRECONDITION, ""});
  scenario.await([](const RelayView& relay) { return relay.identity && relay.identity->relay_incarnation() == 8; });
  const auto view = scenario.view();
  CHECK(view.identity_changes == 1);
  CHECK_FALSE(view.readiness.valid);  // incarnation 7's readiness is void
}

TEST_CASE("fake relay: a late message of a stream opened before the incarnation changed does not undo the change",
          "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}, 7));
  scenario.relay().push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}), 1);
  scenario.relay().set_pool_script([](const auto& request, int attempt) {
    return snapshot_script(request.expected_producer(), 3, attempt == 0 ? 7 : 8);
  });
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.readiness.valid && relay.pools.size() == 1 && relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  scenario.relay().set_info_incarnation(8);
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}, 8));
  scenario.await([](const RelayView& relay) {
    return relay.identity && relay.identity->relay_incarnation() == 8 && relay.pools.size() == 1 &&
           relay.pools[0].status == ReplicaStatus::kInstalled;
  });
  // The readiness stream opened while incarnation 7 was the relay: its late message is
  // refused as drift and the stream reopened, and nothing learned from incarnation 8 is lost.
  auto late = readiness(2, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)});
  *late.mutable_relay() = relay_identity(7);
  scenario.relay().push_readiness(late, 1);
  auto reopened = readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)});
  *reopened.mutable_relay() = relay_identity(8);
  scenario.relay().push_readiness(reopened, 2);
  scenario.await([](const RelayView& relay) { return relay.readiness.opens == 2 && relay.readiness.valid; });
  const auto view = scenario.view();
  CHECK_THAT(view.readiness.last_error, Catch::Contains("RelayIdentityDrift"));
  CHECK(view.identity_changes == 1);
  REQUIRE(view.identity);
  CHECK(view.identity->relay_incarnation() == 8);
  REQUIRE(view.pools.size() == 1);
  CHECK(view.pools[0].status == ReplicaStatus::kInstalled);
  CHECK(scenario.relay().pool_requests() == 2);
}

TEST_CASE("kvrelay-cli: a relay speaking another contract is a clear error with exit code 3", "[client][fake][cli]") {
  FakeRelay relay;
  relay.set_info_marker(0x4B565232);
  auto update = catalog(1, {descriptor(1)});
  update.set_contract_marker(0x4B565232);
  relay.push_catalog(update);
  const auto [info, info_exit] = run_to_end(KVRELAY_CLI, {"info", "--target", relay.address()});
  CHECK(info_exit == 3);
  CHECK_THAT(info, Catch::Contains("contract mismatch: ContractMarker"));
  const auto [catalog_output, catalog_exit] = run_to_end(KVRELAY_CLI, {"catalog", "--target", relay.address()});
  CHECK(catalog_exit == 3);
  CHECK_THAT(catalog_output, Catch::Contains("contract mismatch"));
  const auto [top, top_exit] = run_to_end(KVRELAY_CLI, {"top", "--target", relay.address(), "--iterations", "1"});
  CHECK(top_exit == 3);
  CHECK_THAT(top, Catch::Contains("! contract mismatch: GetRelayInfo: ContractMarker"));
}

TEST_CASE("kvrelay-cli: overlap names the plane a relay refused and answers from the others without waiting",
          "[client][fake][cli]") {
  FakeRelay relay;
  relay.push_catalog(catalog(1, {descriptor(1)}));
  relay.push_readiness(
      StreamEndScript{grpc::StatusCode::FAILED_PRECONDITION, "RELAY_ERROR_REASON_UNSUPPORTED_FEATURE"});
  relay.push_load(load_window(1, {1}));
  serve_snapshots(relay);
  std::string tokens;
  for (auto token : prompt()) tokens += std::to_string(token) + " ";
  const std::string tokens_file = write_file("refused-readiness-tokens.txt", tokens);
  // A timeout the suite's own would end first: the answer must not wait it out.
  const auto [output, exit_code] =
      run_to_end(KVRELAY_CLI, {"overlap", "--model", "llama", "--tokens", tokens_file, "--target", relay.address(),
                               "--json", "--timeout-ms", "3600000"});
  CHECK(exit_code == 1);
  CHECK_THAT(output, Catch::Contains("relay not ready: readiness: status 9 [RELAY_ERROR_REASON_UNSUPPORTED_FEATURE]"));
  CHECK_THAT(output, Catch::Contains("\"cached_blocks\": 3"));
  CHECK_THAT(output, Catch::Contains("\"readiness\": null"));
}

TEST_CASE("fake relay: a plane refused by this incarnation keeps the refusal while GetRelayInfo fails",
          "[client][fake]") {
  Scenario scenario;
  auto& relay = scenario.relay();
  relay.push_readiness(StreamEndScript{grpc::StatusCode::INVALID_ARGUMENT, "RELAY_ERROR_REASON_INVALID_REQUEST"});
  relay.push_catalog(catalog(1, {descriptor(1)}));
  scenario.start();
  scenario.await([](const RelayView& view) { return view.readiness.unavailable && view.catalog.valid; });
  // The checks for a new incarnation fail meanwhile; the view still says why the plane stopped.
  relay.set_info_refusal(StreamEndScript{grpc::StatusCode::UNAVAILABLE, ""});
  const int calls = relay.info_calls();
  scenario.await([&](const RelayView&) { return relay.info_calls() >= calls + 2; });
  const auto view = scenario.view();
  CHECK(view.readiness.unavailable);
  CHECK_THAT(view.readiness.last_error, Catch::Contains("RELAY_ERROR_REASON_INVALID_REQUEST"));
}

TEST_CASE("fake relay: a reason this client does not know is named as the relay sent it", "[client][fake]") {
  Scenario scenario;
  scenario.relay().push_catalog(StreamEndScript{grpc::StatusCode::UNAVAILABLE, "RELAY_ERROR_REASON_FROM_THE_FUTURE"});
  scenario.start();
  scenario.await([](const RelayView& view) { return !view.catalog.last_error.empty(); });
  CHECK_THAT(scenario.view().catalog.last_error,
             Catch::Contains("status 14 [RELAY_ERROR_REASON_FROM_THE_FUTURE, unknown to this client]"));
}

TEST_CASE("fake relay: readiness is read under the pool's base model, whatever its registration is named",
          "[client][fake]") {
  Scenario scenario;
  auto& relay = scenario.relay();
  auto pool = descriptor(1, "llama-chat");
  pool.mutable_registrations(0)->mutable_target()->mutable_base()->set_base_model("llama");
  relay.push_catalog(catalog(1, {pool}));
  relay.push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}));
  scenario.serve_snapshots();
  scenario.start();
  scenario.await([](const RelayView& view) {
    return view.readiness.valid && view.pools.size() == 1 && view.pools[0].status == ReplicaStatus::kInstalled;
  });
  CHECK(scenario.view().pools[0].readiness == v1::SERVING_READINESS_STATE_READY);
  const auto matches = scenario.consumer().overlap("llama-chat", prompt());
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].readiness == v1::SERVING_READINESS_STATE_READY);
}

TEST_CASE("fake relay: the serving-load plane follows contiguous windows, pools joined to the catalog by producer",
          "[client][fake][serving-load]") {
  Scenario scenario;
  scenario.relay().push_catalog(catalog(1, {descriptor(1)}));
  for (std::uint64_t window = 1; window <= 3; ++window) {
    scenario.relay().push_serving_load(
        serving_load_window(window, window < 3 ? std::vector<std::uint8_t>{1} : std::vector<std::uint8_t>{1, 2}));
  }
  scenario.start();
  scenario.await([](const RelayView& relay) {
    return relay.serving_load.valid && relay.serving_load_window == 3 && relay.pools.size() == 1 &&
           relay.pools[0].serving_load;
  });
  const auto view = scenario.view();
  CHECK(view.serving_load.opens == 1);
  CHECK(view.serving_load.last_error.empty());
  CHECK(view.serving_pools.size() == 2);  // also the pool the catalog does not list
  REQUIRE(view.serving_models.size() == 1);
  const auto& model = view.serving_models[0];
  CHECK(model.canonical_model_id() == "llama");
  CHECK(model.load().requests().requests_awaiting_first_token() == 1);
  CHECK(model.load().requests().requests_generating() == 2);
  CHECK(model.load().tokens().inflight_input_tokens() == 900);
  CHECK(model.deployment().ready_frontends() == 1);
  const auto& pool = *view.pools[0].serving_load;
  CHECK(pool.load().status() == v1::DATA_STATUS_COMPLETE);
  CHECK(pool.load().tokens().active_prefill_tokens() == 100);
  CHECK(pool.deployment().live_workers() == 2);
}

TEST_CASE("fake relay: a serving-load gap or regression reopens only that stream, whose first window is taken as is",
          "[client][fake][serving-load]") {
  Scenario scenario;
  auto& relay = scenario.relay();
  relay.push_catalog(catalog(1, {descriptor(1)}));
  relay.push_load(load_window(1, {1}));
  relay.push_serving_load(serving_load_window(1, {1}), 1);
  relay.push_serving_load(serving_load_window(2, {1}), 1);
  std::string fault;
  SECTION("a gap") {
    relay.push_serving_load(serving_load_window(4, {1}), 1);
    fault = "WindowGap";
  }
  SECTION("a repeated window") {
    relay.push_serving_load(serving_load_window(2, {1}), 1);
    fault = "WindowRegressed";
  }
  SECTION("a window failing its check") {
    relay.push_serving_load(serving_load_window(3, {1}, {"llama", "llama"}), 1);
    fault = "DuplicateModel";
  }
  relay.push_serving_load(serving_load_window(9, {1}), 2);
  scenario.start();
  scenario.await([](const RelayView& view) {
    return view.serving_load.opens == 2 && view.serving_load.valid && view.serving_load_window == 9 &&
           view.load.valid && view.catalog.valid;
  });
  const auto view = scenario.view();
  CHECK_THAT(view.serving_load.last_error, Catch::Contains(fault));
  CHECK_FALSE(view.serving_load.unavailable);
  CHECK(view.load.opens == 1);  // the other planes never noticed
  CHECK(view.catalog.opens == 1);
}

TEST_CASE("fake relay: a plane the relay did not serve is asked again once another incarnation answers",
          "[client][fake][serving-load]") {
  Scenario scenario;
  auto& relay = scenario.relay();
  relay.push_serving_load(StreamEndScript{grpc::StatusCode::UNIMPLEMENTED, ""}, 1);
  relay.push_catalog(catalog(1, {descriptor(1)}, 7));
  relay.set_pool_script([](const auto& request, int attempt) {
    return snapshot_script(request.expected_producer(), 3, attempt == 0 ? 7 : 8);
  });
  scenario.start();
  scenario.await([](const RelayView& view) {
    return view.serving_load.unavailable && view.pools.size() == 1 && view.pools[0].status == ReplicaStatus::kInstalled;
  });
  // The relay is upgraded in place: a restart, under a new incarnation, that serves the RPC.
  relay.set_info_incarnation(8);
  auto window = serving_load_window(1, {1});
  *window.mutable_relay() = relay_identity(8);
  relay.push_serving_load(window, 2);
  relay.push_catalog(catalog(1, {descriptor(1)}, 8));
  scenario.await([](const RelayView& view) { return view.serving_load.valid; });
  const auto view = scenario.view();
  CHECK_FALSE(view.serving_load.unavailable);
  CHECK(view.serving_load.opens == 2);
  CHECK(view.identity_changes == 1);
}

TEST_CASE("fake relay: a relay that does not serve SubscribeServingLoad leaves the other planes working",
          "[client][fake][serving-load]") {
  Scenario scenario;
  auto& relay = scenario.relay();
  SECTION("UNIMPLEMENTED, as relays that predate the RPC answer") {
    relay.push_serving_load(StreamEndScript{grpc::StatusCode::UNIMPLEMENTED, ""});
  }
  SECTION("UNSUPPORTED_FEATURE") {
    relay.push_serving_load(
        StreamEndScript{grpc::StatusCode::FAILED_PRECONDITION, "RELAY_ERROR_REASON_UNSUPPORTED_FEATURE"});
  }
  relay.push_catalog(catalog(1, {descriptor(1)}));
  relay.push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}));
  relay.push_load(load_window(1, {1}));
  serve_snapshots(relay);
  scenario.start();
  scenario.await([](const RelayView& view) {
    return view.serving_load.unavailable && view.readiness.valid && view.load.valid && view.pools.size() == 1 &&
           view.pools[0].status == ReplicaStatus::kInstalled;
  });
  relay.push_load(load_window(2, {1}));
  scenario.await([](const RelayView& view) { return view.load_window == 2; });
  const auto view = scenario.view();
  CHECK(view.serving_load.opens == 1);  // never asked again
  CHECK_FALSE(view.serving_load.valid);
  CHECK_FALSE(view.incompatible);
  CHECK(view.serving_pools.empty());
  CHECK_FALSE(view.pools[0].serving_load);
  const auto matches = scenario.consumer().overlap("llama", prompt());
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].depth == 3u);
  CHECK(matches[0].load);
}

namespace {

// The table row that starts with `head` (after its indentation), split into its cells.
std::vector<std::string> row_of(const std::string& output, const std::string& head) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> cells;
    for (std::string word; words >> word;) cells.push_back(word);
    if (!cells.empty() && cells[0] == head) return cells;
  }
  return {};
}

// Pool 2 of a window, DEGRADED: its gauges are unset.
v1::ServingLoadUpdate with_degraded_pool(v1::ServingLoadUpdate update) {
  auto* load = update.mutable_pools(1)->mutable_load();
  load->set_status(v1::DATA_STATUS_DEGRADED);
  load->mutable_tokens()->Clear();
  return update;
}

}  // namespace

TEST_CASE("kvrelay-cli: serving-load prints the window per model and per pool, --json and --watch",
          "[client][fake][cli][serving-load]") {
  FakeRelay relay;
  const auto window = with_degraded_pool(serving_load_window(5, {1, 2}));
  const std::vector<std::string> target{"--target", relay.address()};
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "serving-load");
    args.insert(args.end(), target.begin(), target.end());
    return run_to_end(KVRELAY_CLI, args);
  };

  relay.push_serving_load(window, 1);
  const auto [table, table_exit] = run({});
  CHECK(table_exit == 0);
  CHECK_THAT(table, Catch::Contains("serving-load window 5 (1000 ms), 1 models, 2 pools"));
  // NAMESPACE MODEL STATUS AWAITING/GENERATING QUEUED-PREFILL INFLIGHT FRONTENDS STARTED/COMPLETED
  CHECK(row_of(table, "prod") ==
        std::vector<std::string>{"prod", "llama", "COMPLETE", "1/2", "300", "900", "2/2/1", "40/37"});
  // POOL GENERATION STATUS PREFILL DECODE LIVE-WORKERS MAX-CONCURRENCY
  const auto pool_1 = row_of(table, "dc:111111:010101");
  const auto pool_2 = row_of(table, "dc:111111:020202");
  CHECK(pool_1 == std::vector<std::string>{"dc:111111:010101", "1", "COMPLETE", "100", "10", "2", "-"});
  CHECK(pool_2 == std::vector<std::string>{"dc:111111:020202", "1", "DEGRADED", "-", "-", "2", "-"});

  relay.push_serving_load(window, 2);
  const auto [json, json_exit] = run({"--json"});
  CHECK(json_exit == 0);
  CHECK_THAT(json, Catch::Contains("\"windowSequence\": \"5\"") &&
                       Catch::Contains("\"activePrefillTokens\": \"100\"") &&
                       Catch::Contains("\"canonicalModelId\": \"llama\""));

  relay.push_serving_load(serving_load_window(6, {1}), 3);
  relay.push_serving_load(serving_load_window(7, {1}), 3);
  relay.push_serving_load(StreamEndScript{}, 3);
  const auto [watch, watch_exit] = run({"--watch"});
  CHECK(watch_exit == 0);
  CHECK_THAT(watch, Catch::Contains("serving-load window 6") && Catch::Contains("serving-load window 7"));

  relay.push_serving_load(StreamEndScript{grpc::StatusCode::UNIMPLEMENTED, ""}, 4);
  const auto [refused, refused_exit] = run({});
  CHECK(refused_exit == 1);
  CHECK_THAT(refused, Catch::Contains("the relay does not serve this RPC"));
}

TEST_CASE("kvrelay-cli: top shows each pool's serving load and each model's requests in flight",
          "[client][fake][cli][serving-load]") {
  FakeRelay relay;
  relay.push_catalog(catalog(1, {descriptor(1), descriptor(2, "qwen")}));
  relay.push_readiness(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)}));
  relay.push_load(load_window(1, {1, 2}));
  serve_snapshots(relay);
  const std::vector<std::string> top{"top", "--target", relay.address(), "--iterations", "1", "--timeout-ms", "30000"};

  SECTION("a window") {
    relay.push_serving_load(with_degraded_pool(serving_load_window(4, {1, 2}, {"llama", "qwen"})));
    const auto [output, exit_code] = run_to_end(KVRELAY_CLI, top);
    CHECK(exit_code == 0);
    CHECK_THAT(output, Catch::Matches(R"([\s\S]*serving-load window 4 \(\d+\.\ds ago\)  restarts[\s\S]*)"));
    const auto pool_1 = row_of(output, "prod/backend-1/generate");
    const auto pool_2 = row_of(output, "prod/backend-2/generate");
    REQUIRE(pool_1.size() > 2);
    REQUIRE(pool_2.size() > 2);
    CHECK(std::vector(pool_1.end() - 2, pool_1.end()) == std::vector<std::string>{"100", "10"});
    CHECK(std::vector(pool_2.end() - 2, pool_2.end()) == std::vector<std::string>{"-", "-"});
    CHECK(row_of(output, "llama") == std::vector<std::string>{"llama", "prod", "COMPLETE", "1/2"});
  }
  SECTION("a relay that does not serve serving load") {
    relay.push_serving_load(StreamEndScript{grpc::StatusCode::UNIMPLEMENTED, ""});
    const auto [output, exit_code] = run_to_end(KVRELAY_CLI, top);
    CHECK(exit_code == 0);
    CHECK_THAT(output, Catch::Contains("serving-load window 0 (unavailable)"));
    const auto pool_1 = row_of(output, "prod/backend-1/generate");
    REQUIRE(pool_1.size() > 2);
    CHECK(pool_1[2] == "installed");
    CHECK(std::vector(pool_1.end() - 2, pool_1.end()) == std::vector<std::string>{"-", "-"});
  }
}
