#include "metrics/relay_metrics.hpp"

#include <prometheus/metric_family.h>

#include <array>

#include "core/build_info.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::metrics {

namespace {

namespace v1 = dynamo::kvrelay::v1;
namespace ingest_v1 = ::kvrelay::ingest::v1;

// Admission refusals known up front; any other result gets its series on first use.
constexpr std::array<std::string_view, 8> kAdmissionResults = {
    "admitted",       "draining",         "CONTRACT_MISMATCH", "INVALID_REQUEST", "UNSUPPORTED_FEATURE",
    "POOL_NOT_FOUND", "PRODUCER_CHANGED", "RESOURCE_LIMIT"};

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
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kResourceExhausted:
      return "resource_exhausted";
    case StatusCode::kFailedPrecondition:
      return "failed_precondition";
    case StatusCode::kInternal:
      return "internal";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kUnimplemented:
      return "unimplemented";
  }
  return "unknown";
}

// The result label of an event: how it was applied, or why it was rejected.
EventResultLabel result_label(const EventResult& result) {
  switch (result.disposition) {
    case EventDisposition::kApplied:
      return EventResultLabel::kAccepted;  // CapacityExhausted included
    case EventDisposition::kIgnored:
      return EventResultLabel::kIgnored;
    case EventDisposition::kRejected:
      break;
  }
  if (!result.error) return EventResultLabel::kInvalidContent;
  switch (*result.error) {
    case EventError::kParentBlockNotFound:
      return EventResultLabel::kParentBlockNotFound;
    case EventError::kInvalidBlockSequence:
      return EventResultLabel::kInvalidBlockSequence;
    case EventError::kOwnershipDegreeOverflow:
      return EventResultLabel::kOwnershipDegreeOverflow;
    case EventError::kIndexerInvariantViolation:
      return EventResultLabel::kIndexerInvariantViolation;
    case EventError::kPoolFull:
      return EventResultLabel::kPoolFull;
    case EventError::kCapacityExhausted:
      break;  // marks an applied event, never a rejection
  }
  return EventResultLabel::kInvalidContent;
}

// The labels of an admissions or terminations series: the RPC, and `key`="value".
prometheus::Labels rpc_labels(std::string_view rpc, const char* key, std::string value) {
  return {{std::string(LabelSet<Rpc>::key), std::string(rpc)}, {key, std::move(value)}};
}

// Creates the series of `family` for every combination of the label sets of `handles`
// (Series), each with `labels` plus its own label values.
template <class T>
void create_series(prometheus::Family<T>& family, const prometheus::Labels& labels, T*& handle) {
  handle = &family.Add(labels);
}
template <class T, class Element, class E>
void create_series(prometheus::Family<T>& family, prometheus::Labels labels, PerLabel<Element, E>& handles) {
  for (std::size_t i = 0; i < kLabelCount<E>; ++i) {
    labels[std::string(LabelSet<E>::key)] = LabelSet<E>::names[i];
    create_series(family, labels, handles.elements[i]);
  }
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

std::string refusal_result(const RpcStatus& status) {
  if (status.reason) return without_prefix(*status.reason);
  return std::string(code_name(status.code));
}

void EventTally::add(const ingest_v1::KvEvent& event, const EventResult& result) {
  EventKindLabel kind{};
  switch (event.data_case()) {
    case ingest_v1::KvEvent::kStored:
      kind = EventKindLabel::kStored;
      break;
    case ingest_v1::KvEvent::kRemoved:
      kind = EventKindLabel::kRemoved;
      break;
    case ingest_v1::KvEvent::kCleared:
      kind = EventKindLabel::kCleared;
      break;
    case ingest_v1::KvEvent::DATA_NOT_SET:
      return;  // a malformed batch never gets this far
  }
  ++counts_[kind][result_label(result)];
}

// ---- keyed series: pools, engine sources, engine scrapes ----

namespace {

template <class T>
double load(const std::atomic<T>& value) {
  return static_cast<double>(value.load(std::memory_order_relaxed));
}

double load_factor(const PoolStats& s, std::size_t) {
  const double slots = load(s.bucket_count) * 4;  // ckf::kSlotsPerBucket
  return slots > 0 ? load(s.occupied_slots) / slots : 0;
}

template <class E>
std::span<const std::string_view> values_of() {
  return LabelSet<E>::names;
}

constexpr auto kGauge = prometheus::MetricType::Gauge;
constexpr auto kCounter = prometheus::MetricType::Counter;

const std::array<KeyedFamily<PoolStats>, 14> kPoolFamilies = {{
    {"kv_relay_pool_sequence", "Publication sequence of the pool's current generation", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.sequence); }},
    {"kv_relay_pool_unique_blocks", "Distinct KV blocks the pool holds, in its filter or omitted", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.unique_blocks); }},
    {"kv_relay_pool_load_factor", "Occupied filter slots / (buckets * 4)", kGauge, load_factor},
    {"kv_relay_pool_capacity_failures_total",
     "Placements the pool's filter failed (a re-layout places them again; restarts at 0 when the pool is rebuilt)",
     kCounter, [](const PoolStats& s, std::size_t) { return load(s.capacity_failures); }},
    {"kv_relay_pool_omitted_blocks", "Live blocks the pool's filter does not hold (capacity omissions in force)",
     kGauge, [](const PoolStats& s, std::size_t) { return load(s.omitted_blocks); }},
    {"kv_relay_pool_index_bytes", "Bytes of the pool's owner and lineage tables (the filter not included)", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.index_bytes); }},
    {"kv_relay_pool_publication_window_bytes",
     "Bytes of the pool's touched-bucket bitmap and its list of buckets touched since the last publication", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.publication_bytes); }},
    {"kv_relay_pool_relayouts_total", "Re-layouts of the pool into more buckets", kCounter,
     [](const PoolStats& s, std::size_t) { return load(s.relayouts); }},
    {"kv_relay_pool_bucket_count", "Buckets of the pool's current layout", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.bucket_count); }},
    {"kv_relay_pool_subscribers", "Open SubscribeKvPool streams of the pool", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.subscribers); }},
    {"kv_relay_pool_publication_gap_seconds",
     "Shortest gap between the pool's deltas: the publication delay, or streams / the frame budget when longer", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.publication_gap_ns) * 1e-9; }},
    {"kv_relay_pool_active_sources", "Active KV sources of the pool's workers", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.active_sources); }},
    {"kv_relay_pool_load_observed_ranks", "Declared ranks with a load report", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.observed_ranks); }},
    {"kv_relay_pool_load_expected_ranks", "Ranks the pool's workers declare", kGauge,
     [](const PoolStats& s, std::size_t) { return load(s.expected_ranks); }},
}};

const std::array<KeyedFamily<SourceStats>, 6> kSourceFamilies = {{
    {"kv_relay_engine_source_connected", "1 while the engine source's SUB socket is connected to its publisher", kGauge,
     [](const SourceStats& s, std::size_t) { return load(s.connected); }},
    {"kv_relay_engine_source_batches_total", "Engine batches received by the source, by result", kCounter,
     [](const SourceStats& s, std::size_t i) { return load(s.batches.elements[i]); }, "result",
     values_of<EngineBatchResult>()},
    {"kv_relay_engine_source_events_total", "Events of the source's decoded batches, by result", kCounter,
     [](const SourceStats& s, std::size_t i) { return load(s.events.elements[i]); }, "result",
     values_of<EngineEventResult>()},
    {"kv_relay_engine_source_gaps_total", "Gaps in the engine's batch seq", kCounter,
     [](const SourceStats& s, std::size_t) { return load(s.gaps); }},
    {"kv_relay_engine_source_replays_total", "Replay requests sent to the engine's replay socket", kCounter,
     [](const SourceStats& s, std::size_t) { return load(s.replays); }},
    {"kv_relay_engine_source_resets_total", "Cold resets of the source, by cause", kCounter,
     [](const SourceStats& s, std::size_t i) { return load(s.resets.elements[i]); }, "cause",
     values_of<EngineResetCause>()},
}};

double scrape_age_seconds(const ScrapeStats& s, std::size_t) {
  const std::int64_t last = s.last_success_ns.load(std::memory_order_relaxed);
  const std::int64_t since = last != 0 ? last : s.started_ns.load(std::memory_order_relaxed);
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::chrono::duration<double>(std::chrono::nanoseconds(now - since)).count();
}

constexpr std::array<std::string_view, 2> kScrapeResults = {"ok", "failed"};

const std::array<KeyedFamily<ScrapeStats>, 2> kScrapeFamilies = {{
    {"kv_relay_engine_scrapes_total", "Scrapes of the worker's engine metrics page, by result", kCounter,
     [](const ScrapeStats& s, std::size_t i) { return load(i == 0 ? s.succeeded : s.failed); }, "result",
     kScrapeResults},
    {"kv_relay_engine_scrape_age_seconds",
     "Seconds since the last good scrape of the worker's engine metrics (since the scraper started, if none)", kGauge,
     scrape_age_seconds},
}};

}  // namespace

// ---- the registry ----

RelayMetrics::RelayMetrics()
    : pools_(std::make_shared<PoolCollector>(std::vector<std::string>{"pool"}, kPoolFamilies)),
      sources_(std::make_shared<SourceCollector>(std::vector<std::string>{"serving_endpoint", "worker", "dp_rank"},
                                                 kSourceFamilies)),
      scrapes_(
          std::make_shared<ScrapeCollector>(std::vector<std::string>{"serving_endpoint", "worker"}, kScrapeFamilies)) {
  auto& registry = *registry_;
  prometheus::BuildGauge()
      .Name("kv_relay_build_info")
      .Help("kv-relay build information (always 1)")
      .Register(registry)
      .Add({{"version", std::string(build_version())}, {"revision", std::string(build_revision())}})
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
  auto endings = reason_labels();
  endings.insert(endings.end(), {"client_cancel", "clean_end"});
  for (std::string_view rpc : LabelSet<Rpc>::names) {
    for (std::string_view result : kAdmissionResults) admissions_->Add(rpc_labels(rpc, "result", std::string(result)));
    for (const std::string& reason : endings) terminations_->Add(rpc_labels(rpc, "reason", reason));
  }

#define KVRELAY_REGISTER_FAMILY(member, type, name, help, ...) \
  create_series(prometheus::Build##type().Name(name).Help(help).Register(registry), {}, member);
  KVRELAY_FAMILIES(KVRELAY_REGISTER_FAMILY)
#undef KVRELAY_REGISTER_FAMILY
#define KVRELAY_REGISTER_HISTOGRAM(member, name, help, ...)                            \
  member = &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add( \
      {}, prometheus::Histogram::BucketBoundaries{__VA_ARGS__});
  KVRELAY_HISTOGRAMS(KVRELAY_REGISTER_HISTOGRAM)
#undef KVRELAY_REGISTER_HISTOGRAM
}

std::vector<std::weak_ptr<prometheus::Collectable>> RelayMetrics::collectables() const {
  return {registry_, pools_, sources_, scrapes_};
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
  admissions_->Add(rpc_labels(label(rpc), "result", "admitted")).Increment();
  open_streams_[rpc]->Increment();
}

void RelayMetrics::stream_refused(Rpc rpc, const std::string& result) {
  admissions_->Add(rpc_labels(label(rpc), "result", result)).Increment();
}

void RelayMetrics::stream_ended(Rpc rpc, const std::string& reason) {
  terminations_->Add(rpc_labels(label(rpc), "reason", reason)).Increment();
  open_streams_[rpc]->Decrement();
}

void RelayMetrics::serving_load_report(ServingLoadSource source, ::kvrelay::ingest::v1::ReportOutcome outcome) {
  // ReportOutcome numbers its values from 1 in the order ServingLoadOutcome lists them.
  const int index = static_cast<int>(outcome) - 1;
  if (index < 0 || index >= static_cast<int>(ServingLoadOutcome::kInvalid)) return;
  serving_load_reports_[source][static_cast<ServingLoadOutcome>(index)]->Increment();
}

void RelayMetrics::events(const EventTally& tally) {
  for (std::size_t kind = 0; kind < kLabelCount<EventKindLabel>; ++kind) {
    for (std::size_t result = 0; result < kLabelCount<EventResultLabel>; ++result) {
      const std::uint32_t count = tally.counts_.elements[kind].elements[result];
      if (count > 0) events_.elements[kind].elements[result]->Increment(count);
    }
  }
}

void RelayMetrics::set_readiness_entries(std::size_t ready, std::size_t unavailable, std::size_t unknown) {
  readiness_entries_[ReadinessLabel::kReady]->Set(static_cast<double>(ready));
  readiness_entries_[ReadinessLabel::kUnavailable]->Set(static_cast<double>(unavailable));
  readiness_entries_[ReadinessLabel::kUnknown]->Set(static_cast<double>(unknown));
}

}  // namespace kvrelay::metrics
