#include "actors/membership.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "actors/crash_report.hpp"
#include "actors/ingest_refusal.hpp"
#include "actors/membership_limits.hpp"
#include "actors/membership_report.hpp"
#include "core/ingest_validation.hpp"
#include "core/rate_limited_log.hpp"
#include "core/wire_validation.hpp"

namespace kvrelay {

namespace {

using Self = MembershipActor::stateful_pointer<MembershipState>;

RpcStatus retired_status() {
  return RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE,
                                "the pool generation was retired; resubscribe from the catalog");
}

// ---- pool materialization ----

// Endpoints that share a pool are reported at every reconcile until the operator fixes them.
RateLimitedLog& shared_pool_log() {
  static RateLimitedLog log;
  return log;
}

// Materializable endpoints (condition 1) whose domains resolve to one PoolId, each with its
// conflict: a PoolId is never shared between endpoints, and none of them holds the pool,
// whether or not the others have active sources (docs/protocol/pools.md#materialization).
std::map<EndpointKey, std::string> shared_pool_claims(const MembershipState& state) {
  std::map<wire::PoolKey, std::vector<EndpointKey>> claims;
  for (const auto& [endpoint, m] : state.projection) {
    if (!m.materializable()) continue;
    claims[wire::pool_key(membership::pool_id(*m.domain, state.config.dc_id))].push_back(endpoint);
  }
  std::map<EndpointKey, std::string> shared;
  for (const auto& [pool, endpoints] : claims) {
    if (endpoints.size() < 2) continue;
    std::vector<std::string> names;
    for (const EndpointKey& endpoint : endpoints) names.push_back(endpoint.display());
    const std::string conflict =
        fmt::format("PoolMaterialization: pool is claimed by multiple serving endpoints: {}", fmt::join(names, ", "));
    for (const EndpointKey& endpoint : endpoints) {
      shared_pool_log().warn(fmt::format("endpoint {}: {}; not materialized", endpoint.display(), conflict));
      shared.emplace(endpoint, conflict);
    }
  }
  return shared;
}

// The endpoints that should hold a pool now, with what each would be bound to.
std::map<EndpointKey, PoolBinding> desired_pools(const MembershipState& state) {
  std::map<EndpointKey, PoolBinding> desired;
  for (const auto& [endpoint, m] : state.projection) {
    const auto kv_state_endpoint = m.kv_state_endpoint();
    if (!m.materializable() || !kv_state_endpoint || state.shared_pools.contains(endpoint)) continue;
    if (membership_report::active_sources(state, endpoint) == 0) continue;
    if (const auto hold = state.rebuild_holds.find(endpoint); hold != state.rebuild_holds.end() && hold->second.until) {
      continue;
    }
    desired.emplace(endpoint, PoolBinding{*m.domain, *kv_state_endpoint});
  }
  return desired;
}

v1::ProducerIdentity new_producer(Self self, const membership::IndexerDomain& domain, std::uint64_t bucket_count) {
  auto& state = self->state;
  v1::ProducerIdentity producer;
  *producer.mutable_pool_id() = membership::pool_id(domain, state.config.dc_id);
  producer.set_producer_incarnation(state.config.relay.relay_incarnation());
  producer.set_layout_generation(++state.layout_generation);
  auto* format = producer.mutable_ckf_format();
  format->set_format_version(ckf::kFormatVersion);
  format->set_seed(state.config.seed);
  format->set_bucket_count(bucket_count);
  format->set_fingerprint_bits(ckf::kFingerprintBits);
  format->set_slots_per_bucket(ckf::kSlotsPerBucket);
  return producer;
}

// A new generation's figures replace the endpoint's previous ones in /metrics: the series
// (labelled by endpoint) live on, the retiring generation's late writes go nowhere.
std::shared_ptr<metrics::PoolStats> pool_stats(Self self, const EndpointKey& endpoint) {
  metrics::RelayMetrics* metrics = self->state.config.metrics;
  if (metrics == nullptr) return nullptr;
  auto stats = std::make_shared<metrics::PoolStats>();
  metrics->pools().publish({endpoint.label()}, stats);
  metrics->generation_created();
  return stats;
}

// A generation ended (withdrawn, replaced or fenced). Once its endpoint holds no pool at all,
// the endpoint's series go too.
void generation_gone(Self self, const EndpointKey& endpoint) {
  metrics::RelayMetrics* metrics = self->state.config.metrics;
  if (metrics == nullptr) return;
  metrics->generation_retired();
  if (!self->state.pools.contains(endpoint)) metrics->pools().withdraw({endpoint.label()});
}

std::shared_ptr<StreamLimit> generation_subscribers(const MembershipState& state) {
  return std::make_shared<StreamLimit>("subscriber (per pool)", state.config.max_subscribers_per_pool);
}

// The pool's first layout is charged against the budget (docs/protocol/capacity.md#budget); a
// pool that does not fit is not materialized and its endpoint shows why.
std::optional<MaterializedPool> materialize(Self self, const EndpointKey& endpoint, const PoolBinding& binding) {
  const membership::IndexerDomain& domain = binding.domain;
  auto& state = self->state;
  const auto& runtime_configs = state.projection.at(endpoint).runtime_configs;
  const std::uint64_t buckets =
      capacity::initial_bucket_count(state.config.sizing, capacity::declared_capacity(runtime_configs));
  const std::uint64_t charge = capacity::pool_charge_bytes(buckets, state.config.relayout_load);
  if (auto refusal = state.budget.try_reserve(charge)) {
    if (state.over_budget.insert_or_assign(endpoint, "PoolMaterialization: " + *refusal).second) {
      spdlog::warn("endpoint {}: pool not materialized: {}", endpoint.display(), *refusal);
    }
    return std::nullopt;
  }
  state.over_budget.erase(endpoint);
  MaterializedPool pool{binding, {}, {}, new_producer(self, domain, buckets), {}, pool_stats(self, endpoint)};
  pool.lineage = pool.producer.layout_generation();
  pool.charged_bytes = charge;
  pool.materialized_at = self->clock().now();
  pool.subscribers = generation_subscribers(state);
  PublisherConfig config;
  config.endpoint = endpoint.display();
  config.spec = PoolStreamSpec{state.config.relay, pool.producer, state.config.dc_id, state.config.seed, buckets};
  config.semantics = {domain.kv_block_size, domain.hash_format};
  config.expected_blocks = capacity::expected_blocks(runtime_configs, buckets, state.config.relayout_load);
  config.cadence = state.config.cadence;
  config.hub_slots = state.config.hub_slots;
  config.relayout_load = state.config.relayout_load;
  config.relayout_min_interval = state.config.relayout_min_interval;
  config.owner = self;
  config.metrics = state.config.metrics;
  config.stats = pool.stats;
  // Linked: a publisher that fails takes membership (and so the relay) down with it.
  pool.publisher = self->template spawn<caf::linked>(pool_publisher, std::move(config));
  spdlog::info("pool materialized: endpoint={} layout_generation={} bucket_count={}", endpoint.display(),
               pool.producer.layout_generation(), buckets);
  return pool;
}

// Makes a layout of `bucket_count` buckets the pool's new generation, if the memory budget
// holds it (docs/protocol/capacity.md#relayout); otherwise counts and logs the refusal and
// returns it. The publisher is told its new generation before the catalog names it, so a
// stream admitted to the new generation always finds the publisher already re-laid out. The
// pool keeps its publisher, lineage, sources and stats. The caller publishes the catalog.
std::optional<std::string> grant_relayout(Self self, const EndpointKey& endpoint, MaterializedPool& pool,
                                          std::uint64_t bucket_count) {
  auto& state = self->state;
  const std::uint64_t charge = capacity::pool_charge_bytes(bucket_count, state.config.relayout_load);
  const std::uint64_t extra = charge > pool.charged_bytes ? charge - pool.charged_bytes : 0;
  if (auto refusal = state.budget.try_reserve(extra)) {
    if (state.config.metrics != nullptr) state.config.metrics->growth_refused();
    state.growth_log->warn(fmt::format("endpoint {}: re-layout refused: {}", endpoint.display(), *refusal));
    return refusal;
  }
  pool.charged_bytes += extra;
  pool.producer = new_producer(self, pool.binding.domain, bucket_count);
  pool.subscribers = generation_subscribers(state);
  self->send(pool.publisher, atoms::relayout_atom_v, pool.producer);
  return std::nullopt;
}

// With auto sizing a pool's layout follows its declared capacity: a worker that raised it
// past what the layout was sized for re-lays the pool out to the size the new sum gives
// (docs/protocol/decisions.md#d34). Layouts never shrink.
void follow_declared_capacity(Self self, const EndpointKey& endpoint, MaterializedPool& pool) {
  const auto& state = self->state;
  if (state.config.sizing.expected_blocks) return;
  const std::uint64_t wanted = capacity::initial_bucket_count(
      state.config.sizing, capacity::declared_capacity(state.projection.at(endpoint).runtime_configs));
  if (wanted <= pool.producer.ckf_format().bucket_count()) return;
  // A refusal stands while nothing that could change it did: a reconcile for another endpoint
  // neither asks again nor counts another refusal.
  if (const auto& refused = pool.declared_refusal;
      refused && refused->bucket_count == wanted && state.budget.reserved() >= refused->budget_reserved) {
    return;
  }
  spdlog::info("endpoint {}: declared capacity needs {} buckets, the layout has {}: re-laying out", endpoint.display(),
               wanted, pool.producer.ckf_format().bucket_count());
  if (auto refusal = grant_relayout(self, endpoint, pool, wanted)) {
    pool.declared_refusal = MaterializedPool::DeclaredRefusal{wanted, state.budget.reserved(), std::move(*refusal)};
    return;
  }
  pool.declared_refusal.reset();
}

// ---- what the other actors are told ----

std::vector<CatalogEntry> catalog_entries(const MembershipState& state) {
  std::vector<CatalogEntry> entries;
  for (const auto& [endpoint, pool] : state.pools)
    entries.push_back({pool.descriptor, pool.publisher, pool.subscribers});
  return entries;
}

std::vector<readiness::EndpointFacts> readiness_facts(const MembershipState& state) {
  std::vector<readiness::EndpointFacts> facts;
  for (const auto& [endpoint, m] : state.projection) {
    readiness::EndpointFacts f;
    f.endpoint = endpoint;
    f.registrations = m.registrations;
    f.roles = m.roles;
    f.workers = m.worker_topology;
    f.adapters = m.adapters;
    f.serving_topology_conflict = m.has_conflict(ConflictScope::kServingTopology);
    if (const auto live = state.availability.find(endpoint); live != state.availability.end()) {
      f.live_workers = live->second;
    }
    if (const auto pool = state.pools.find(endpoint); pool != state.pools.end()) {
      for (const Registration& r : m.registrations) {
        if (!r.target.adapter) f.pool_links[r.target.base_model] = pool->second.producer.pool_id();
      }
    }
    facts.push_back(std::move(f));
  }
  return facts;
}

std::vector<LoadPool> load_pools(const MembershipState& state) {
  std::vector<LoadPool> pools;
  for (const auto& [endpoint, pool] : state.pools) {
    const auto& projected = state.projection.at(endpoint);
    std::vector<std::string> models;
    for (const Registration& r : projected.registrations) models.push_back(r.canonical_model_id);
    pools.push_back(
        {{endpoint, pool.producer, projected.runtime_configs, std::move(models), pool.lineage}, pool.stats});
  }
  return pools;
}

// The figures only membership knows, for /metrics.
void publish_stats(Self self) {
  auto& state = self->state;
  if (state.config.metrics == nullptr) return;
  state.config.metrics->set_pools_materialized(state.pools.size());
  state.config.metrics->set_memory(state.over_budget.size(), state.budget.limit().value_or(0), state.budget.reserved());
  for (const auto& [endpoint, pool] : state.pools) {
    pool.stats->active_sources.store(membership_report::active_sources(state, endpoint), std::memory_order_relaxed);
  }
}

// Both load windows cover the same pools, each with its current producer.
void send_load_pools(Self self) {
  const auto pools = load_pools(self->state);
  self->send(self->state.peers.load, atoms::load_pools_atom_v, pools);
  self->send(self->state.peers.serving_load, atoms::load_pools_atom_v, pools);
}

// Points every declared source's lane at its endpoint's pool (or at none), making lanes for
// new sources, and publishes the lanes for the batches' carriers. Called after the pools
// changed and before a retired publisher is told, so no lane routes to it by then.
void route_sources(Self self) {
  auto& state = self->state;
  const auto engine_sources = state.feeds.sources();
  auto view = std::make_shared<RoutingView>();
  for (const auto& [endpoint, cards] : state.workers) {
    std::optional<PoolRoute> route;
    if (const auto pool = state.pools.find(endpoint); pool != state.pools.end()) {
      route = PoolRoute{pool->second.publisher, pool->second.lineage};
    }
    for (const auto& [worker_id, spec] : cards) {
      for (const auto& source : spec.kv_sources()) {
        const SourceId id{endpoint, worker_id, source.dp_rank()};
        LaneDeclaration declaration{source.has_zmq() ? SourceTransport::kZmq : SourceTransport::kPush, {}, route};
        if (const auto actor = engine_sources.find(id); actor != engine_sources.end()) {
          declaration.feeder = actor->second.address();
        }
        auto& lane = state.lanes[id];
        if (!lane) lane = std::make_shared<SourceLane>();
        lane->declare(std::move(declaration));
        view->lanes.emplace(id, lane);
      }
    }
  }
  state.config.routes->publish(std::move(view));
}

// A card conflict is logged once, when it appears; PutWorker's response and GetState show it
// while it lasts (docs/operations.md, KvRelayNoMaterializedPools).
void log_new_conflicts(const std::map<EndpointKey, membership::EndpointMembership>& before,
                       const std::map<EndpointKey, membership::EndpointMembership>& after) {
  for (const auto& [endpoint, m] : after) {
    const auto previous = before.find(endpoint);
    for (const Conflict& conflict : m.conflicts) {
      if (previous != before.end() &&
          std::ranges::find(previous->second.conflicts, conflict) != previous->second.conflicts.end()) {
        continue;
      }
      spdlog::warn("endpoint {}: {}", endpoint.display(), conflict.message);
    }
  }
}

// Re-projects everything after a change and tells every actor the complete new state.
// The catalog withdraws a pool before its publisher is retired.
void reconcile(Self self) {
  auto& state = self->state;
  if (state.shut_down) return;
  state.feeds.reconcile(self, state.workers, state.peers.load);
  auto previous_projection = std::exchange(state.projection, membership::project(state.workers));
  log_new_conflicts(previous_projection, state.projection);
  std::erase_if(state.rebuild_holds, [&](const auto& hold) { return !state.projection.contains(hold.first); });
  state.shared_pools = shared_pool_claims(state);
  const auto desired = desired_pools(state);
  std::vector<std::pair<EndpointKey, PoolPublisherActor>> retiring;
  for (auto it = state.pools.begin(); it != state.pools.end();) {
    const auto want = desired.find(it->first);
    if (want != desired.end() && want->second == it->second.binding) {
      ++it;
      continue;
    }
    retiring.emplace_back(it->first, it->second.publisher);
    state.budget.release(it->second.charged_bytes);
    it = state.pools.erase(it);
  }
  std::erase_if(state.over_budget, [&](const auto& entry) { return !desired.contains(entry.first); });
  for (const auto& [endpoint, binding] : desired) {
    if (auto kept = state.pools.find(endpoint); kept != state.pools.end()) {
      follow_declared_capacity(self, endpoint, kept->second);
    } else if (auto pool = materialize(self, endpoint, binding)) {
      state.pools.emplace(endpoint, std::move(*pool));
    }
  }
  for (auto& [endpoint, pool] : state.pools) {
    // A materializable endpoint always has a base registration, hence a descriptor.
    pool.descriptor = membership::descriptor(state.projection.at(endpoint), pool.producer).value();
  }
  route_sources(self);
  publish_stats(self);
  self->send(state.peers.catalog, atoms::catalog_atom_v, catalog_entries(state));
  for (const auto& [endpoint, publisher] : retiring) {
    spdlog::info("pool withdrawn: endpoint={}", endpoint.display());
    self->send(publisher, atoms::retire_atom_v, retired_status());
    generation_gone(self, endpoint);
  }
  self->send(state.peers.topology, atoms::facts_atom_v, readiness_facts(state));
  send_load_pools(self);
}

// ---- ingest calls ----

std::vector<std::uint32_t> source_ranks(const ingest_v1::WorkerSpec& worker) {
  std::vector<std::uint32_t> ranks;
  for (const auto& source : worker.kv_sources()) ranks.push_back(source.dp_rank());
  return ranks;
}

void count_reset(Self self, metrics::ResetReason reason) {
  if (self->state.config.metrics != nullptr) self->state.config.metrics->source_reset(reason);
}

// Drops what the relay knew about a worker's sources: their lanes (cursors), and their blocks
// in the endpoint's pool when the pool outlives the change. A lane is retired before the
// reset is sent, so no batch of the source reaches the pool after its reset.
void forget_sources(Self self, const EndpointKey& endpoint, std::uint64_t worker_id,
                    const std::vector<std::uint32_t>& ranks, metrics::ResetReason reason) {
  auto& state = self->state;
  const auto pool = state.pools.find(endpoint);
  for (std::uint32_t rank : ranks) {
    if (const auto lane = state.lanes.find(SourceId{endpoint, worker_id, rank}); lane != state.lanes.end()) {
      lane->second->retire();
      state.lanes.erase(lane);
    }
    if (pool == state.pools.end()) continue;
    self->send(pool->second.publisher, atoms::reset_atom_v, SourceKey{worker_id, rank});
    count_reset(self, reason);
  }
}

// Counted, logged (rate-limited) and answered as a refusal, which the gateway turns into
// RESOURCE_EXHAUSTED.
caf::error refuse(Self self, std::string_view call, membership_limits::CountRefusal refusal) {
  static RateLimitedLog log;
  log.warn([&] { return fmt::format("refused {}: {}", call, refusal.message); });
  if (self->state.config.metrics != nullptr) self->state.config.metrics->ingest_limit_refused(refusal.limit);
  return ingest_refusal(std::move(refusal.message));
}

caf::result<ingest_v1::PutWorkerResponse> put_worker(Self self, const ingest_v1::PutWorkerRequest& request) {
  auto& state = self->state;
  const EndpointKey endpoint = ingest_check::endpoint_key(request.endpoint());
  if (auto refusal = membership_limits::count_refusal(state, endpoint, request))
    return refuse(self, "PutWorker", std::move(*refusal));
  ingest_v1::WorkerSpec spec = membership::worker_spec(request);
  const std::size_t endpoint_bytes = membership_limits::catalog_bytes_with(state, endpoint, spec);
  if (auto refusal = membership_limits::catalog_refusal(state, endpoint, request.worker_id(), endpoint_bytes)) {
    return refuse(self, "PutWorker", std::move(*refusal));
  }
  state.catalog_bytes[endpoint] = endpoint_bytes;
  auto& cards = state.workers[endpoint];
  if (const auto previous = cards.find(request.worker_id()); previous != cards.end()) {
    std::vector<std::uint32_t> dropped;
    std::vector<std::uint32_t> redeclared;
    const auto& kept = spec.kv_sources();
    for (const auto& before : previous->second.kv_sources()) {
      const auto after = std::find_if(kept.begin(), kept.end(),
                                      [&](const ingest_v1::KvSource& s) { return s.dp_rank() == before.dp_rank(); });
      if (after == kept.end()) {
        dropped.push_back(before.dp_rank());
      } else if (EngineFeeds::read_differently(previous->second.card(), before, spec.card(), *after)) {
        redeclared.push_back(before.dp_rank());
      }
    }
    forget_sources(self, endpoint, request.worker_id(), dropped, metrics::ResetReason::kSourceDropped);
    forget_sources(self, endpoint, request.worker_id(), redeclared, metrics::ResetReason::kSourceRedeclared);
  }
  cards[request.worker_id()] = std::move(spec);
  reconcile(self);
  ingest_v1::PutWorkerResponse response;
  for (auto& text : membership_report::conflict_texts(state, endpoint)) response.add_conflicts(std::move(text));
  return response;
}

void remove_worker(Self self, const ingest_v1::RemoveWorkerRequest& request) {
  auto& state = self->state;
  const EndpointKey endpoint = ingest_check::endpoint_key(request.endpoint());
  const auto cards = state.workers.find(endpoint);
  if (cards != state.workers.end()) {
    if (const auto worker = cards->second.find(request.worker_id()); worker != cards->second.end()) {
      forget_sources(self, endpoint, worker->first, source_ranks(worker->second), metrics::ResetReason::kWorkerRemoved);
      cards->second.erase(worker);
      if (cards->second.empty()) {
        // Availability lives and dies with membership: an endpoint that comes back is
        // UNKNOWN until its next SetAvailability, never judged on a stale live set.
        state.workers.erase(cards);
        state.availability.erase(endpoint);
        state.catalog_bytes.erase(endpoint);
      } else {
        state.catalog_bytes[endpoint] = membership::catalog_bytes(endpoint, cards->second);
      }
      reconcile(self);
    }
  }
}

// A worker reported not live (after being live, or before any report) takes its load
// observations with it: its ranks count as unobserved until it reports again
// (docs/protocol/load.md#observations).
void forget_load_of_workers_gone(Self self, const EndpointKey& endpoint, const std::set<std::uint64_t>* was_live,
                                 const std::set<std::uint64_t>& live) {
  const auto cards = self->state.workers.find(endpoint);
  if (cards == self->state.workers.end()) return;
  for (const auto& [worker_id, card] : cards->second) {
    if (live.contains(worker_id) || (was_live != nullptr && !was_live->contains(worker_id))) continue;
    self->send(self->state.peers.load, atoms::forget_load_atom_v, endpoint, worker_id);
  }
}

caf::result<ingest_v1::SetAvailabilityResponse> set_availability(Self self,
                                                                 const ingest_v1::SetAvailabilityRequest& request) {
  auto& state = self->state;
  const EndpointKey endpoint = ingest_check::endpoint_key(request.endpoint());
  std::set<std::uint64_t> live(request.live_worker_ids().begin(), request.live_worker_ids().end());
  if (auto refusal = membership_limits::availability_refusal(state, endpoint, live.size())) {
    return refuse(self, "SetAvailability", std::move(*refusal));
  }
  const auto current = state.availability.find(endpoint);
  const std::set<std::uint64_t>* was_live = current == state.availability.end() ? nullptr : &current->second;
  if (was_live == nullptr || *was_live != live) {
    forget_load_of_workers_gone(self, endpoint, was_live, live);
    state.availability[endpoint] = std::move(live);
    self->send(state.peers.topology, atoms::facts_atom_v, readiness_facts(state));
  }
  return ingest_v1::SetAvailabilityResponse{};
}

// The pool whose current publisher sent the message being handled, if any. A publisher is
// identified by its address, not its layout generation: a re-layout granted but not yet
// applied leaves the two disagreeing for a moment.
std::map<EndpointKey, MaterializedPool>::iterator sending_pool(Self self) {
  auto& pools = self->state.pools;
  const auto sender = self->current_sender();
  return std::find_if(pools.begin(), pools.end(),
                      [&](const auto& entry) { return entry.second.publisher.address() == sender; });
}

// The endpoint's next generation waits out its backoff: a generation that served for the
// backoff's longest wait starts the count over, one fenced sooner doubles it.
void hold_rebuild(Self self, const EndpointKey& endpoint, const MaterializedPool& fenced) {
  RebuildHold& hold = self->state.rebuild_holds[endpoint];
  const auto now = self->clock().now();
  hold.backoff.attempt_ended(fenced.materialized_at, now);
  const auto delay = hold.backoff.next();
  hold.until = now + delay;
  hold.reason = fmt::format("pool generation {} was fenced; its successor is materialized after {} ms",
                            fenced.producer.layout_generation(), delay.count());
  spdlog::warn("endpoint {}: {}", endpoint.display(), hold.reason);
  self->delayed_send(self, delay, atoms::rebuild_due_atom_v, endpoint);
}

void on_rebuild_due(Self self, const EndpointKey& endpoint) {
  const auto hold = self->state.rebuild_holds.find(endpoint);
  if (hold == self->state.rebuild_holds.end() || !hold->second.until) return;  // the endpoint went meanwhile
  if (self->clock().now() < *hold->second.until) return;                       // a timer of an earlier hold
  hold->second.until.reset();
  reconcile(self);
}

// A publisher fenced its generation (it refuses batches until retired): the catalog withdraws
// it and the lanes stop routing to it before it is retired, so no batch is sent to it after
// its retirement. A new generation, whose sources all start over (SourceLane::sequence),
// follows after the endpoint's rebuild backoff.
void on_fenced(Self self) {
  auto& pools = self->state.pools;
  const auto fenced = sending_pool(self);
  if (fenced == pools.end()) return;  // already replaced or withdrawn
  const EndpointKey endpoint = fenced->first;
  const PoolPublisherActor publisher = fenced->second.publisher;
  hold_rebuild(self, endpoint, fenced->second);
  self->state.budget.release(fenced->second.charged_bytes);
  pools.erase(fenced);
  reconcile(self);
  self->send(publisher, atoms::retire_atom_v, retired_status());
  generation_gone(self, endpoint);
}

// A publisher asks for a re-layout of its generation into `bucket_count` buckets.
void on_grow(Self self, std::uint64_t layout_generation, std::uint64_t bucket_count) {
  auto& state = self->state;
  const auto pool = sending_pool(self);
  if (pool == state.pools.end() || pool->second.producer.layout_generation() != layout_generation) return;
  const auto& publisher = pool->second.publisher;
  if (bucket_count > capacity::kMaxBuckets) {
    self->send(publisher, atoms::growth_refused_atom_v, std::string("the pool is at the format's largest layout"));
    return;
  }
  if (auto refusal = grant_relayout(self, pool->first, pool->second, bucket_count)) {
    self->send(publisher, atoms::growth_refused_atom_v, std::move(*refusal));
    return;
  }
  pool->second.descriptor = membership::descriptor(state.projection.at(pool->first), pool->second.producer).value();
  publish_stats(self);
  self->send(state.peers.catalog, atoms::catalog_atom_v, catalog_entries(state));
  send_load_pools(self);
}

}  // namespace

MembershipActor::behavior_type membership_actor(Self self, MembershipConfig config, MembershipPeers peers) {
  self->state.config = std::move(config);
  self->state.peers = std::move(peers);
  self->state.config.feeds.router = BatchRouter(self->state.config.routes, self->state.config.metrics);
  // Without membership no lane is kept true: every batch from now on is answered lost, and
  // its stream ends at once, as the relay stops.
  self->attach_functor([routes = self->state.config.routes] { routes->publish(RoutingView::closed()); });
  self->state.feeds = EngineFeeds(self->state.config.feeds);
  self->state.budget = capacity::MemoryBudget(self->state.config.memory_budget_bytes);
  self->state.mailbox.start(self, metrics::mailbox_gauge(self->state.config.metrics, metrics::ActorKind::kMembership));
  report_crashes(self, "membership");
  publish_stats(self);
  return {
      [=](atoms::put_worker_atom, const ingest_v1::PutWorkerRequest& request) { return put_worker(self, request); },
      [=](atoms::remove_worker_atom, const ingest_v1::RemoveWorkerRequest& request) {
        remove_worker(self, request);
        return ingest_v1::RemoveWorkerResponse{};
      },
      [=](atoms::availability_atom, const ingest_v1::SetAvailabilityRequest& request) {
        return set_availability(self, request);
      },
      [=](atoms::get_state_atom) { return membership_report::get_state(self); },
      [=](atoms::link_atom, const SourceId& source, bool connected) {
        if (self->state.feeds.set_link(self->current_sender(), source, connected)) reconcile(self);
      },
      [=](atoms::generation_fenced_atom, std::uint64_t) { on_fenced(self); },
      [=](atoms::rebuild_due_atom, const EndpointKey& endpoint) { on_rebuild_due(self, endpoint); },
      [=](atoms::grow_atom, std::uint64_t layout_generation, std::uint64_t bucket_count) {
        on_grow(self, layout_generation, bucket_count);
      },
      [=](atoms::shutdown_atom, const RpcStatus& status) {
        self->state.shut_down = true;
        self->state.feeds.stop_all();
        auto pools = std::move(self->state.pools);
        self->state.pools.clear();
        // Every lane refuses from now on: no batch reaches a publisher after its retirement below.
        for (auto& [source, lane] : self->state.lanes) lane->drain();
        for (auto& [endpoint, pool] : pools) {
          self->send(pool.publisher, atoms::retire_atom_v, status);
          self->state.budget.release(pool.charged_bytes);
          generation_gone(self, endpoint);
        }
        publish_stats(self);
      },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
      [=](atoms::corrupt_atom) {
        for (auto& [endpoint, pool] : self->state.pools) self->send(pool.publisher, atoms::corrupt_atom_v);
      },
      [=](atoms::evict_atom, std::uint64_t canonical) {
        for (auto& [endpoint, pool] : self->state.pools) self->send(pool.publisher, atoms::evict_atom_v, canonical);
      },
      [=](atoms::crash_atom) -> void { throw std::logic_error("test hook: membership asked to crash"); },
  };
}

}  // namespace kvrelay
