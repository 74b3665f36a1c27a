#include "metrics/relay_metrics.hpp"

#include <prometheus/metric_family.h>

#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::metrics {

namespace {

namespace v1 = dynamo::kvrelay::v1;
namespace ingest_v1 = ::kvrelay::ingest::v1;
using prometheus::Counter;
using prometheus::Gauge;

constexpr std::array<std::string_view, kRpcCount> kRpcNames = {
    "WatchKvPoolCatalog", "SubscribeKvPool", "SubscribeServingReadiness", "SubscribeKvPoolLoad",
    "SubscribeServingLoad"};
constexpr std::array<std::string_view, kFrameKindCount> kFrameKindNames = {
    "snapshot_chunk", "delta", "heartbeat", "catalog", "readiness", "load", "serving_load"};
constexpr std::array<std::string_view, kActorKindCount> kActorKindNames = {
    "membership", "catalog",      "topology_projector", "load_window",     "snapshot_encoders",
    "pool_publisher", "pool_stream", "catalog_stream",  "readiness_stream", "load_stream"};
constexpr std::array<std::string_view, kBatchResultCount> kBatchResultNames = {"accepted", "malformed",
                                                                                "unknown_source", "stale_sequence"};
constexpr std::array<std::string_view, kEventKindCount> kEventKindNames = {"stored", "removed", "cleared"};
constexpr std::array<std::string_view, kEventResultCount> kEventResultNames = {
    "accepted", "ignored", "parent_block_not_found", "invalid_block_sequence", "ownership_degree_overflow",
    "indexer_invariant_violation", "invalid_content"};
constexpr std::array<std::string_view, kResetReasonCount> kResetReasonNames = {
    "epoch_changed", "sequence_gap", "source_dropped", "worker_removed", "new_generation"};
constexpr std::array<std::string_view, kLoadReportResultCount> kLoadReportResultNames = {"accepted", "malformed",
                                                                                          "unknown_rank"};

// Admission refusals known up front; any other result gets its series on first use.
constexpr std::array<std::string_view, 8> kAdmissionResults = {
    "admitted",          "draining",           "CONTRACT_MISMATCH", "INVALID_REQUEST",
    "UNSUPPORTED_FEATURE", "POOL_NOT_FOUND",   "PRODUCER_CHANGED",  "RESOURCE_LIMIT"};

constexpr std::string_view kReasonPrefix = "RELAY_ERROR_REASON_";

std::string without_prefix(RelayErrorReason reason) {
  std::string_view name = reason_name(reason);
  if (name.starts_with(kReasonPrefix)) name.remove_prefix(kReasonPrefix.size());
  return std::string(name);
}

// Every RelayErrorReason but UNSPECIFIED, without the prefix.
std::vector<std::string> reason_labels() {
  std::vector<std::string> labels;
  const auto* descriptor = v1::RelayErrorReason_descriptor();
  for (int i = 0; i < descriptor->value_count(); ++i) {
    const auto reason = static_cast<RelayErrorReason>(descriptor->value(i)->number());
    if (reason != v1::RELAY_ERROR_REASON_UNSPECIFIED) labels.push_back(without_prefix(reason));
  }
  return labels;
}

std::string_view code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kUnimplemented: return "unimplemented";
  }
  return "unknown";
}

std::size_t event_result_index(const EventResult& result) {
  if (result.disposition == EventDisposition::kApplied) return 0;  // CapacityExhausted included
  if (result.disposition == EventDisposition::kIgnored) return 1;
  if (!result.error) return 6;
  switch (*result.error) {
    case EventError::kParentBlockNotFound: return 2;
    case EventError::kInvalidBlockSequence: return 3;
    case EventError::kOwnershipDegreeOverflow: return 4;
    case EventError::kIndexerInvariantViolation: return 5;
    case EventError::kCapacityExhausted: break;
  }
  return 6;
}

template <class T, std::size_t N, class Builder>
std::array<T*, N> series(Builder& builder, prometheus::Registry& registry, const std::string& label,
                         const std::array<std::string_view, N>& values) {
  auto& family = builder.Register(registry);
  std::array<T*, N> handles{};
  for (std::size_t i = 0; i < N; ++i) handles[i] = &family.Add({{label, std::string(values[i])}});
  return handles;
}

}  // namespace

// ---- labels ----

std::string termination_reason(const RpcStatus& status, bool draining) {
  const bool drained = draining && status.reason == v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE;
  if (status.reason && !drained) return without_prefix(*status.reason);
  if (status.ok() || draining) return "clean_end";
  if (status.code == StatusCode::kCancelled) return "client_cancel";
  return std::string(code_name(status.code));
}

std::string_view rpc_name(Rpc rpc) { return kRpcNames[static_cast<std::size_t>(rpc)]; }

std::string refusal_result(const RpcStatus& status) {
  if (status.reason) return without_prefix(*status.reason);
  return std::string(code_name(status.code));
}

void EventTally::add(const ingest_v1::KvEvent& event, const EventResult& result) {
  std::size_t kind = 0;
  switch (event.data_case()) {
    case ingest_v1::KvEvent::kStored: kind = 0; break;
    case ingest_v1::KvEvent::kRemoved: kind = 1; break;
    case ingest_v1::KvEvent::kCleared: kind = 2; break;
    case ingest_v1::KvEvent::DATA_NOT_SET: return;  // a malformed batch never gets this far
  }
  ++counts_[kind][event_result_index(result)];
}

// ---- per-pool series ----

void PoolCollector::publish(const std::string& pool, std::shared_ptr<const PoolStats> stats) {
  std::lock_guard lock(mutex_);
  pools_[pool] = std::move(stats);
}

void PoolCollector::withdraw(const std::string& pool) {
  std::lock_guard lock(mutex_);
  pools_.erase(pool);
}

namespace {

struct PoolFamily {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  double (*value)(const PoolStats&);
};

template <class T>
double load(const std::atomic<T>& value) {
  return static_cast<double>(value.load(std::memory_order_relaxed));
}

double load_factor(const PoolStats& s) {
  const double slots = load(s.bucket_count) * 4;  // ckf::kSlotsPerBucket
  return slots > 0 ? load(s.occupied_slots) / slots : 0;
}

const std::array<PoolFamily, 8> kPoolFamilies = {{
    {"kv_relay_pool_sequence", "Publication sequence of the pool's current generation", prometheus::MetricType::Gauge,
     [](const PoolStats& s) { return load(s.sequence); }},
    {"kv_relay_pool_unique_blocks", "Distinct KV blocks the pool's filter holds", prometheus::MetricType::Gauge,
     [](const PoolStats& s) { return load(s.unique_blocks); }},
    {"kv_relay_pool_load_factor", "Occupied filter slots / (buckets * 4)", prometheus::MetricType::Gauge, load_factor},
    {"kv_relay_pool_capacity_failures_total",
     "Blocks the pool's filter could not place (restarts at 0 with each generation)", prometheus::MetricType::Counter,
     [](const PoolStats& s) { return load(s.capacity_failures); }},
    {"kv_relay_pool_subscribers", "Open SubscribeKvPool streams of the pool", prometheus::MetricType::Gauge,
     [](const PoolStats& s) { return load(s.subscribers); }},
    {"kv_relay_pool_active_sources", "KV sources declared by the pool's workers", prometheus::MetricType::Gauge,
     [](const PoolStats& s) { return load(s.active_sources); }},
    {"kv_relay_pool_load_observed_ranks", "Ranks with a load report in the current window",
     prometheus::MetricType::Gauge, [](const PoolStats& s) { return load(s.observed_ranks); }},
    {"kv_relay_pool_load_expected_ranks", "Ranks the pool's workers declare", prometheus::MetricType::Gauge,
     [](const PoolStats& s) { return load(s.expected_ranks); }},
}};

}  // namespace

std::vector<prometheus::MetricFamily> PoolCollector::Collect() const {
  std::map<std::string, std::shared_ptr<const PoolStats>> pools;
  {
    std::lock_guard lock(mutex_);
    pools = pools_;
  }
  std::vector<prometheus::MetricFamily> families;
  if (pools.empty()) return families;
  for (const PoolFamily& spec : kPoolFamilies) {
    prometheus::MetricFamily family{spec.name, spec.help, spec.type, {}};
    for (const auto& [pool, stats] : pools) {
      prometheus::ClientMetric metric;
      metric.label.push_back({"pool", pool});
      const double value = spec.value(*stats);
      if (spec.type == prometheus::MetricType::Counter) {
        metric.counter.value = value;
      } else {
        metric.gauge.value = value;
      }
      family.metric.push_back(std::move(metric));
    }
    families.push_back(std::move(family));
  }
  return families;
}

// ---- the registry ----

RelayMetrics::RelayMetrics() {
  auto& registry = *registry_;
  prometheus::BuildGauge()
      .Name("kv_relay_build_info")
      .Help("kv-relay build information (always 1)")
      .Register(registry)
      .Add({{"version", KVRELAY_VERSION}, {"revision", KVRELAY_REVISION}})
      .Set(1);
  prometheus::BuildGauge()
      .Name("kv_relay_process_start_time_seconds")
      .Help("When this relay started, in seconds since the Unix epoch")
      .Register(registry)
      .Add({})
      .SetToCurrentTime();
  identity_ = &prometheus::BuildGauge()
                   .Name("kv_relay_identity_info")
                   .Help("The relay's identity: dc_id, relay incarnation and instance id (always 1)")
                   .Register(registry);

  admissions_ = &prometheus::BuildCounter()
                     .Name("kv_relay_stream_admissions_total")
                     .Help("WAN stream calls by result: admitted, or why they were refused")
                     .Register(registry);
  terminations_ = &prometheus::BuildCounter()
                       .Name("kv_relay_stream_terminations_total")
                       .Help("Admitted WAN streams that ended, by reason")
                       .Register(registry);
  auto& open = prometheus::BuildGauge()
                   .Name("kv_relay_open_streams")
                   .Help("WAN streams currently open")
                   .Register(registry);
  const auto reasons = reason_labels();
  for (std::size_t rpc = 0; rpc < kRpcCount; ++rpc) {
    const std::string name(kRpcNames[rpc]);
    open_streams_[rpc] = &open.Add({{"rpc", name}});
    for (std::string_view result : kAdmissionResults) {
      admissions_->Add({{"rpc", name}, {"result", std::string(result)}});
    }
    for (const std::string& reason : reasons) terminations_->Add({{"rpc", name}, {"reason", reason}});
    terminations_->Add({{"rpc", name}, {"reason", "client_cancel"}});
    terminations_->Add({{"rpc", name}, {"reason", "clean_end"}});
  }

  auto frames = prometheus::BuildCounter().Name("kv_relay_frames_sent_total").Help("Frames handed to WAN streams");
  frames_sent_ = series<Counter>(frames, registry, "kind", kFrameKindNames);
  auto bytes = prometheus::BuildCounter()
                   .Name("kv_relay_bytes_sent_total")
                   .Help("Serialized protobuf bytes of the frames handed to WAN streams");
  bytes_sent_ = series<Counter>(bytes, registry, "kind", kFrameKindNames);

  snapshot_encode_ = &prometheus::BuildHistogram()
                          .Name("kv_relay_snapshot_encode_seconds")
                          .Help("CPU time to encode one snapshot image into CBI1 chunks for one stream")
                          .Register(registry)
                          .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                           0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
  event_to_wire_ = &prometheus::BuildHistogram()
                        .Name("kv_relay_event_to_wire_seconds")
                        .Help("From the ingest receipt of a delta's oldest event to the delta handed to the streams")
                        .Register(registry)
                        .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005,
                                                                         0.01, 0.025, 0.05, 0.1, 0.25, 1});
  snapshot_image_bytes_ = &prometheus::BuildGauge()
                               .Name("kv_relay_snapshot_image_bytes")
                               .Help("Bytes of bucket-lane copies held for snapshots being sent")
                               .Register(registry)
                               .Add({});
  pools_materialized_ = &prometheus::BuildGauge()
                             .Name("kv_relay_pools_materialized")
                             .Help("Pools the relay currently publishes")
                             .Register(registry)
                             .Add({});
  generations_created_ = &prometheus::BuildCounter()
                              .Name("kv_relay_generations_created_total")
                              .Help("Pool producer generations materialized")
                              .Register(registry)
                              .Add({});
  generations_retired_ = &prometheus::BuildCounter()
                              .Name("kv_relay_generations_retired_total")
                              .Help("Pool producer generations retired, withdrawn or fenced")
                              .Register(registry)
                              .Add({});

  auto& batches = prometheus::BuildCounter()
                      .Name("kv_relay_ingest_batches_total")
                      .Help("KV event batches received, by ingest RPC and result")
                      .Register(registry);
  for (std::size_t i = 0; i < kBatchResultCount; ++i) {
    batches_[i] = &batches.Add({{"kind", "PublishKvEvents"}, {"result", std::string(kBatchResultNames[i])}});
  }
  auto& events = prometheus::BuildCounter()
                     .Name("kv_relay_ingest_events_total")
                     .Help("KV events of accepted batches, by event kind and result")
                     .Register(registry);
  for (std::size_t k = 0; k < kEventKindCount; ++k) {
    for (std::size_t r = 0; r < kEventResultCount; ++r) {
      events_[k][r] =
          &events.Add({{"kind", std::string(kEventKindNames[k])}, {"result", std::string(kEventResultNames[r])}});
    }
  }
  auto resets = prometheus::BuildCounter()
                    .Name("kv_relay_source_resets_total")
                    .Help("KV sources whose blocks the relay dropped, by reason");
  source_resets_ = series<Counter>(resets, registry, "reason", kResetReasonNames);
  auto loads = prometheus::BuildCounter().Name("kv_relay_load_reports_total").Help("Load reports received, by result");
  load_reports_ = series<Counter>(loads, registry, "result", kLoadReportResultNames);

  auto readiness = prometheus::BuildGauge()
                       .Name("kv_relay_readiness_entries")
                       .Help("Serving readiness entries of the current revision, by state");
  readiness_entries_ = series<Gauge>(readiness, registry, "state",
                                     std::array<std::string_view, 3>{"READY", "UNAVAILABLE", "UNKNOWN"});
  auto mailbox = prometheus::BuildGauge()
                     .Name("kv_relay_mailbox_depth")
                     .Help("Messages waiting in actor mailboxes, summed over the actors of a kind (sampled)");
  mailbox_depth_ = series<Gauge>(mailbox, registry, "actor_kind", kActorKindNames);
}

std::vector<std::weak_ptr<prometheus::Collectable>> RelayMetrics::collectables() const {
  return {registry_, pools_};
}

void RelayMetrics::set_identity(std::uint64_t dc_id, std::uint64_t incarnation, std::uint64_t instance_id) {
  identity_
      ->Add({{"dc_id", std::to_string(dc_id)},
             {"incarnation", std::to_string(incarnation)},
             {"instance_id", std::to_string(instance_id)}})
      .Set(1);
}

void RelayMetrics::stream_admitted(Rpc rpc) {
  // Family::Add returns the existing series; admissions are rare enough for its lock.
  admissions_->Add({{"rpc", std::string(kRpcNames[index(rpc)])}, {"result", "admitted"}}).Increment();
  open_streams_[index(rpc)]->Increment();
}

void RelayMetrics::stream_refused(Rpc rpc, const std::string& result) {
  admissions_->Add({{"rpc", std::string(kRpcNames[index(rpc)])}, {"result", result}}).Increment();
}

void RelayMetrics::stream_ended(Rpc rpc, const std::string& reason) {
  terminations_->Add({{"rpc", std::string(kRpcNames[index(rpc)])}, {"reason", reason}}).Increment();
  open_streams_[index(rpc)]->Decrement();
}

void RelayMetrics::events(const EventTally& tally) {
  for (std::size_t k = 0; k < kEventKindCount; ++k) {
    for (std::size_t r = 0; r < kEventResultCount; ++r) {
      if (tally.counts_[k][r] > 0) events_[k][r]->Increment(tally.counts_[k][r]);
    }
  }
}

void RelayMetrics::set_readiness_entries(std::size_t ready, std::size_t unavailable, std::size_t unknown) {
  readiness_entries_[0]->Set(static_cast<double>(ready));
  readiness_entries_[1]->Set(static_cast<double>(unavailable));
  readiness_entries_[2]->Set(static_cast<double>(unknown));
}

}  // namespace kvrelay::metrics
