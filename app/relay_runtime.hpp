#pragma once
// A running relay: the actor system, its actors, the two gRPC listeners (WAN and ingest),
// and optionally the Prometheus /metrics listener. Used by the kv-relay binary and,
// in-process, by the integration tests.
#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>

#include <caf/fwd.hpp>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay {

inline constexpr std::size_t kDefaultActorThreads = 2;

struct RelayOptions {
  std::string listen = "0.0.0.0:50051";
  std::string ingest_listen = "127.0.0.1:50052";
  // host:port of the /metrics listener; none: metrics are recorded but not served.
  std::optional<std::string> metrics_listen;
  std::string dc_id;  // required: this data center's id (docs/protocol/pools.md#dc-id); no default
  std::optional<std::uint64_t> instance_id;  // default: derived from the host name
  // Filter sizing and growth (docs/protocol/capacity.md). nullopt: "auto", sized from the
  // declared KV capacity, the fallback when that is unknown.
  std::optional<std::uint64_t> expected_unique_blocks;
  std::uint64_t expected_unique_blocks_fallback = 1'048'576;
  double relayout_load = 0.85;
  std::uint32_t relayout_min_interval_ms = 1000;
  // nullopt: "auto", 80 % of the cgroup memory limit (none without one); 0: no budget.
  std::optional<std::uint64_t> memory_budget_bytes;
  std::uint32_t publication_threshold = 16;
  std::uint32_t publication_delay_ms = 1;
  std::uint32_t pool_stream_frames_per_s = 16'000;  // 0: no budget
  std::uint32_t load_window_ms = 1000;
  std::size_t stream_queue_frames = 16;
  std::size_t stream_queue_bytes = 16u << 20;
  std::size_t load_queue_windows = 16;
  std::size_t max_message_bytes = 8u << 20;
  std::size_t max_catalog_subscribers = 64;
  std::size_t max_readiness_subscribers = 64;
  std::size_t max_load_subscribers = 64;
  std::size_t max_serving_load_subscribers = 64;
  std::uint32_t serving_load_freshness_ms = 3000;
  std::uint32_t serving_load_retention_ms = 600000;
  std::size_t max_serving_load_sources = 4'096;  // frontends and routers heard from (and, apart, declared)
  std::size_t max_serving_load_models = 4'096;   // (namespace, model) pairs whose totals are kept
  std::size_t max_pool_streams_total = 64;
  std::size_t max_subscribers_per_pool = 64;
  std::size_t max_initialized_pool_hubs = 64;
  std::size_t snapshot_encoders = 2;
  std::uint32_t snapshot_progress_timeout_ms = 60000;
  std::uint32_t pool_heartbeat_ms = 10000;
  std::uint32_t readiness_heartbeat_ms = 10000;
  std::uint32_t catalog_heartbeat_ms = 10000;  // 0 disables
  std::uint32_t drain_timeout_ms = 5000;
  // The ingest plane (docs/protocol/ingest.md#authentication, docs/protocol/limits.md#ingest-limits).
  std::optional<std::string> ingest_token_file;  // none: every ingest caller is admitted
  std::size_t max_batch_events = 16'384;
  std::size_t max_event_blocks = 65'536;
  std::size_t max_event_tokens = 1'048'576;
  std::size_t max_ingest_string_bytes = 4'096;
  std::size_t max_engine_message_bytes = std::size_t{64} << 20;  // a ZeroMQ frame from an engine
  std::size_t max_serving_endpoints = 1'024;
  std::size_t max_workers_per_endpoint = 4'096;
  std::size_t max_kv_sources = 65'536;
  std::size_t max_ingest_streams = 4'096;
  std::size_t actor_threads = kDefaultActorThreads;
  std::optional<::kvrelay::ingest::v1::TopologyFile> topology;
  bool crash_membership_at_start_for_test = false;  // test hook: membership fails before the topology loads
};

// Why a relay did not start: a bad configuration (a value, the topology, a port taken), or a
// core actor that failed while it started (as after any core failure, the owner exits as a
// failed relay rather than as a misconfigured one).
struct StartError {
  StartError(std::string why) : message(std::move(why)) {}  // NOLINT: a bad configuration, as most are
  StartError(std::string why, bool core_failed) : message(std::move(why)), core_failure(core_failed) {}
  std::string message;
  bool core_failure = false;
};

// The actor scheduler a relay runs on: `threads` workers sharing one queue. Benchmarks of its
// actors alone use it too, so that they measure what the relay runs.
void configure_actor_scheduler(caf::actor_system_config& config, std::size_t threads);

class RelayRuntime {
 public:
  // Starts everything and binds both listeners (port 0 binds an ephemeral port).
  static std::expected<std::unique_ptr<RelayRuntime>, StartError> start(const RelayOptions& options);

  ~RelayRuntime();
  RelayRuntime(const RelayRuntime&) = delete;
  RelayRuntime& operator=(const RelayRuntime&) = delete;

  // host:port actually bound.
  const std::string& wan_address() const;
  const std::string& ingest_address() const;
  // "" when metrics are not served. The listener stays up until the runtime is destroyed,
  // so the end of a drain can still be scraped.
  const std::string& metrics_address() const;
  std::uint64_t relay_incarnation() const;
  std::uint64_t dc_id() const;

  // Test hook: the next delta of every pool breaks the sequence of the pool's first stream.
  // That stream must refuse to forward it, and the generation must be fenced and rebuilt.
  // Both fault hooks return once every publisher holds the fault.
  void inject_publication_fault_for_test();
  // Test hook: every pool's filter loses the fingerprint of `canonical_hash` while its index
  // still counts the block resident, so removing that block violates the index invariant:
  // the generation must be fenced and rebuilt, and its sources reset.
  void inject_index_fault_for_test(std::uint64_t canonical_hash);

  // Why the relay should stop, once something asked it to: a signal (request_stop), or a core
  // actor that failed (failed = true; health already reports NOT_SERVING). The owner then
  // calls shutdown() and, on a failure, exits non-zero.
  struct StopReason {
    std::string why;
    bool failed = false;
  };
  void request_stop(std::string why);
  // Waits up to `timeout` for a stop request; nullopt if none came.
  std::optional<StopReason> wait_for_stop(std::chrono::milliseconds timeout) const;

  // Test hook: membership throws, as a broken invariant would. The relay must notice, fail
  // open ingest calls with UNAVAILABLE, and ask to stop with a failure.
  void crash_membership_for_test();

  // Call from the thread that started the relay (CAF's actor system expects to be torn
  // down there). Graceful drain: health flips to NOT_SERVING, new calls are refused with UNAVAILABLE,
  // every open stream ends with UNAVAILABLE / PUBLICATION_UNAVAILABLE, and calls still
  // open after `drain` (clients that do not read) are cancelled. Idempotent.
  void shutdown(std::optional<std::chrono::milliseconds> drain = std::nullopt);

  // Open WAN streams by kind ("catalog", "readiness", "load", "serving_load", "pool"): permits
  // in use, by streams whose calls are not over; "hubs": pools that have subscribers; "ingest":
  // PublishKvEvents and ReportLoad streams open, or ended with requests still unanswered.
  std::size_t open_streams(std::string_view kind) const;
  // Of those, the streams the relay has not ended: a stream it ended (a lag, say) keeps its
  // permit until its client has read the end.
  std::size_t serving_streams(std::string_view kind) const;
  // Bytes of bucket-lane copies held for snapshots being sent (kv_relay_snapshot_image_bytes).
  std::uint64_t snapshot_image_bytes() const;
  // Block until at most / at least `count` streams of `kind` are open, or `timeout` passes.
  bool await_open_streams_at_most(std::string_view kind, std::size_t count,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  bool await_open_streams_at_least(std::string_view kind, std::size_t count,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // Block until the relay has ended all but `count` of them, or `timeout` passes.
  bool await_serving_streams_at_most(std::string_view kind, std::size_t count,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

  struct Impl;

 private:
  explicit RelayRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrelay
