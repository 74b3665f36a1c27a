#include "core/ingest_validation.hpp"

#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/kv_events.hpp"
#include "core/network_address.hpp"
#include "core/pool_load.hpp"
#include "core/unicode_text.hpp"

namespace kvrelay::ingest_check {

namespace {

constexpr std::uint32_t kMaxScrapeIntervalMs = 3'600'000;
// A scrape takes a shared HTTP thread and a page parse: an engine is not read more often.
constexpr std::uint32_t kMinScrapeIntervalMs = 100;

Problem problem(std::string_view field, std::string_view what) { return fmt::format("{}: {}", field, what); }

std::string join(std::string_view parent, std::string_view child) {
  return parent.empty() ? std::string(child) : fmt::format("{}.{}", parent, child);
}

Problem text(const std::string& value, std::string_view field) {
  if (!text::is_valid_text(value)) return problem(field, "must be non-empty text without surrounding whitespace");
  return std::nullopt;
}

Problem needs(const ingest_v1::ModelCard& card, std::string_view field) {
  for (int i = 0; i < card.needs_size(); ++i) {
    const auto& term = card.needs(i);
    if (term.all_of_size() == 0) return problem(fmt::format("{}.needs[{}].all_of", field, i), "is empty");
    for (int j = 0; j < term.all_of_size(); ++j) {
      const int role = term.all_of(j);
      if (role == ingest_v1::WORKER_TYPE_UNSET || !ingest_v1::WorkerType_IsValid(role)) {
        return problem(fmt::format("{}.needs[{}].all_of[{}]", field, i, j), "is not a worker type");
      }
    }
  }
  return std::nullopt;
}

Problem card(const ingest_v1::ModelCard& card, std::string_view field) {
  // The served model name is what routers look a model up by: it must be usable as given.
  if (auto p = text(card.display_name(), join(field, "display_name"))) return p;
  if (!ingest_v1::WorkerType_IsValid(card.worker_type())) {
    return problem(join(field, "worker_type"), "is not a known worker type");
  }
  if (auto p = needs(card, field)) return p;
  const auto& runtime = card.runtime_config();
  const std::uint32_t size = runtime.data_parallel_size() == 0 ? 1 : runtime.data_parallel_size();
  if (size > kMaxLoadRanksPerWorker) {
    return problem(join(field, "runtime_config.data_parallel_size"), "is above 4096");
  }
  if (std::uint64_t{runtime.data_parallel_start_rank()} + size - 1 > UINT32_MAX) {
    return problem(join(field, "runtime_config.data_parallel_start_rank"), "puts ranks beyond u32");
  }
  if (runtime.has_kv_state_endpoint()) {
    if (auto p = endpoint_ref(runtime.kv_state_endpoint(), join(field, "runtime_config.kv_state_endpoint"))) return p;
  }
  return std::nullopt;
}

// The longest ipc:// path: a Unix socket address holds 108 bytes, its terminating NUL included.
constexpr std::size_t kMaxIpcPathBytes = 107;

// A ZeroMQ address the relay can connect a socket to: tcp://host:port (after an optional
// "source;" part, as ZeroMQ allows), ipc://path or inproc://name.
Problem zmq_endpoint(const std::string& endpoint, std::string_view field, bool optional) {
  if (endpoint.empty()) return optional ? std::nullopt : problem(field, "is empty");
  const std::string_view address = endpoint;
  if (address.starts_with("tcp://")) {
    std::string_view authority = address.substr(std::string_view("tcp://").size());
    if (const auto semicolon = authority.rfind(';'); semicolon != std::string_view::npos) {
      authority.remove_prefix(semicolon + 1);
    }
    if (auto why = host_port_problem(authority, true)) return problem(field, fmt::format("'{}' {}", endpoint, *why));
    return std::nullopt;
  }
  if (address.starts_with("ipc://")) {
    const std::size_t path = address.size() - std::string_view("ipc://").size();
    if (path == 0) return problem(field, "names no ipc:// path");
    if (path > kMaxIpcPathBytes) {
      return problem(field,
                     fmt::format("the ipc:// path has {} bytes, more than a Unix socket's {}", path, kMaxIpcPathBytes));
    }
    return std::nullopt;
  }
  if (address.starts_with("inproc://") && address.size() > std::string_view("inproc://").size()) return std::nullopt;
  return problem(field, fmt::format("'{}' is not a ZeroMQ endpoint (tcp://, ipc:// or inproc://)", endpoint));
}

Problem kv_sources(const google::protobuf::RepeatedPtrField<ingest_v1::KvSource>& sources,
                   const ingest_v1::ModelCard& model_card, std::string_view field) {
  const auto& runtime = model_card.runtime_config();
  const std::uint64_t first = runtime.data_parallel_start_rank();
  const std::uint64_t size = runtime.data_parallel_size() == 0 ? 1 : runtime.data_parallel_size();
  std::set<std::uint32_t> ranks;
  for (int i = 0; i < sources.size(); ++i) {
    const auto& source = sources[i];
    const std::string at = fmt::format("{}[{}]", field, i);
    if (source.dp_rank() < first || source.dp_rank() >= first + size) {
      return problem(join(at, "dp_rank"), fmt::format("{} is not one of the worker's ranks [{}, {})", source.dp_rank(),
                                                      first, first + size));
    }
    if (!ranks.insert(source.dp_rank()).second) return problem(join(at, "dp_rank"), "is declared twice");
    if (source.transport_case() == ingest_v1::KvSource::TRANSPORT_NOT_SET) {
      return problem(at, "names no transport (push or zmq)");
    }
    if (!source.has_zmq()) continue;
    if (auto p = zmq_endpoint(source.zmq().endpoint(), join(at, "zmq.endpoint"), false)) return p;
    if (auto p = zmq_endpoint(source.zmq().replay_endpoint(), join(at, "zmq.replay_endpoint"), true)) return p;
  }
  return std::nullopt;
}

Problem engine_metrics(const ingest_v1::EngineMetricsSource& source, std::string_view field) {
  const std::string_view url = source.url();
  if (!url.starts_with("http://")) return problem(join(field, "url"), fmt::format("'{}' is not an http:// URL", url));
  const std::string_view rest = url.substr(std::string_view("http://").size());
  if (auto why = host_port_problem(rest.substr(0, rest.find('/')), false)) {
    return problem(join(field, "url"), fmt::format("'{}' {}", url, *why));
  }
  if (source.kind() != ingest_v1::ENGINE_KIND_VLLM && source.kind() != ingest_v1::ENGINE_KIND_SGLANG) {
    return problem(join(field, "kind"), "must name the engine (ENGINE_KIND_VLLM or ENGINE_KIND_SGLANG)");
  }
  if (source.interval_ms() != 0 &&
      (source.interval_ms() < kMinScrapeIntervalMs || source.interval_ms() > kMaxScrapeIntervalMs)) {
    return problem(join(field, "interval_ms"), fmt::format("{} is not 0 (1 000) or from {} to {}", source.interval_ms(),
                                                           kMinScrapeIntervalMs, kMaxScrapeIntervalMs));
  }
  return std::nullopt;
}

Problem sources(const google::protobuf::RepeatedPtrField<ingest_v1::KvSource>& kv, bool has_metrics,
                const ingest_v1::EngineMetricsSource& metrics, const ingest_v1::ModelCard& model_card,
                std::string_view field_prefix) {
  if (auto p = kv_sources(kv, model_card, join(field_prefix, "kv_sources"))) return p;
  if (has_metrics) return engine_metrics(metrics, join(field_prefix, "engine_metrics"));
  return std::nullopt;
}

Problem nonzero_ids(const google::protobuf::RepeatedField<std::uint64_t>& ids, std::string_view field) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] == 0) return problem(fmt::format("{}[{}]", field, i), "must not be 0");
  }
  return std::nullopt;
}

}  // namespace

EndpointKey endpoint_key(const ingest_v1::EndpointRef& endpoint) {
  return {endpoint.namespace_(), endpoint.component(), endpoint.endpoint()};
}

Problem endpoint_ref(const ingest_v1::EndpointRef& endpoint, std::string_view field) {
  if (auto p = text(endpoint.namespace_(), join(field, "namespace"))) return p;
  if (auto p = text(endpoint.component(), join(field, "component"))) return p;
  return text(endpoint.endpoint(), join(field, "endpoint"));
}

Problem worker_spec(const ingest_v1::WorkerSpec& worker, std::string_view field) {
  if (!worker.has_card()) return problem(join(field, "card"), "is required");
  if (auto p = card(worker.card(), join(field, "card"))) return p;
  return sources(worker.kv_sources(), worker.has_engine_metrics(), worker.engine_metrics(), worker.card(), field);
}

Problem put_worker(const ingest_v1::PutWorkerRequest& request) {
  if (!request.has_endpoint()) return problem("endpoint", "is required");
  if (auto p = endpoint_ref(request.endpoint(), "endpoint")) return p;
  if (!request.has_card()) return problem("card", "is required");
  if (auto p = card(request.card(), "card")) return p;
  return sources(request.kv_sources(), request.has_engine_metrics(), request.engine_metrics(), request.card(), "");
}

Problem remove_worker(const ingest_v1::RemoveWorkerRequest& request) {
  if (!request.has_endpoint()) return problem("endpoint", "is required");
  return endpoint_ref(request.endpoint(), "endpoint");
}

Problem set_availability(const ingest_v1::SetAvailabilityRequest& request) {
  if (!request.has_endpoint()) return problem("endpoint", "is required");
  return endpoint_ref(request.endpoint(), "endpoint");
}

Problem kv_event_batch(const ingest_v1::KvEventBatch& batch) {
  if (!batch.has_endpoint()) return problem("endpoint", "is required");
  if (auto p = endpoint_ref(batch.endpoint(), "endpoint")) return p;
  if (auto reason = malformed_batch_reason(batch)) return *reason;
  // The cursor moves to sequence + 1, which the last u64 would wrap to 0.
  if (batch.sequence() == std::numeric_limits<std::uint64_t>::max()) {
    return problem("sequence", "2^64 - 1 is the last sequence of all: it leaves no next one (start a new epoch)");
  }
  return std::nullopt;
}

Problem load_report(const ingest_v1::LoadReport& report) {
  if (!report.has_endpoint()) return problem("endpoint", "is required");
  return endpoint_ref(report.endpoint(), "endpoint");
}

Problem frontend_load_report(const ingest_v1::FrontendLoadReport& report) {
  if (auto p = text(report.namespace_(), "namespace")) return p;
  if (report.frontend_id() == 0) return problem("frontend_id", "must not be 0");
  if (report.sequence() == 0) return problem("sequence", "must not be 0");
  std::set<std::string_view> models;
  for (int m = 0; m < report.models_size(); ++m) {
    const auto& model = report.models(m);
    const std::string at = fmt::format("models[{}]", m);
    if (auto p = text(model.canonical_model_id(), join(at, "canonical_model_id"))) return p;
    if (!models.insert(model.canonical_model_id()).second) {
      return problem(join(at, "canonical_model_id"), "is listed twice");
    }
    for (int a = 0; a < model.aliases_size(); ++a) {
      if (auto p = text(model.aliases(a), fmt::format("{}.aliases[{}]", at, a))) return p;
    }
  }
  return std::nullopt;
}

Problem scheduler_load_report(const ingest_v1::SchedulerLoadReport& report) {
  if (!report.has_endpoint()) return problem("endpoint", "is required");
  if (auto p = endpoint_ref(report.endpoint(), "endpoint")) return p;
  if (report.router_id() == 0) return problem("router_id", "must not be 0");
  if (report.sequence() == 0) return problem("sequence", "must not be 0");
  if (!report.replica_group().empty()) {
    if (auto p = text(report.replica_group(), "replica_group")) return p;
  }
  std::set<RankKey> ranks;
  for (int r = 0; r < report.ranks_size(); ++r) {
    const auto& rank = report.ranks(r);
    if (!ranks.insert({rank.worker_id(), rank.dp_rank()}).second) {
      return problem(fmt::format("ranks[{}]", r),
                     fmt::format("worker {} dp_rank {} is listed twice", rank.worker_id(), rank.dp_rank()));
    }
  }
  return std::nullopt;
}

Problem set_frontends(const ingest_v1::SetFrontendsRequest& request) {
  if (auto p = text(request.namespace_(), "namespace")) return p;
  return nonzero_ids(request.frontend_ids(), "frontend_ids");
}

Problem set_schedulers(const ingest_v1::SetSchedulersRequest& request) {
  if (!request.has_endpoint()) return problem("endpoint", "is required");
  if (auto p = endpoint_ref(request.endpoint(), "endpoint")) return p;
  return nonzero_ids(request.router_ids(), "router_ids");
}

Problem topology_file(const ingest_v1::TopologyFile& file) {
  if (file.version() != 1) return problem("version", fmt::format("{} is not supported (must be 1)", file.version()));
  std::set<EndpointKey> endpoints;
  for (int e = 0; e < file.endpoints_size(); ++e) {
    const auto& spec = file.endpoints(e);
    const std::string at = fmt::format("endpoints[{}]", e);
    if (!spec.has_endpoint()) return problem(join(at, "endpoint"), "is required");
    if (auto p = endpoint_ref(spec.endpoint(), join(at, "endpoint"))) return p;
    if (!endpoints.insert(endpoint_key(spec.endpoint())).second)
      return problem(join(at, "endpoint"), "is listed twice");
    std::set<std::uint64_t> workers;
    for (int w = 0; w < spec.workers_size(); ++w) {
      const std::string worker_at = fmt::format("{}.workers[{}]", at, w);
      if (!workers.insert(spec.workers(w).worker_id()).second)
        return problem(join(worker_at, "worker_id"), "is listed twice");
      if (auto p = worker_spec(spec.workers(w), worker_at)) return p;
    }
    if (auto p = nonzero_ids(spec.scheduler_router_ids(), join(at, "scheduler_router_ids"))) return p;
  }
  std::set<std::string_view> namespaces;
  for (int f = 0; f < file.frontends_size(); ++f) {
    const auto& set = file.frontends(f);
    const std::string at = fmt::format("frontends[{}]", f);
    if (auto p = text(set.namespace_(), join(at, "namespace"))) return p;
    if (!namespaces.insert(set.namespace_()).second) return problem(join(at, "namespace"), "is listed twice");
    if (auto p = nonzero_ids(set.frontend_ids(), join(at, "frontend_ids"))) return p;
  }
  return std::nullopt;
}

}  // namespace kvrelay::ingest_check
