#include "core/ingest_limits.hpp"

#include <fmt/format.h>

#include <string_view>

namespace kvrelay::ingest_check {

namespace {

template <class Field>
using Repeated = google::protobuf::RepeatedPtrField<Field>;
using StringMap = google::protobuf::Map<std::string, std::string>;

std::string join(std::string_view parent, std::string_view child) {
  return parent.empty() ? std::string(child) : fmt::format("{}.{}", parent, child);
}

// `count` things of `field` against `max`, which flag `flag` sets.
Overrun count(std::size_t count, std::size_t max, Limit limit, std::string_view field, std::string_view what,
              std::string_view flag) {
  if (count <= max) return std::nullopt;
  return LimitExceeded{limit, fmt::format("{}: {} {} exceed {} ({})", field, count, what, flag, max)};
}

Overrun string(const std::string& value, std::string_view field, const Limits& limits) {
  return count(value.size(), limits.max_string_bytes, Limit::kStringBytes, field, "bytes", "--max-ingest-string-bytes");
}

Overrun strings(const Repeated<std::string>& values, std::string_view field, const Limits& limits) {
  for (int i = 0; i < values.size(); ++i) {
    if (auto over = string(values[i], fmt::format("{}[{}]", field, i), limits)) return over;
  }
  return std::nullopt;
}

// A map's keys, then its values (named by their key, which is within the limit by then).
Overrun strings(const StringMap& map, std::string_view field, const Limits& limits) {
  for (const auto& [key, value] : map) {
    if (auto over = string(key, fmt::format("{} (a key)", field), limits)) return over;
    if (auto over = string(value, fmt::format("{}[{}]", field, key), limits)) return over;
  }
  return std::nullopt;
}

Overrun endpoint(const ingest_v1::EndpointRef& ref, std::string_view field, const Limits& limits) {
  if (auto over = string(ref.namespace_(), join(field, "namespace"), limits)) return over;
  if (auto over = string(ref.component(), join(field, "component"), limits)) return over;
  return string(ref.endpoint(), join(field, "endpoint"), limits);
}

Overrun card(const ingest_v1::ModelCard& card, std::string_view field, const Limits& limits) {
  if (auto over = string(card.display_name(), join(field, "display_name"), limits)) return over;
  if (auto over = string(card.source_path(), join(field, "source_path"), limits)) return over;
  if (auto over = strings(card.aliases(), join(field, "aliases"), limits)) return over;
  if (auto over = strings(card.semantics_identity(), join(field, "semantics_identity"), limits)) return over;
  if (auto over = strings(card.routing_scope_identity(), join(field, "routing_scope_identity"), limits)) return over;
  return endpoint(card.runtime_config().kv_state_endpoint(), join(field, "runtime_config.kv_state_endpoint"), limits);
}

Overrun adapters(const Repeated<ingest_v1::AdapterCard>& adapters, std::string_view field, const Limits& limits) {
  for (int i = 0; i < adapters.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", field, i);
    if (auto over = string(adapters[i].served_name(), join(at, "served_name"), limits)) return over;
    if (auto over = string(adapters[i].lora_name(), join(at, "lora_name"), limits)) return over;
  }
  return std::nullopt;
}

Overrun kv_sources(const Repeated<ingest_v1::KvSource>& sources, std::string_view field, const Limits& limits) {
  for (int i = 0; i < sources.size(); ++i) {
    const auto& zmq = sources[i].zmq();
    const std::string at = fmt::format("{}[{}].zmq", field, i);
    if (auto over = string(zmq.endpoint(), join(at, "endpoint"), limits)) return over;
    if (auto over = string(zmq.topic(), join(at, "topic"), limits)) return over;
    if (auto over = string(zmq.replay_endpoint(), join(at, "replay_endpoint"), limits)) return over;
  }
  return std::nullopt;
}

// A PutWorkerRequest or a topology file's WorkerSpec: the same worker fields.
template <class Worker>
Overrun worker(const Worker& worker, std::string_view field, const Limits& limits) {
  if (auto over = card(worker.card(), join(field, "card"), limits)) return over;
  if (auto over = adapters(worker.adapters(), join(field, "adapters"), limits)) return over;
  if (auto over = kv_sources(worker.kv_sources(), join(field, "kv_sources"), limits)) return over;
  return string(worker.engine_metrics().url(), join(field, "engine_metrics.url"), limits);
}

Overrun stored(const ingest_v1::BlocksStored& stored, std::string_view field, const Limits& limits) {
  if (auto over = count(static_cast<std::size_t>(stored.blocks_size()), limits.max_event_blocks, Limit::kEventBlocks,
                        join(field, "blocks"), "blocks", "--max-event-blocks")) {
    return over;
  }
  std::size_t tokens = 0;
  for (const auto& block : stored.blocks()) tokens += static_cast<std::size_t>(block.tokens().token_ids_size());
  if (auto over =
          count(tokens, limits.max_event_tokens, Limit::kEventTokens, field, "token ids", "--max-event-tokens")) {
    return over;
  }
  if (auto over = string(stored.lora_name(), join(field, "lora_name"), limits)) return over;
  return string(stored.cache_namespace(), join(field, "cache_namespace"), limits);
}

Overrun event(const ingest_v1::KvEvent& event, std::string_view field, const Limits& limits) {
  if (event.has_stored()) return stored(event.stored(), join(field, "stored"), limits);
  if (!event.has_removed()) return std::nullopt;
  return count(static_cast<std::size_t>(event.removed().block_hashes_size()), limits.max_event_blocks,
               Limit::kEventBlocks, join(field, "removed.block_hashes"), "blocks", "--max-event-blocks");
}

}  // namespace

Overrun oversize(const ingest_v1::PutWorkerRequest& request, const Limits& limits) {
  if (auto over = endpoint(request.endpoint(), "endpoint", limits)) return over;
  return worker(request, "", limits);
}

Overrun oversize(const ingest_v1::RemoveWorkerRequest& request, const Limits& limits) {
  return endpoint(request.endpoint(), "endpoint", limits);
}

Overrun oversize(const ingest_v1::SetAvailabilityRequest& request, const Limits& limits) {
  return endpoint(request.endpoint(), "endpoint", limits);
}

Overrun oversize(const ingest_v1::KvEventBatch& batch, const Limits& limits) {
  if (auto over = count(static_cast<std::size_t>(batch.events_size()), limits.max_batch_events, Limit::kBatchEvents,
                        "events", "events", "--max-batch-events")) {
    return over;
  }
  if (auto over = endpoint(batch.endpoint(), "endpoint", limits)) return over;
  for (int i = 0; i < batch.events_size(); ++i) {
    if (auto over = event(batch.events(i), fmt::format("events[{}]", i), limits)) return over;
  }
  return std::nullopt;
}

Overrun oversize(const ingest_v1::LoadReport& report, const Limits& limits) {
  return endpoint(report.endpoint(), "endpoint", limits);
}

Overrun oversize(const ingest_v1::FrontendLoadReport& report, const Limits& limits) {
  if (auto over = string(report.namespace_(), "namespace", limits)) return over;
  for (int m = 0; m < report.models_size(); ++m) {
    const std::string at = fmt::format("models[{}]", m);
    if (auto over = string(report.models(m).canonical_model_id(), join(at, "canonical_model_id"), limits)) return over;
    if (auto over = strings(report.models(m).aliases(), join(at, "aliases"), limits)) return over;
  }
  return std::nullopt;
}

Overrun oversize(const ingest_v1::SchedulerLoadReport& report, const Limits& limits) {
  if (auto over = endpoint(report.endpoint(), "endpoint", limits)) return over;
  return string(report.replica_group(), "replica_group", limits);
}

Overrun oversize(const ingest_v1::SetFrontendsRequest& request, const Limits& limits) {
  return string(request.namespace_(), "namespace", limits);
}

Overrun oversize(const ingest_v1::SetSchedulersRequest& request, const Limits& limits) {
  return endpoint(request.endpoint(), "endpoint", limits);
}

Overrun oversize(const ingest_v1::TopologyFile& file, const Limits& limits) {
  for (int e = 0; e < file.endpoints_size(); ++e) {
    const auto& spec = file.endpoints(e);
    const std::string at = fmt::format("endpoints[{}]", e);
    if (auto over = endpoint(spec.endpoint(), join(at, "endpoint"), limits)) return over;
    for (int w = 0; w < spec.workers_size(); ++w) {
      if (auto over = worker(spec.workers(w), fmt::format("{}.workers[{}]", at, w), limits)) return over;
    }
  }
  for (int f = 0; f < file.frontends_size(); ++f) {
    if (auto over = string(file.frontends(f).namespace_(), fmt::format("frontends[{}].namespace", f), limits)) {
      return over;
    }
  }
  return std::nullopt;
}

}  // namespace kvrelay::ingest_check
