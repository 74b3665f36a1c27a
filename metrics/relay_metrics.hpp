#pragma once
// Every Prometheus metric family of kv-relay (docs/metrics.md), in one registry that exists
// whether or not /metrics is served. Every series of a fixed label set is created up front
// (at 0, so rate() and increase() see its first increment), and recording is an atomic
// operation on a handle: it never waits on a scrape, and a scrape never waits on an actor.
// Per-pool values are read at scrape time from atomics the pool's actors publish
// (PoolStats); mailbox depths are sampled by the actors themselves (MailboxSampler).
//
// The families of a fixed label set are declared once, in tables (KVRELAY_FAMILIES,
// KVRELAY_HISTOGRAMS) from which both the members and their registration are generated.
// Label values come from small fixed sets (label_sets.hpp: RPC, reason, frame kind, actor
// kind, result) or are a serving endpoint "namespace/component/endpoint": never a
// subscriber id or a hash.
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

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
#include "metrics/keyed_collector.hpp"
#include "metrics/label_sets.hpp"

namespace kvrelay::metrics {

// The WAN RPC's name: its label value.
inline std::string_view rpc_name(Rpc rpc) { return label(rpc); }

// One batch's events counted locally, so that a batch costs one atomic add per (kind,
// result) it holds instead of one per event.
class EventTally {
 public:
  void add(const ::kvrelay::ingest::v1::KvEvent& event, const EventResult& result);

 private:
  friend class RelayMetrics;
  PerLabel<PerLabel<std::uint32_t, EventResultLabel>, EventKindLabel> counts_{};
};

// The label of a stream's ending: the reason name without RELAY_ERROR_REASON_, or
// "client_cancel", or "clean_end" (it ended without an error, or the relay's drain ended it).
std::string termination_reason(const RpcStatus& status, bool draining);
// The label of a refused admission: the reason name without the prefix, or the status code
// in lower case when there is no reason (e.g. "unimplemented"). (A refusal because the relay
// is draining is labelled "draining" by the caller, which knows why it refused.)
std::string refusal_result(const RpcStatus& status);

// One pool's figures, written by its actors with relaxed stores and read at scrape time. A
// rebuilt pool (a new publisher) gets a fresh PoolStats, so the late writes of a retiring
// publisher land in an object nobody reads any more; a re-layout keeps its publisher and so
// its PoolStats.
struct PoolStats {
  std::atomic<std::uint64_t> sequence{0};
  std::atomic<std::uint64_t> unique_blocks{0};
  std::atomic<std::uint64_t> occupied_slots{0};
  std::atomic<std::uint64_t> bucket_count{0};
  std::atomic<std::uint64_t> capacity_failures{0};
  std::atomic<std::uint64_t> omitted_blocks{0};      // live blocks the filter does not hold
  std::atomic<std::uint64_t> index_bytes{0};         // the owner and lineage tables
  std::atomic<std::uint64_t> publication_bytes{0};   // the publication window's bitmap and list
  std::atomic<std::uint64_t> relayouts{0};           // re-layouts into more buckets (one generation each)
  std::atomic<std::uint32_t> subscribers{0};         // written by the pool publisher
  std::atomic<std::uint64_t> publication_gap_ns{0};  // the shortest gap between its deltas, by it too
  std::atomic<std::uint32_t> active_sources{0};      // by membership
  std::atomic<std::uint32_t> observed_ranks{0};      // by the load window
  std::atomic<std::uint32_t> expected_ranks{0};      // by the load window
};

// The per-pool families (key label "pool"), built from the published PoolStats at every
// scrape. Membership publishes a pool's stats when it materializes a generation and withdraws
// them when the pool goes, so a withdrawn pool's series disappear with it.
using PoolCollector = KeyedCollector<PoolStats>;

// One engine (ZeroMQ) source's figures, written by its actor.
struct SourceStats {
  std::atomic<std::uint32_t> connected{0};
  PerLabel<std::atomic<std::uint64_t>, EngineBatchResult> batches{};
  PerLabel<std::atomic<std::uint64_t>, EngineEventResult> events{};
  std::atomic<std::uint64_t> gaps{0};     // seq gaps seen (each then replayed or reset)
  std::atomic<std::uint64_t> replays{0};  // replay requests sent
  PerLabel<std::atomic<std::uint64_t>, EngineResetCause> resets{};
};
// Key labels: serving_endpoint, worker, dp_rank.
using SourceCollector = KeyedCollector<SourceStats>;

// One engine metrics scraper's figures.
struct ScrapeStats {
  std::atomic<std::uint64_t> succeeded{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::int64_t> last_success_ns{0};  // steady clock; 0 = never
  // Steady clock, when the scraper was made: set before its series is published, so that its
  // age never reads from 0.
  std::atomic<std::int64_t> started_ns{std::chrono::steady_clock::now().time_since_epoch().count()};
};
// Key labels: serving_endpoint, worker.
using ScrapeCollector = KeyedCollector<ScrapeStats>;

// Every counter and gauge family of a fixed label set: X(member, type, name, help, label
// sets...). Each gets one series per combination of its label sets' values (one unlabelled
// series without), created at 0 with RelayMetrics and held in `member` (Series).
#define KVRELAY_FAMILIES(X)                                                                                          \
  X(open_streams_, Gauge, "kv_relay_open_streams", "WAN streams currently open", Rpc)                                \
  X(frames_sent_, Counter, "kv_relay_frames_sent_total", "Frames handed to WAN streams", FrameKind)                  \
  X(bytes_sent_, Counter, "kv_relay_bytes_sent_total",                                                               \
    "Serialized protobuf bytes of the frames handed to WAN streams", FrameKind)                                      \
  X(snapshot_image_bytes_, Gauge, "kv_relay_snapshot_image_bytes",                                                   \
    "Bytes of bucket-lane copies held for snapshots being sent")                                                     \
  X(pools_materialized_, Gauge, "kv_relay_pools_materialized", "Pools the relay currently publishes")                \
  X(pools_over_budget_, Gauge, "kv_relay_pools_over_budget",                                                         \
    "Pools left unmaterialized because the memory budget cannot hold them")                                          \
  X(memory_budget_bytes_, Gauge, "kv_relay_memory_budget_bytes", "The memory budget of all pools (0: no budget)")    \
  X(memory_charged_bytes_, Gauge, "kv_relay_memory_charged_bytes", "Bytes the materialized pools are charged")       \
  X(growth_refusals_, Counter, "kv_relay_pool_growth_refusals_total",                                                \
    "Re-layouts not made because the memory budget cannot hold the bigger layout")                                   \
  X(generations_created_, Counter, "kv_relay_generations_created_total", "Pool producer generations materialized")   \
  X(generations_retired_, Counter, "kv_relay_generations_retired_total",                                             \
    "Pool producer generations retired, withdrawn or fenced")                                                        \
  X(batches_, Counter, "kv_relay_ingest_batches_total", "KV event batches received, by ingest RPC and result",       \
    IngestRpc, BatchResult)                                                                                          \
  X(events_, Counter, "kv_relay_ingest_events_total", "KV events of accepted batches, by event kind and result",     \
    EventKindLabel, EventResultLabel)                                                                                \
  X(source_resets_, Counter, "kv_relay_source_resets_total", "KV sources whose blocks the relay dropped, by reason", \
    ResetReason)                                                                                                     \
  X(load_reports_, Counter, "kv_relay_load_reports_total", "Load reports received, by result", LoadReportResult)     \
  X(serving_load_reports_, Counter, "kv_relay_serving_load_reports_total",                                           \
    "Frontend and scheduler serving-load reports received, by source and outcome", ServingLoadSource,                \
    ServingLoadOutcome)                                                                                              \
  X(ingest_auth_failures_, Counter, "kv_relay_ingest_auth_failures_total",                                           \
    "Ingest calls refused UNAUTHENTICATED, by reason", AuthFailure)                                                  \
  X(ingest_limit_refusals_, Counter, "kv_relay_ingest_limit_refusals_total",                                         \
    "Ingest requests and streams refused by an ingest limit, by limit", IngestLimit)                                 \
  X(ingest_invalid_requests_, Counter, "kv_relay_ingest_invalid_requests_total",                                     \
    "Unary ingest requests refused INVALID_ARGUMENT: they do not parse, or by their structural check, by RPC",       \
    IngestCall)                                                                                                      \
  X(readiness_entries_, Gauge, "kv_relay_readiness_entries",                                                         \
    "Serving readiness entries of the current revision, by state", ReadinessLabel)                                   \
  X(mailbox_depth_, Gauge, "kv_relay_mailbox_depth",                                                                 \
    "Messages waiting in actor mailboxes, summed over the actors of a kind (sampled)", ActorKind)

// The unlabelled histograms: X(member, name, help, bucket bounds...).
#define KVRELAY_HISTOGRAMS(X)                                                                                        \
  X(snapshot_encode_, "kv_relay_snapshot_encode_seconds",                                                            \
    "Time spent encoding one snapshot image into CBI1 chunks for one stream", 0.0005, 0.001, 0.0025, 0.005, 0.01,    \
    0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)                                                                          \
  X(event_to_wire_, "kv_relay_event_to_wire_seconds",                                                                \
    "From the ingest receipt of a delta's oldest event to the delta handed to the streams", 0.0001, 0.00025, 0.0005, \
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)

// The handles of a family's series: T* without label sets, else indexed by the enumerators
// of each label set in turn (Series<Counter, A, B>: family[a][b]).
template <class T, class... LabelSets>
struct SeriesOf {
  using type = T*;
};
template <class T, class E, class... LabelSets>
struct SeriesOf<T, E, LabelSets...> {
  using type = PerLabel<typename SeriesOf<T, LabelSets...>::type, E>;
};
template <class T, class... LabelSets>
using Series = typename SeriesOf<T, LabelSets...>::type;

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
    frames_sent_[kind]->Increment();
    bytes_sent_[kind]->Increment(static_cast<double>(bytes));
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
  void set_memory(std::size_t pools_over_budget, std::uint64_t budget_bytes, std::uint64_t charged_bytes) {
    pools_over_budget_->Set(static_cast<double>(pools_over_budget));
    memory_budget_bytes_->Set(static_cast<double>(budget_bytes));
    memory_charged_bytes_->Set(static_cast<double>(charged_bytes));
  }
  void growth_refused() { growth_refusals_->Increment(); }
  PoolCollector& pools() { return *pools_; }
  SourceCollector& sources() { return *sources_; }
  ScrapeCollector& scrapes() { return *scrapes_; }

  // ---- ingest ----
  void batch(BatchResult result) { batches_[IngestRpc::kPublishKvEvents][result]->Increment(); }
  void events(const EventTally& tally);
  void source_reset(ResetReason reason) { source_resets_[reason]->Increment(); }
  void load_reports(LoadReportResult result, std::uint64_t count) {
    if (count > 0) load_reports_[result]->Increment(static_cast<double>(count));
  }
  // An outcome the relay answered with (REPORT_OUTCOME_APPLIED ... NO_POOL).
  void serving_load_report(ServingLoadSource source, ::kvrelay::ingest::v1::ReportOutcome outcome);
  void serving_load_report_invalid(ServingLoadSource source) {
    serving_load_reports_[source][ServingLoadOutcome::kInvalid]->Increment();
  }
  void ingest_auth_failed(AuthFailure reason) { ingest_auth_failures_[reason]->Increment(); }
  void ingest_limit_refused(IngestLimit limit) { ingest_limit_refusals_[limit]->Increment(); }
  void ingest_request_invalid(IngestCall call) { ingest_invalid_requests_[call]->Increment(); }

  // ---- readiness ----
  void set_readiness_entries(std::size_t ready, std::size_t unavailable, std::size_t unknown);

  // The sum over every live actor of `kind`: each actor adds its own change (MailboxSampler).
  prometheus::Gauge& mailbox_depth(ActorKind kind) { return *mailbox_depth_[kind]; }

 private:
  static double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::shared_ptr<PoolCollector> pools_;
  std::shared_ptr<SourceCollector> sources_;
  std::shared_ptr<ScrapeCollector> scrapes_;
  // Families whose label values are not all known up front (relay_metrics.cpp).
  prometheus::Family<prometheus::Gauge>* identity_ = nullptr;
  prometheus::Family<prometheus::Counter>* admissions_ = nullptr;
  prometheus::Family<prometheus::Counter>* terminations_ = nullptr;
#define KVRELAY_FAMILY_MEMBER(member, type, name, help, ...) \
  Series<prometheus::type __VA_OPT__(, ) __VA_ARGS__> member{};
  KVRELAY_FAMILIES(KVRELAY_FAMILY_MEMBER)
#undef KVRELAY_FAMILY_MEMBER
#define KVRELAY_HISTOGRAM_MEMBER(member, name, help, ...) prometheus::Histogram* member = nullptr;
  KVRELAY_HISTOGRAMS(KVRELAY_HISTOGRAM_MEMBER)
#undef KVRELAY_HISTOGRAM_MEMBER
};

// The mailbox gauge of `kind`, or nullptr without metrics (an actor run on its own).
inline prometheus::Gauge* mailbox_gauge(RelayMetrics* metrics, ActorKind kind) {
  return metrics != nullptr ? &metrics->mailbox_depth(kind) : nullptr;
}

}  // namespace kvrelay::metrics
