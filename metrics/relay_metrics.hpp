#pragma once
// Every Prometheus metric family of kv-relay (docs/metrics.md), in one registry that exists
// whether or not /metrics is served. Every series of a fixed label set is created up front
// (at 0, so rate() and increase() see its first increment), and recording is an atomic
// operation on a handle: it never waits on a scrape, and a scrape never waits on an actor.
// Per-pool values are read at scrape time from atomics the pool's actors publish
// (PoolStats); mailbox depths are sampled by the actors themselves (MailboxSampler).
//
// Label values come from small fixed sets (RPC, reason, frame kind, actor kind, result) or
// are a serving endpoint "namespace/component/endpoint": never a subscriber id or a hash.
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_events.hpp"
#include "core/rpc_status.hpp"

namespace kvrelay::metrics {

// The WAN server-streaming RPCs (label rpc).
enum class Rpc : std::uint8_t {
  kWatchKvPoolCatalog,
  kSubscribeKvPool,
  kSubscribeServingReadiness,
  kSubscribeKvPoolLoad,
  kSubscribeServingLoad,
};
inline constexpr std::size_t kRpcCount = 5;
std::string_view rpc_name(Rpc rpc);

// What a frame handed to a stream's transport carries (label kind).
enum class FrameKind : std::uint8_t {
  kSnapshotChunk,
  kDelta,
  kHeartbeat,
  kCatalog,
  kReadiness,
  kLoad,
  kServingLoad,
};
inline constexpr std::size_t kFrameKindCount = 7;

// Actors whose mailbox depth is sampled (label actor_kind).
enum class ActorKind : std::uint8_t {
  kMembership,
  kCatalog,
  kTopologyProjector,
  kLoadWindow,
  kSnapshotEncoders,
  kPoolPublisher,
  kPoolStream,
  kCatalogStream,
  kReadinessStream,
  kLoadStream,
};
inline constexpr std::size_t kActorKindCount = 10;

// How one KV event batch fared (label result of kv_relay_ingest_batches_total).
enum class BatchResult : std::uint8_t {
  kAccepted,
  kMalformed,      // failed the whole-batch structural check
  kUnknownSource,  // no pool, worker or push source for it
  kStaleSequence,  // a sequence its source already sent in this epoch
};
inline constexpr std::size_t kBatchResultCount = 4;

// Why the relay dropped a KV source's blocks (label reason of kv_relay_source_resets_total).
enum class ResetReason : std::uint8_t {
  kEpochChanged,   // the source restarted
  kSequenceGap,    // batches were lost
  kSourceDropped,  // PutWorker no longer declares the rank
  kWorkerRemoved,
  kNewGeneration,  // the pool was rebuilt (fenced, or its domain changed): its lineage is gone
};
inline constexpr std::size_t kResetReasonCount = 5;

enum class LoadReportResult : std::uint8_t { kAccepted, kMalformed, kUnknownRank };
inline constexpr std::size_t kLoadReportResultCount = 3;

// Event labels: kind stored | removed | cleared; result accepted | ignored (not the device
// tier) | invalid_content | the lineage error (parent_block_not_found, ...).
inline constexpr std::size_t kEventKindCount = 3;
inline constexpr std::size_t kEventResultCount = 7;

// One batch's events counted locally, so that a batch costs one atomic add per (kind,
// result) it holds instead of one per event.
class EventTally {
 public:
  void add(const ::kvrelay::ingest::v1::KvEvent& event, const EventResult& result);

 private:
  friend class RelayMetrics;
  std::array<std::array<std::uint32_t, kEventResultCount>, kEventKindCount> counts_{};
};

// The label of a stream's ending: the reason name without RELAY_ERROR_REASON_, or
// "client_cancel", or "clean_end" (it ended without an error, or the relay's drain ended it).
std::string termination_reason(const RpcStatus& status, bool draining);
// The label of a refused admission: the reason name without the prefix, or the status code
// in lower case when there is no reason (e.g. "unimplemented"). (A refusal because the relay
// is draining is labelled "draining" by the caller, which knows why it refused.)
std::string refusal_result(const RpcStatus& status);

// One pool generation's figures, written by its actors with relaxed stores and read at
// scrape time. A new generation gets a fresh PoolStats, so the late writes of a retiring
// generation land in an object nobody reads any more.
struct PoolStats {
  std::atomic<std::uint64_t> sequence{0};
  std::atomic<std::uint64_t> unique_blocks{0};
  std::atomic<std::uint64_t> occupied_slots{0};
  std::atomic<std::uint64_t> bucket_count{0};
  std::atomic<std::uint64_t> capacity_failures{0};
  std::atomic<std::uint32_t> subscribers{0};     // written by the pool publisher
  std::atomic<std::uint32_t> active_sources{0};  // by membership
  std::atomic<std::uint32_t> observed_ranks{0};  // by the load window
  std::atomic<std::uint32_t> expected_ranks{0};  // by the load window
};

// The per-pool families, built from the published PoolStats at every scrape. Membership
// publishes a pool's stats when it materializes a generation and withdraws them when the
// pool goes, so a withdrawn pool's series disappear with it.
class PoolCollector final : public prometheus::Collectable {
 public:
  void publish(const std::string& pool, std::shared_ptr<const PoolStats> stats);
  void withdraw(const std::string& pool);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable std::mutex mutex_;  // held only to copy or change the map, never while formatting
  std::map<std::string, std::shared_ptr<const PoolStats>> pools_;
};

class RelayMetrics {
 public:
  RelayMetrics();
  RelayMetrics(const RelayMetrics&) = delete;
  RelayMetrics& operator=(const RelayMetrics&) = delete;

  // What /metrics serves: the registry and the per-pool collector.
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables() const;

  // kv_relay_identity_info, label values as decimal strings.
  void set_identity(std::uint64_t dc_id, std::uint64_t incarnation, std::uint64_t instance_id);

  // ---- WAN streams (gateway) ----
  void stream_admitted(Rpc rpc);  // counts result="admitted" and opens the stream
  void stream_refused(Rpc rpc, const std::string& result);
  void stream_ended(Rpc rpc, const std::string& reason);
  void frame_sent(FrameKind kind, std::size_t bytes) {
    frames_sent_[index(kind)]->Increment();
    bytes_sent_[index(kind)]->Increment(static_cast<double>(bytes));
  }

  // ---- publication ----
  void snapshot_encoded(std::chrono::nanoseconds took) { snapshot_encode_->Observe(seconds(took)); }
  void delta_handed_on(std::chrono::nanoseconds since_receipt) { event_to_wire_->Observe(seconds(since_receipt)); }
  // A snapshot image (a copy of a pool's bucket lane) taken (+bytes) or released (-bytes).
  void snapshot_image_bytes(std::int64_t change) { snapshot_image_bytes_->Increment(static_cast<double>(change)); }
  double snapshot_image_bytes() const { return snapshot_image_bytes_->Value(); }
  void generation_created() { generations_created_->Increment(); }
  void generation_retired() { generations_retired_->Increment(); }
  void set_pools_materialized(std::size_t count) { pools_materialized_->Set(static_cast<double>(count)); }
  PoolCollector& pools() { return *pools_; }

  // ---- ingest ----
  void batch(BatchResult result) { batches_[index(result)]->Increment(); }
  void events(const EventTally& tally);
  void source_reset(ResetReason reason) { source_resets_[index(reason)]->Increment(); }
  void load_reports(LoadReportResult result, std::uint64_t count) {
    if (count > 0) load_reports_[index(result)]->Increment(static_cast<double>(count));
  }

  // ---- readiness ----
  void set_readiness_entries(std::size_t ready, std::size_t unavailable, std::size_t unknown);

  // The sum over every live actor of `kind`: each actor adds its own change (MailboxSampler).
  prometheus::Gauge& mailbox_depth(ActorKind kind) { return *mailbox_depth_[index(kind)]; }

 private:
  template <class E>
  static std::size_t index(E e) {
    return static_cast<std::size_t>(e);
  }
  static double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::shared_ptr<PoolCollector> pools_ = std::make_shared<PoolCollector>();
  prometheus::Family<prometheus::Gauge>* identity_ = nullptr;
  prometheus::Family<prometheus::Counter>* admissions_ = nullptr;
  prometheus::Family<prometheus::Counter>* terminations_ = nullptr;
  std::array<prometheus::Gauge*, kRpcCount> open_streams_{};
  std::array<prometheus::Counter*, kFrameKindCount> frames_sent_{};
  std::array<prometheus::Counter*, kFrameKindCount> bytes_sent_{};
  prometheus::Histogram* snapshot_encode_ = nullptr;
  prometheus::Histogram* event_to_wire_ = nullptr;
  prometheus::Gauge* snapshot_image_bytes_ = nullptr;
  prometheus::Gauge* pools_materialized_ = nullptr;
  prometheus::Counter* generations_created_ = nullptr;
  prometheus::Counter* generations_retired_ = nullptr;
  std::array<prometheus::Counter*, kBatchResultCount> batches_{};
  std::array<std::array<prometheus::Counter*, kEventResultCount>, kEventKindCount> events_{};
  std::array<prometheus::Counter*, kResetReasonCount> source_resets_{};
  std::array<prometheus::Counter*, kLoadReportResultCount> load_reports_{};
  std::array<prometheus::Gauge*, 3> readiness_entries_{};  // READY, UNAVAILABLE, UNKNOWN
  std::array<prometheus::Gauge*, kActorKindCount> mailbox_depth_{};
};

// The mailbox gauge of `kind`, or nullptr without metrics (an actor run on its own).
inline prometheus::Gauge* mailbox_gauge(RelayMetrics* metrics, ActorKind kind) {
  return metrics != nullptr ? &metrics->mailbox_depth(kind) : nullptr;
}

}  // namespace kvrelay::metrics
