// The consumer library against a real relay in-process: its replicas converge on the relay's
// filters (same digest at the same sequence) through lag, generation swaps, withdrawal and a
// relay restart.
#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "core/cbi1.hpp"
#include "kvrelay/client/consumer.hpp"
#include "tests/app/free_port.hpp"
#include "tests/app/process.hpp"
#include "tests/integration/harness.hpp"

using namespace kvrelay;
using namespace kvrelay::test;
using client::ReplicaStatus;

namespace {

constexpr auto kAwaitRelay = std::chrono::seconds(60);

client::ConsumerOptions consumer_options(TestRelay& relay) {
  client::ConsumerOptions options;
  options.targets = {relay.runtime().wan_address()};
  options.backoff_initial = std::chrono::milliseconds(10);
  options.backoff_max = std::chrono::milliseconds(200);
  return options;
}

std::string endpoint_label(const ingest_v1::EndpointRef& endpoint) {
  return endpoint.namespace_() + "/" + endpoint.component() + "/" + endpoint.endpoint();
}

// Every pool of the relay is replicated at the relay's published sequence with the same words.
bool converged(const client::Consumer& consumer, const client::ConsumerView& view, TestRelay& relay) {
  const auto state = relay.get_state();
  const auto& pools = view.relays.at(0).pools;
  if (static_cast<int>(pools.size()) != state.pools_size()) return false;
  for (const auto& pool_state : state.pools()) {
    const auto it =
        std::ranges::find(pools, endpoint_label(pool_state.serving_endpoint()), &client::PoolView::endpoint);
    if (it == pools.end() || it->status != ReplicaStatus::kInstalled) return false;
    const auto replica = consumer.replica_digest(view.relays[0].target, it->endpoint);
    if (!replica || replica->sequence != pool_state.sequence() || replica->digest != pool_state.filter_digest()) {
      return false;
    }
    if (it->descriptor.producer().layout_generation() != pool_state.layout_generation()) return false;
  }
  return true;
}

void await_converged(client::Consumer& consumer, TestRelay& relay) {
  REQUIRE(
      consumer.await([&](const client::ConsumerView& view) { return converged(consumer, view, relay); }, kAwaitRelay));
}

// A gate a tap waits at until the test opens it, once.
class TapGate {
 public:
  void wait() { latch_.wait(); }
  void open() {
    if (!opened_.exchange(true)) latch_.count_down();
  }

 private:
  std::latch latch_{1};
  std::atomic<bool> opened_{false};
};

const client::PoolView& only_pool(const client::Consumer& consumer) {
  static thread_local client::ConsumerView view;
  view = consumer.view();
  REQUIRE(view.relays.at(0).pools.size() == 1);
  return view.relays[0].pools[0];
}

}  // namespace

TEST_CASE("consumer e2e: thousands of random events on several pools and sources, replicas equal the relay's filters",
          "[client][e2e]") {
  TestRelay relay;
  const std::vector endpoints{endpoint_ref("prod", "a"), endpoint_ref("prod", "b"), endpoint_ref("prod", "c")};
  std::vector<EventScript> scripts;
  for (std::size_t p = 0; p < endpoints.size(); ++p) {
    WorkerShape shape;
    shape.model = "model-" + std::to_string(p);
    shape.dp_size = 2;
    for (std::uint64_t worker : {1, 2}) {
      relay.put_worker(put_worker_request(endpoints[p], worker, shape));
      scripts.emplace_back(100 * p + worker, endpoints[p], worker, 2, 3);
    }
  }
  client::Consumer consumer(consumer_options(relay));
  consumer.start();
  for (int round = 0; round < 10; ++round) {
    for (auto& script : scripts) REQUIRE(relay.publish(script.next_batches(20)).batches_applied() == 20);
  }
  // 6 sources x 200 batches x 8 events
  await_converged(consumer, relay);
  const auto view = consumer.view().relays.at(0);
  CHECK(view.pools.size() == 3);
  for (const auto& pool : view.pools) {
    CHECK(pool.subscriptions == 1);
    CHECK(pool.deltas_applied > 0);
  }
}

TEST_CASE("consumer e2e: the delta tap sees every applied delta once, with the images its frame carried",
          "[client][e2e]") {
  TestRelay relay;
  const auto backend = endpoint_ref("prod", "backend");
  relay.put_worker(put_worker_request(backend, 1));
  std::mutex mutex;
  std::map<std::uint64_t, std::vector<BucketImage>> framed;  // sequence -> the delta frame's images
  std::map<std::uint64_t, std::vector<BucketImage>> tapped;  // sequence -> the tap's images
  std::string tapped_pool;
  int tapped_twice = 0;
  int tapped_before_applied = 0;  // taps that saw the replica at another sequence than the delta's
  std::atomic<client::Consumer*> querying{nullptr};
  auto options = consumer_options(relay);
  options.frame_tap = [&](const dynamo::kvrelay::v1::FilterUpdate& frame) {
    if (frame.kind() != dynamo::kvrelay::v1::FILTER_UPDATE_KIND_DELTA) return;
    const auto& format = frame.producer().ckf_format();
    const auto decoded = cbi1::decode(frame.payload(), {format.seed(), format.bucket_count()});
    std::lock_guard lock(mutex);  // Catch's assertions are for the test's thread: recorded here
    framed[frame.sequence()] = decoded ? std::get<cbi1::DecodedDelta>(*decoded).images : std::vector<BucketImage>{};
  };
  std::condition_variable tapped_more;
  options.delta_tap = [&](const client::AppliedDelta& delta) {
    // The tap may query the consumer (it runs outside the consumer's lock: under it, this
    // would not return), and finds the replica already at the delta's sequence.
    std::optional<std::uint64_t> replica_sequence;
    if (client::Consumer* consumer = querying.load()) {
      const auto digest = consumer->replica_digest(relay.runtime().wan_address(), endpoint_label(backend));
      if (digest) replica_sequence = digest->sequence;
    }
    std::lock_guard lock(mutex);
    if (replica_sequence != delta.sequence) ++tapped_before_applied;
    if (!tapped.emplace(delta.sequence, std::vector(delta.images.begin(), delta.images.end())).second) ++tapped_twice;
    tapped_pool = delta.producer.pool_id().SerializeAsString();
    tapped_more.notify_all();
  };
  client::Consumer consumer(options);
  querying = &consumer;
  consumer.start();
  // Installed first, so that the events reach this replica as deltas rather than in its snapshot.
  REQUIRE(consumer.await(
      [](const client::ConsumerView& view) {
        return !view.relays.at(0).pools.empty() && view.relays[0].pools[0].status == ReplicaStatus::kInstalled;
      },
      kAwaitRelay));
  EventScript script(13, backend, 1, 1);
  for (int round = 0; round < 5; ++round) REQUIRE(relay.publish(script.next_batches(10)).batches_applied() == 10);
  await_converged(consumer, relay);

  // Taps run just after the replica applied a delta, outside the consumer's lock, and the
  // publisher may still send a delta of events it held at convergence: wait until the taps
  // account for every delta the replica has applied, up to its sequence. (The taps never hold
  // the consumer's lock while taking `mutex`, so the wait may query the consumer.)
  client::PoolView pool;
  std::optional<client::ReplicaDigest> replica;
  std::unique_lock lock(mutex);
  REQUIRE(tapped_more.wait_for(lock, kAwaitRelay, [&] {
    pool = only_pool(consumer);
    replica = consumer.replica_digest(relay.runtime().wan_address(), pool.endpoint);
    return replica && tapped.size() == pool.deltas_applied && tapped.contains(replica->sequence);
  }));
  REQUIRE(pool.deltas_applied > 0);
  CHECK(tapped_twice == 0);
  CHECK(tapped_before_applied == 0);
  CHECK(tapped.rbegin()->first == replica->sequence);
  // A delta applied is a delta received, bucket for bucket (a frame may have arrived since).
  for (const auto& [sequence, images] : tapped) {
    INFO("sequence " << sequence);
    CHECK(framed.contains(sequence));
    if (framed.contains(sequence)) CHECK(framed.at(sequence) == images);
  }
  CHECK(tapped_pool == pool.descriptor.producer().pool_id().SerializeAsString());
}

TEST_CASE("consumer e2e: await gives up at its timeout even while the state keeps changing", "[client][e2e]") {
  TestRelay relay;
  const auto backend = endpoint_ref("prod", "backend");
  relay.put_worker(put_worker_request(backend, 1));
  client::Consumer consumer(consumer_options(relay));
  consumer.start();
  REQUIRE(consumer.await(
      [](const client::ConsumerView& view) {
        return !view.relays.at(0).pools.empty() && view.relays[0].pools[0].status == ReplicaStatus::kInstalled;
      },
      kAwaitRelay));
  // Every evaluation changes the state (a batch, then the replica at the delta it makes), so a
  // change is always waiting when it returns; the changes stop only after 20 evaluations begun
  // past the timeout, which an await that honours it never reaches. (This deadline is taken
  // just before await's own: an evaluation or two may begin between them on a busy host.)
  EventScript script(17, backend, 1, 1);
  constexpr auto kTimeout = std::chrono::milliseconds(100);
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  int begun_late = 0;
  const bool done = consumer.await(
      [&](const client::ConsumerView& view) {
        if (std::chrono::steady_clock::now() >= deadline && ++begun_late >= 20) return false;
        const std::uint64_t at = view.relays.at(0).pools.at(0).sequence;
        REQUIRE(relay.publish(script.next_batches(1)).batches_applied() == 1);
        REQUIRE(consumer.await(
            [&](const client::ConsumerView& now) {
              const auto& pools = now.relays.at(0).pools;
              return !pools.empty() && pools[0].sequence > at;
            },
            kAwaitRelay));
        return false;
      },
      kTimeout);
  CHECK_FALSE(done);
  CHECK(begun_late < 20);
}

TEST_CASE("consumer e2e: a lagging replica is dropped, resubscribes from scratch and converges", "[client][e2e][lag]") {
  RelayOptions options = loopback_options();
  options.expected_unique_blocks = 1 << 21;  // two 4 MiB snapshot chunks
  options.stream_queue_frames = 4;
  TestRelay relay(options);
  const auto backend = endpoint_ref("prod", "backend");
  relay.put_worker(put_worker_request(backend, 1));
  // The tap holds the stream's thread on its first snapshot chunk: the relay's writes stall
  // behind flow control and its bounded queue overflows.
  TapGate gate;
  std::atomic<bool> held{false};
  auto consumer_opts = consumer_options(relay);
  consumer_opts.frame_tap = [&](const dynamo::kvrelay::v1::FilterUpdate&) {
    if (!held.exchange(true)) gate.wait();
  };
  client::Consumer consumer(consumer_opts);
  // Opened however the test ends: a REQUIRE that fails below throws past the opening, and the
  // consumer's destructor would wait for the held thread forever.
  const std::unique_ptr<TapGate, void (*)(TapGate*)> open_at_exit(&gate, [](TapGate* held_gate) { held_gate->open(); });
  consumer.start();
  REQUIRE(relay.runtime().await_open_streams_at_least("hubs", 1));  // attached: it gets every delta
  EventScript script(3, backend, 1, 1, 200);
  // Deltas until the held stream's queue overflows (bounded: a relay that never ends it fails
  // the test, and the tap is opened first so that the consumer can stop).
  bool lagged = false;
  for (int round = 0; round < 400 && !lagged; ++round) {
    REQUIRE(relay.publish(script.next_batches(10)).batches_applied() == 10);
    lagged = round >= 40 && relay.runtime().await_serving_streams_at_most("pool", 0, std::chrono::milliseconds(100));
  }
  lagged = lagged || relay.runtime().await_serving_streams_at_most("pool", 0, std::chrono::seconds(60));
  gate.open();
  REQUIRE(lagged);
  await_converged(consumer, relay);
  const auto& pool = only_pool(consumer);
  CHECK(pool.subscriptions >= 2);
  CHECK_THAT(pool.last_fault, Catch::Contains("SUBSCRIBER_LAGGED"));
}

TEST_CASE("consumer e2e: a generation swap replaces the replica, a withdrawal drops it", "[client][e2e]") {
  TestRelay relay;
  const auto backend = endpoint_ref("prod", "backend");
  relay.put_worker(put_worker_request(backend, 1));
  client::Consumer consumer(consumer_options(relay));
  consumer.start();
  EventScript script(9, backend, 1, 1);
  REQUIRE(relay.publish(script.next_batches(30)).batches_applied() == 30);
  await_converged(consumer, relay);
  const auto first_generation = only_pool(consumer).descriptor.producer().layout_generation();

  // Without a KV source the endpoint holds no pool; with one again it is a new generation.
  WorkerShape sourceless;
  sourceless.push_sources = false;
  relay.put_worker(put_worker_request(backend, 1, sourceless));
  relay.put_worker(put_worker_request(backend, 1));
  EventScript again(10, backend, 1, 1);
  REQUIRE(relay.publish(again.next_batches(30)).batches_applied() == 30);
  await_converged(consumer, relay);
  CHECK(only_pool(consumer).descriptor.producer().layout_generation() > first_generation);
  CHECK(only_pool(consumer).subscriptions == 1);  // a new slot: the old replica was dropped

  relay.remove_worker(backend, 1);
  REQUIRE(consumer.await([](const client::ConsumerView& view) { return view.relays[0].pools.empty(); }, kAwaitRelay));
  const std::vector<std::uint32_t> tokens(64, 1);
  CHECK(consumer.overlap("llama", tokens).empty());
}

TEST_CASE("consumer e2e: a relay restart is a new incarnation, everything is rebuilt", "[client][e2e]") {
  // A port below the ephemeral range: while the relay is down, no outgoing connection (the
  // consumer's own dials to it among them) can be given it.
  RelayOptions same_port = loopback_options();
  same_port.listen = "127.0.0.1:" + std::to_string(free_port());
  auto relay = std::make_unique<TestRelay>(same_port);
  const auto backend = endpoint_ref("prod", "backend");
  relay->put_worker(put_worker_request(backend, 1));
  client::Consumer consumer(consumer_options(*relay));
  consumer.start();
  EventScript script(11, backend, 1, 1);
  REQUIRE(relay->publish(script.next_batches(30)).batches_applied() == 30);
  await_converged(consumer, *relay);
  const auto first_incarnation = relay->runtime().relay_incarnation();

  relay.reset();
  relay = std::make_unique<TestRelay>(same_port);
  relay->put_worker(put_worker_request(backend, 1));
  EventScript fresh(12, backend, 1, 1);
  REQUIRE(relay->publish(fresh.next_batches(30)).batches_applied() == 30);
  await_converged(consumer, *relay);
  REQUIRE(consumer.await([](const client::ConsumerView& view) { return view.relays[0].readiness.valid; }, kAwaitRelay));
  const auto view = consumer.view().relays.at(0);
  REQUIRE(view.identity);
  CHECK(view.identity->relay_incarnation() == relay->runtime().relay_incarnation());
  CHECK(view.identity->relay_incarnation() != first_incarnation);
  CHECK(view.identity_changes == 1);
}

namespace {

// Stores the first `blocks` windows of `tokens` as token blocks (the relay hashes them with
// the pool's semantics), as one chain on rank 0 of worker 1.
ingest_v1::KvEventBatch store_tokens(const ingest_v1::EndpointRef& endpoint, const std::vector<std::uint32_t>& tokens,
                                     std::size_t blocks, std::uint32_t window, std::uint32_t stride) {
  ingest_v1::KvEventBatch batch;
  *batch.mutable_endpoint() = endpoint;
  batch.set_worker_id(1);
  auto* stored = batch.add_events()->mutable_stored();
  for (std::size_t b = 0; b < blocks; ++b) {
    auto* block = stored->add_blocks();
    block->set_block_hash(b + 1);
    for (std::size_t t = b * stride; t < b * stride + window; ++t) block->mutable_tokens()->add_token_ids(tokens[t]);
  }
  return batch;
}

// A kv-relay subprocess (dc "dc-east") serving one pool, Eagle windows of 9 tokens, from its
// topology file; `name` keeps its files apart from another test's.
class EastRelay {
 public:
  explicit EastRelay(const std::string& name) : relay_(name, arguments(name)), wan_(relay_.address("wan")) {}
  RelayChild& process() { return relay_; }
  const std::string& wan() const { return wan_; }
  std::string ingest() const { return relay_.address("ingest"); }

 private:
  static std::vector<std::string> arguments(const std::string& name) {
    const std::string topology = std::string(KVRELAY_TEST_TMP_DIR) + "/" + name + "-topology.yaml";
    std::ofstream(topology) << R"(version: 1
endpoints:
  - endpoint: {namespace: prod, component: backend, endpoint: generate}
    workers:
      - workerId: 1
        card: {displayName: llama, kvCacheBlockSize: 8, workerType: WORKER_TYPE_AGGREGATED,
               runtimeConfig: {enableEagle: true, totalKvBlocks: 100}}
        kvSources: [{dpRank: 0, push: {}}]
    liveWorkers: {workerIds: [1]}
)";
    return {"--metrics-listen", "off", "--dc-id", "dc-east", "--topology", topology};
  }

  RelayChild relay_;
  std::string wan_;
};

}  // namespace

// Two CAF actor systems cannot be torn down side by side in one process (CAF 0.17), so the
// second data center is a kv-relay subprocess.
TEST_CASE("consumer e2e: one consumer, two data centers, each pool queried with its own semantics", "[client][e2e]") {
  RelayOptions west_options = loopback_options();
  west_options.dc_id = "dc-west";
  TestRelay west(west_options);
  const auto backend = endpoint_ref("prod", "backend");
  WorkerShape shape;
  shape.block_size = 8;
  west.put_worker(put_worker_request(backend, 1, shape));

  EastRelay east("east");
  const std::string& east_wan = east.wan();
  auto east_ingest =
      ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(east.ingest(), grpc::InsecureChannelCredentials()));

  std::vector<std::uint32_t> tokens(200);
  for (std::uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 5 * i + 1;
  REQUIRE(west.publish({store_tokens(backend, tokens, 7, 8, 8)}).batches_applied() == 1);  // windows of 8
  {
    grpc::ClientContext context;
    ingest_v1::PublishKvEventsResponse response;
    auto writer = east_ingest->PublishKvEvents(&context, &response);
    REQUIRE(writer->Write(store_tokens(backend, tokens, 4, 9, 8)));  // Eagle: windows of 9, stride 8
    writer->WritesDone();
    REQUIRE(writer->Finish().ok());
    REQUIRE(response.batches_applied() == 1);
  }

  client::ConsumerOptions options;
  options.targets = {west.runtime().wan_address(), east_wan};
  client::Consumer consumer(options);
  consumer.start();
  const auto depths = [&] {
    std::map<std::string, std::optional<std::size_t>> by_target;
    for (const auto& match : consumer.overlap("llama", tokens)) by_target[match.target] = match.depth;
    return by_target;
  };
  const std::map<std::string, std::optional<std::size_t>> expected{{west.runtime().wan_address(), 7}, {east_wan, 4}};
  REQUIRE(consumer.await([&](const client::ConsumerView&) { return depths() == expected; }, kAwaitRelay));
  const auto matches = consumer.overlap("llama", tokens);
  REQUIRE(matches.size() == 2);
  CHECK(matches[0].dc_id != matches[1].dc_id);
  for (const auto& match : matches) CHECK(match.prompt_blocks == (match.target == east_wan ? 24u : 25u));
  consumer.stop();
  CHECK(east.process().stop() == 0);
}

TEST_CASE("consumer e2e: a relay that stops answering without closing its connection is noticed by pings",
          "[client][e2e][keepalive]") {
  EastRelay relay("frozen");
  client::ConsumerOptions options;
  options.targets = {relay.wan()};
  options.backoff_initial = std::chrono::milliseconds(10);
  options.backoff_max = std::chrono::milliseconds(200);
  options.keepalive_time = std::chrono::milliseconds(500);
  options.keepalive_timeout = std::chrono::milliseconds(500);
  client::Consumer consumer(options);
  consumer.start();
  const auto serving = [](const client::ConsumerView& view) {
    const auto& relay_view = view.relays.at(0);
    return relay_view.catalog.valid && relay_view.readiness.valid && relay_view.pools.size() == 1 &&
           relay_view.pools[0].status == ReplicaStatus::kInstalled;
  };
  REQUIRE(consumer.await(serving, kAwaitRelay));

  // Stopped, its kernel still holds the connection open and acknowledges what is sent: only
  // the relay's silence tells. Every plane and the replica must be invalidated.
  REQUIRE(kill(relay.process().pid(), SIGSTOP) == 0);
  const bool noticed = consumer.await(
      [](const client::ConsumerView& view) {
        const auto& relay_view = view.relays.at(0);
        return !relay_view.catalog.valid && !relay_view.readiness.valid &&
               (relay_view.pools.empty() || relay_view.pools[0].status != ReplicaStatus::kInstalled);
      },
      std::chrono::seconds(20));
  REQUIRE(kill(relay.process().pid(), SIGCONT) == 0);
  CHECK(noticed);

  // Answering again, it is reconnected to and replicated anew.
  REQUIRE(consumer.await(serving, kAwaitRelay));
  consumer.stop();
  CHECK(relay.process().stop() == 0);
}
