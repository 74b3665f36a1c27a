#include "actors/membership_limits.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvrelay::membership_limits {

namespace {

// What a worker counts against --max-kv-sources: its KV sources, or its data-parallel ranks
// if it declares more of them. Every declared rank is held and walked (its capacity and load)
// whether or not a source feeds it, so ranks are bounded as sources are.
std::size_t kv_source_slots(const ingest_v1::ModelCard& card, int kv_sources) {
  const std::uint32_t ranks = std::max<std::uint32_t>(card.runtime_config().data_parallel_size(), 1);
  return std::max<std::size_t>(static_cast<std::size_t>(kv_sources), ranks);
}

}  // namespace

std::optional<CountRefusal> count_refusal(const MembershipState& state, const EndpointKey& endpoint,
                                          const ingest_v1::PutWorkerRequest& request) {
  const MembershipLimits& limits = state.config.limits;
  const auto cards = state.workers.find(endpoint);
  if (cards == state.workers.end() && state.workers.size() >= limits.max_serving_endpoints) {
    return CountRefusal{
        metrics::IngestLimit::kServingEndpoints,
        fmt::format("endpoint {}: the relay holds {} serving endpoints, the most --max-serving-endpoints ({}) allows",
                    endpoint.display(), state.workers.size(), limits.max_serving_endpoints)};
  }
  if (cards != state.workers.end() && !cards->second.contains(request.worker_id()) &&
      cards->second.size() >= limits.max_workers_per_endpoint) {
    return CountRefusal{metrics::IngestLimit::kWorkersPerEndpoint,
                        fmt::format("endpoint {}: it has {} workers, the most --max-workers-per-endpoint ({}) allows",
                                    endpoint.display(), cards->second.size(), limits.max_workers_per_endpoint)};
  }
  const std::size_t added = kv_source_slots(request.card(), request.kv_sources_size());
  std::size_t sources = added;
  for (const auto& [key, workers] : state.workers) {
    for (const auto& [worker_id, spec] : workers) {
      const bool replaced = key == endpoint && worker_id == request.worker_id();
      if (!replaced) sources += kv_source_slots(spec.card(), spec.kv_sources_size());
    }
  }
  if (sources <= limits.max_kv_sources) return std::nullopt;
  return CountRefusal{
      metrics::IngestLimit::kKvSources,
      fmt::format("endpoint {} worker {}: its {} KV sources (or data-parallel ranks, if more) would make {} in all, "
                  "above --max-kv-sources ({})",
                  endpoint.display(), request.worker_id(), added, sources, limits.max_kv_sources)};
}

std::size_t catalog_bytes_with(MembershipState& state, const EndpointKey& endpoint, const ingest_v1::WorkerSpec& spec) {
  auto& cards = state.workers[endpoint];
  auto previous = cards.extract(spec.worker_id());
  cards.emplace(spec.worker_id(), spec);
  const std::size_t bytes = membership::catalog_bytes(endpoint, cards);
  cards.erase(spec.worker_id());
  if (previous) cards.insert(std::move(previous));
  if (cards.empty()) state.workers.erase(endpoint);
  return bytes;
}

std::optional<CountRefusal> catalog_refusal(const MembershipState& state, const EndpointKey& endpoint,
                                            std::uint64_t worker_id, std::size_t endpoint_bytes) {
  std::size_t after = endpoint_bytes;
  for (const auto& [other, bytes] : state.catalog_bytes) {
    if (other != endpoint) after += bytes;
  }
  const std::size_t limit = state.config.limits.max_catalog_bytes;
  if (after <= limit) return std::nullopt;
  return CountRefusal{metrics::IngestLimit::kCatalogBytes,
                      fmt::format("endpoint {} worker {}: its models' names would make the catalog's {} bytes, above "
                                  "half of --max-message-bytes ({})",
                                  endpoint.display(), worker_id, after, limit)};
}

std::optional<CountRefusal> availability_refusal(const MembershipState& state, const EndpointKey& endpoint,
                                                 std::size_t live_workers) {
  if (live_workers > state.config.limits.max_workers_per_endpoint) {
    return CountRefusal{metrics::IngestLimit::kWorkersPerEndpoint,
                        fmt::format("endpoint {}: its live set names {} workers, the most "
                                    "--max-workers-per-endpoint ({}) allows",
                                    endpoint.display(), live_workers, state.config.limits.max_workers_per_endpoint)};
  }
  if (state.workers.contains(endpoint) || state.availability.contains(endpoint)) return std::nullopt;
  const auto without_workers = std::count_if(state.availability.begin(), state.availability.end(),
                                             [&](const auto& entry) { return !state.workers.contains(entry.first); });
  const std::size_t limit = state.config.limits.max_serving_endpoints;
  if (static_cast<std::size_t>(without_workers) < limit) return std::nullopt;
  return CountRefusal{metrics::IngestLimit::kServingEndpoints,
                      fmt::format("endpoint {}: it has no worker, and the relay holds availability for {} endpoints "
                                  "without workers, the most --max-serving-endpoints ({}) allows",
                                  endpoint.display(), without_workers, limit)};
}

}  // namespace kvrelay::membership_limits
