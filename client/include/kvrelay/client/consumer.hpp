#pragma once
// kv-relay's consumer library: a router-side replica of every plane of one or more relays (one per
// data center), kept as five independent state machines per relay — catalog, pool filters,
// readiness, load, serving load — exactly as docs/protocol/rpcs.md#consumer-rules requires, with
// quarantine of unsupported entries, reconnection with jittered backoff, and a thread-safe query
// API.
//
//   Consumer consumer({.targets = {"dc-a:50051", "dc-b:50051"}});
//   consumer.start();  // returns at once; pools appear as each relay's catalog arrives
//   for (const auto& match : consumer.overlap("meta/llama-3-8b", prompt_tokens)) ...
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bucket_image.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::client {

// A pool delta its replica has just applied. Its producer and images are valid only during the
// delta_tap call: copy what must outlive it.
struct AppliedDelta {
  const dynamo::kvrelay::v1::ProducerIdentity& producer;  // the pool and its generation
  std::uint64_t sequence;                                 // the replica's, after the delta
  std::span<const BucketImage> images;                    // "bucket now holds word", wire order
};

struct ConsumerOptions {
  std::vector<std::string> targets;  // host:port of each relay's WAN API
  std::string subscriber_id = "kvrelay-client";
  int max_receive_bytes = 8 << 20;  // a full snapshot chunk is just over 4 MiB
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  // HTTP/2 pings on every relay connection: one unanswered for keepalive_timeout ends its
  // streams, so a relay that vanished without closing the connection (host down, partition)
  // invalidates what it published instead of leaving it queryable (docs/consumer.md#keepalive).
  std::chrono::milliseconds keepalive_time{20000};
  std::chrono::milliseconds keepalive_timeout{10000};
  bool subscribe_pools = true;  // false: catalog, readiness, load and serving load only (pools
                                // stay kSubscribing, with no stream and no depth)
  // Sees every pool frame before it is applied, on that pool stream's own thread (frame
  // captures, diagnostics). It holds no lock, but a slow tap slows that stream. A tap must
  // not throw: an exception leaving it ends the process (std::terminate).
  std::function<void(const dynamo::kvrelay::v1::FilterUpdate&)> frame_tap;
  // Sees every delta once its replica has applied it, on that pool stream's own thread, with the
  // buckets it changed as the replica decoded them (change notifications, latency probes,
  // without decoding the frame a second time). Same rules as frame_tap. Only deltas: a replica
  // that subscribes again installs a new snapshot, whose changes no tap call reports.
  std::function<void(const AppliedDelta&)> delta_tap;
};

enum class ReplicaStatus {
  kSubscribing,  // stream open or (re)opening, snapshot not yet complete
  kInstalled,    // snapshot installed, deltas applying
  kWaiting,      // refused: waits for the catalog (a newer revision, or another producer, as the
                 // refusal's reason says: docs/consumer.md), or, refused as invalid, for another
                 // relay incarnation
  kQuarantined,  // the pool's semantics are unsupported: never queried
};
std::string_view to_string(ReplicaStatus status);

struct PlaneView {
  bool valid = false;        // holds a complete, validated snapshot/window
  bool unavailable = false;  // refused by this relay incarnation (see last_error); asked again once another answers
  std::uint64_t opens = 0;   // streams opened so far (1 + reconnects)
  std::string last_error;    // the last stream end or local fault, for people
  // When this consumer last applied a message of the plane (its own clock): how fresh the plane
  // is. The relay's timestamps (observed_ms) are another data center's clock, not a freshness.
  std::optional<std::chrono::steady_clock::time_point> last_message;
};

struct LoadFacts {
  std::uint64_t used_blocks = 0;
  std::uint64_t total_blocks = 0;
  std::uint32_t observed_ranks = 0;
  std::uint32_t expected_ranks = 0;
  // Every declared rank reported and capacity is known: only then is used/total a load.
  bool authoritative() const { return expected_ranks > 0 && observed_ranks == expected_ranks && total_blocks > 0; }
};

// A load window's entry for one pool, as LoadFacts.
LoadFacts load_facts(const dynamo::kvrelay::v1::KvPoolLoadEntry& entry);

// "namespace/component/endpoint", as PoolView::endpoint and PoolMatch::endpoint name a pool.
std::string endpoint_name(const dynamo::kvrelay::v1::DynamoEndpointId& endpoint);

struct PoolView {
  dynamo::kvrelay::v1::KvPoolDescriptor descriptor;
  std::string endpoint;  // namespace/component/endpoint
  ReplicaStatus status = ReplicaStatus::kSubscribing;
  std::uint64_t sequence = 0;
  std::uint64_t deltas_applied = 0;
  std::uint64_t images_applied = 0;
  std::uint64_t stale_deltas = 0;    // at or below the replica's sequence: ignored
  std::uint64_t occupied_slots = 0;  // fingerprints held
  std::uint64_t bucket_count = 0;
  std::uint64_t subscriptions = 0;  // snapshots requested for this generation
  std::string last_fault;
  // When this consumer last applied a frame of the pool's stream, heartbeats included.
  std::optional<std::chrono::steady_clock::time_point> last_frame;
  std::optional<LoadFacts> load;
  // Its base model's readiness entry in the serving namespace (a quarantined pool's too: it is
  // the model's); nullopt while there is none.
  std::optional<dynamo::kvrelay::v1::ServingReadinessState> readiness;
  // This producer's entry in the latest serving-load window: its gauges are set exactly when its
  // load status is COMPLETE.
  std::optional<dynamo::kvrelay::v1::PoolServingLoad> serving_load;
  double load_factor() const { return bucket_count ? double(occupied_slots) / double(bucket_count * 4) : 0.0; }
};

struct RelayView {
  std::string target;
  std::optional<dynamo::kvrelay::v1::RelayIdentity> identity;
  bool incompatible = false;           // contract mismatch: every stream of this relay stopped
  std::string incompatibility;         // the mismatch, for people
  std::uint64_t identity_changes = 0;  // relay restarts seen (new incarnations)
  PlaneView catalog, readiness, load, serving_load;
  std::uint64_t catalog_revision = 0;
  std::uint64_t readiness_revision = 0;
  std::uint64_t load_window = 0;
  std::uint64_t serving_load_window = 0;
  std::vector<PoolView> pools;                 // supported pools of the catalog
  std::vector<std::string> quarantined_pools;  // fault kinds of the quarantined ones
  std::vector<dynamo::kvrelay::v1::TopologyEntry> readiness_entries;
  std::vector<std::string> quarantined_entries;  // "namespace/model: fault kind"
  // The latest serving-load window, empty while that plane is not valid: every pool it reports
  // (also those the catalog does not list) by producer, every model by (namespace, canonical id).
  std::vector<dynamo::kvrelay::v1::PoolServingLoad> serving_pools;
  std::vector<dynamo::kvrelay::v1::ModelServingLoad> serving_models;
  std::size_t serving_load_quarantined = 0;  // its pools and models that failed their check
};

struct ConsumerView {
  std::vector<RelayView> relays;
};

// An installed replica's words hashed as GetState's filter_digest, at the sequence they hold.
struct ReplicaDigest {
  std::uint64_t sequence = 0;
  std::uint64_t digest = 0;
};

struct PoolMatch {
  std::string target;
  std::uint64_t dc_id = 0;
  std::string endpoint;  // namespace/component/endpoint
  std::string canonical_model_id;
  std::optional<std::string> adapter;  // set when the name bound to a LoRA target
  std::uint32_t block_size = 0;
  std::size_t prompt_blocks = 0;     // full blocks of the prompt under this pool's semantics
  std::optional<std::size_t> depth;  // leading blocks cached; nullopt while no replica is installed
  std::uint64_t sequence = 0;
  std::optional<dynamo::kvrelay::v1::ServingReadinessState> readiness;  // nullopt: no usable entry
  std::optional<LoadFacts> load;
};

class RelayLink;

class Consumer {
 public:
  explicit Consumer(ConsumerOptions options);
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // The consumer runs once: start() opens its streams, stop() ends them and joins its threads.
  // A second start(), or one after stop(), does nothing and returns false (a consumer of no
  // targets has nothing to start: true); stop() may be called
  // again. Neither may be called from a tap (a tap runs on a thread stop() joins).
  bool start();
  void stop();

  // Every supported pool, across all relays, that serves `model` (a canonical id or alias that
  // resolves to exactly one binding in that relay's catalog), with the prompt's prefix-hit depth
  // under that pool's own semantics, its readiness and its load. `cache_namespace` is the
  // request's cache namespace (vLLM's cache salt), if it has one: blocks stored under a namespace
  // match only requests under the same one. Thread-safe.
  std::vector<PoolMatch> overlap(std::string_view model, std::span<const std::uint32_t> tokens,
                                 std::string_view cache_namespace = {}) const;

  ConsumerView view() const;

  // Hashes every bucket of one installed replica (the pool served at `endpoint`,
  // namespace/component/endpoint, by relay `target`): for checking a replica against the
  // relay, not for a hot path.
  std::optional<ReplicaDigest> replica_digest(std::string_view target, std::string_view endpoint) const;

  // Blocks until `done(view())` holds or `timeout` passes; re-evaluates on every state change
  // (no evaluation starts after the timeout, so it overruns it by one evaluation at most).
  bool await(const std::function<bool(const ConsumerView&)>& done, std::chrono::milliseconds timeout) const;

  struct Notifier;

 private:
  ConsumerOptions options_;
  std::shared_ptr<Notifier> notifier_;
  std::vector<std::unique_ptr<RelayLink>> links_;
};

}  // namespace kvrelay::client
