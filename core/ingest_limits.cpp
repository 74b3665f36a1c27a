#include "core/ingest_limits.hpp"

#include <fmt/format.h>

#include <string_view>

namespace kvrelay::ingest_check {

namespace {

template <class Field>
using Repeated = google::protobuf::RepeatedPtrField<Field>;
using StringMap = google::protobuf::Map<std::string, std::string>;

// A field's path ("endpoints[2].workers[0].card.aliases[1]"), spelled out only in the message
// of a limit that was exceeded: the checks run on every ingest message, every event of every
// batch, and almost never fail. A Field refers to its parent, so it lives no longer than it.
class Field {
 public:
  Field(const char* name) : name_(name) {}  // implicit: a top-level field is written as its name
  Field operator/(std::string_view child) const { return {this, Step::kChild, child, 0}; }
  Field operator[](int index) const { return {this, Step::kIndex, {}, index}; }
  Field operator[](std::string_view key) const { return {this, Step::kKey, key, 0}; }
  Field as_key() const { return {this, Step::kKeyOf, {}, 0}; }

  std::string str() const {
    if (parent_ == nullptr) return std::string(name_);
    std::string path = parent_->str();
    switch (step_) {
      case Step::kChild:
        return path.empty() ? std::string(name_) : fmt::format("{}.{}", path, name_);
      case Step::kIndex:
        return fmt::format("{}[{}]", path, index_);
      case Step::kKey:
        return fmt::format("{}[{}]", path, name_);
      case Step::kKeyOf:
        return path + " (a key)";
    }
    return path;
  }

 private:
  enum class Step { kChild, kIndex, kKey, kKeyOf };
  Field(const Field* parent, Step step, std::string_view name, int index)
      : parent_(parent), step_(step), name_(name), index_(index) {}

  const Field* parent_ = nullptr;
  Step step_ = Step::kChild;
  std::string_view name_;
  int index_ = 0;
};

// `count` things of `field` against `max`, which flag `flag` sets.
Overrun count(std::size_t count, std::size_t max, Limit limit, const Field& field, std::string_view what,
              std::string_view flag) {
  if (count <= max) return std::nullopt;
  return LimitExceeded{limit, fmt::format("{}: {} {} exceed {} ({})", field.str(), count, what, flag, max)};
}

Overrun string(const std::string& value, const Field& field, const Limits& limits) {
  return count(value.size(), limits.max_string_bytes, Limit::kStringBytes, field, "bytes", "--max-ingest-string-bytes");
}

Overrun strings(const Repeated<std::string>& values, const Field& field, const Limits& limits) {
  for (int i = 0; i < values.size(); ++i) {
    if (auto over = string(values[i], field[i], limits)) return over;
  }
  return std::nullopt;
}

// A map's keys, then its values (named by their key, which is within the limit by then).
Overrun strings(const StringMap& map, const Field& field, const Limits& limits) {
  for (const auto& [key, value] : map) {
    if (auto over = string(key, field.as_key(), limits)) return over;
    if (auto over = string(value, field[std::string_view(key)], limits)) return over;
  }
  return std::nullopt;
}

Overrun endpoint(const ingest_v1::EndpointRef& ref, const Field& field, const Limits& limits) {
  if (auto over = string(ref.namespace_(), field / "namespace", limits)) return over;
  if (auto over = string(ref.component(), field / "component", limits)) return over;
  return string(ref.endpoint(), field / "endpoint", limits);
}

Overrun card(const ingest_v1::ModelCard& card, const Field& field, const Limits& limits) {
  if (auto over = string(card.display_name(), field / "display_name", limits)) return over;
  if (auto over = string(card.source_path(), field / "source_path", limits)) return over;
  if (auto over = strings(card.aliases(), field / "aliases", limits)) return over;
  if (auto over = strings(card.semantics_identity(), field / "semantics_identity", limits)) return over;
  if (auto over = strings(card.routing_scope_identity(), field / "routing_scope_identity", limits)) return over;
  return endpoint(card.runtime_config().kv_state_endpoint(), field / "runtime_config.kv_state_endpoint", limits);
}

Overrun adapters(const Repeated<ingest_v1::AdapterCard>& adapters, const Field& field, const Limits& limits) {
  for (int i = 0; i < adapters.size(); ++i) {
    const Field at = field[i];
    if (auto over = string(adapters[i].served_name(), at / "served_name", limits)) return over;
    if (auto over = string(adapters[i].lora_name(), at / "lora_name", limits)) return over;
  }
  return std::nullopt;
}

Overrun kv_sources(const Repeated<ingest_v1::KvSource>& sources, const Field& field, const Limits& limits) {
  for (int i = 0; i < sources.size(); ++i) {
    const auto& zmq = sources[i].zmq();
    const Field item = field[i];
    const Field at = item / "zmq";
    if (auto over = string(zmq.endpoint(), at / "endpoint", limits)) return over;
    if (auto over = string(zmq.topic(), at / "topic", limits)) return over;
    if (auto over = string(zmq.replay_endpoint(), at / "replay_endpoint", limits)) return over;
  }
  return std::nullopt;
}

// A PutWorkerRequest or a topology file's WorkerSpec: the same worker fields.
template <class Worker>
Overrun worker(const Worker& worker, const Field& field, const Limits& limits) {
  if (auto over = card(worker.card(), field / "card", limits)) return over;
  if (auto over = adapters(worker.adapters(), field / "adapters", limits)) return over;
  if (auto over = kv_sources(worker.kv_sources(), field / "kv_sources", limits)) return over;
  return string(worker.engine_metrics().url(), field / "engine_metrics.url", limits);
}

Overrun stored(const ingest_v1::BlocksStored& stored, const Field& field, const Limits& limits) {
  if (auto over = count(static_cast<std::size_t>(stored.blocks_size()), limits.max_event_blocks, Limit::kEventBlocks,
                        field / "blocks", "blocks", "--max-event-blocks")) {
    return over;
  }
  std::size_t tokens = 0;
  for (const auto& block : stored.blocks()) tokens += static_cast<std::size_t>(block.tokens().token_ids_size());
  if (auto over =
          count(tokens, limits.max_event_tokens, Limit::kEventTokens, field, "token ids", "--max-event-tokens")) {
    return over;
  }
  if (auto over = string(stored.lora_name(), field / "lora_name", limits)) return over;
  return string(stored.cache_namespace(), field / "cache_namespace", limits);
}

Overrun event(const ingest_v1::KvEvent& event, const Field& field, const Limits& limits) {
  if (event.has_stored()) return stored(event.stored(), field / "stored", limits);
  if (!event.has_removed()) return std::nullopt;
  return count(static_cast<std::size_t>(event.removed().block_hashes_size()), limits.max_event_blocks,
               Limit::kEventBlocks, field / "removed.block_hashes", "blocks", "--max-event-blocks");
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
    if (auto over = event(batch.events(i), Field("events")[i], limits)) return over;
  }
  return std::nullopt;
}

Overrun oversize(const ingest_v1::LoadReport& report, const Limits& limits) {
  return endpoint(report.endpoint(), "endpoint", limits);
}

Overrun oversize(const ingest_v1::FrontendLoadReport& report, const Limits& limits) {
  if (auto over = string(report.namespace_(), "namespace", limits)) return over;
  for (int m = 0; m < report.models_size(); ++m) {
    const Field models("models");
    const Field at = models[m];
    if (auto over = string(report.models(m).canonical_model_id(), at / "canonical_model_id", limits)) return over;
    if (auto over = strings(report.models(m).aliases(), at / "aliases", limits)) return over;
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
    const Field endpoints("endpoints");
    const Field at = endpoints[e];
    if (auto over = endpoint(spec.endpoint(), at / "endpoint", limits)) return over;
    for (int w = 0; w < spec.workers_size(); ++w) {
      if (auto over = worker(spec.workers(w), (at / "workers")[w], limits)) return over;
    }
  }
  for (int f = 0; f < file.frontends_size(); ++f) {
    if (auto over = string(file.frontends(f).namespace_(), Field("frontends")[f] / "namespace", limits)) {
      return over;
    }
  }
  return std::nullopt;
}

}  // namespace kvrelay::ingest_check
