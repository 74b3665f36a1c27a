#include "core/serving_load.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/wire_validation.hpp"

namespace kvrelay::serving_load {

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return b > kMax - a ? kMax : a + b; }

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) { return a != 0 && b > kMax / a ? kMax : a * b; }

std::uint32_t saturate_u32(int n) {
  return static_cast<std::uint32_t>(std::min<std::int64_t>(n, std::numeric_limits<std::uint32_t>::max()));
}

bool accepted(ingest_v1::ReportOutcome outcome) {
  return outcome == ingest_v1::REPORT_OUTCOME_APPLIED || outcome == ingest_v1::REPORT_OUTCOME_RESTARTED;
}

// docs/protocol/serving-load.md#deployment: the caller has checked the rank configuration.
v1::PoolDeploymentStatus deployment_of(const std::map<std::uint64_t, RuntimeConfig>& runtime_configs) {
  v1::PoolDeploymentStatus deployment;
  deployment.set_live_workers(runtime_configs.size());
  std::uint64_t concurrency = 0;
  for (const auto& [worker_id, config] : runtime_configs) {
    if (!config.max_num_seqs) return deployment;  // one undeclared worker leaves it unknown
    concurrency = saturating_add(concurrency, saturating_mul(*config.max_num_seqs, config.data_parallel_size));
  }
  deployment.set_max_concurrency(concurrency);
  return deployment;
}

// docs/protocol/serving-load.md#totals: a current value below its baseline means the counter
// restarted, so all of it is new.
std::uint64_t growth(std::uint64_t current, std::uint64_t baseline) {
  return current >= baseline ? current - baseline : current;
}

// Frontend coverage of one namespace (docs/protocol/serving-load.md#model-status).
struct Coverage {
  std::uint64_t expected = 0;  // |declared ∪ fresh|
  std::uint64_t observed = 0;  // fresh
  std::uint64_t oldest_published_ms = kMax;

  v1::DataStatus status() const {
    if (observed == 0) return v1::DATA_STATUS_UNAVAILABLE;
    return observed == expected ? v1::DATA_STATUS_COMPLETE : v1::DATA_STATUS_DEGRADED;
  }
};

// What one window says about one model, before coverage and totals are added.
struct ModelEntry {
  std::map<wire::PoolKey, v1::KvPoolId> serving_pools;
  std::uint64_t awaiting_first_token = 0;
  std::uint64_t generating = 0;
  std::uint64_t awaiting_first_token_input_tokens = 0;
  std::uint64_t inflight_input_tokens = 0;
  std::uint64_t ready_frontends = 0;

  void add(const ingest_v1::RequestGauges& gauges) {
    awaiting_first_token = saturating_add(awaiting_first_token, gauges.requests_awaiting_first_token());
    generating = saturating_add(generating, gauges.requests_generating());
    awaiting_first_token_input_tokens =
        saturating_add(awaiting_first_token_input_tokens, gauges.awaiting_first_token_input_tokens());
    inflight_input_tokens = saturating_add(inflight_input_tokens, gauges.inflight_input_tokens());
  }
};

void write_model(const ModelEntry& entry, const Coverage& coverage, const std::array<std::uint64_t, 6>& totals,
                 v1::ModelServingLoad& out) {
  auto* load = out.mutable_load();
  load->set_status(coverage.status());
  load->set_source_observed_ms(coverage.observed == 0 ? 0 : coverage.oldest_published_ms);
  auto* requests = load->mutable_requests();
  requests->set_requests_started_total(totals[0]);
  requests->set_requests_completed_total(totals[1]);
  requests->set_requests_failed_total(totals[2]);
  requests->set_requests_cancelled_total(totals[3]);
  auto* tokens = load->mutable_tokens();
  tokens->set_input_tokens_total(totals[4]);
  tokens->set_output_tokens_total(totals[5]);
  // Gauges of a partial coverage would read as low load; they are only sent when complete.
  if (coverage.status() == v1::DATA_STATUS_COMPLETE) {
    requests->set_requests_awaiting_first_token(entry.awaiting_first_token);
    requests->set_requests_generating(entry.generating);
    tokens->set_awaiting_first_token_input_tokens(entry.awaiting_first_token_input_tokens);
    tokens->set_inflight_input_tokens(entry.inflight_input_tokens);
  }
  auto* deployment = out.mutable_deployment();
  deployment->set_expected_frontends(coverage.expected);
  deployment->set_observed_frontends(coverage.observed);
  deployment->set_ready_frontends(entry.ready_frontends);
  for (const auto& [key, pool_id] : entry.serving_pools) *deployment->add_serving_pools() = pool_id;
}

}  // namespace

ServingLoad::ServingLoad(Config config) : config_(config) {}

void ServingLoad::set_pools(std::vector<PoolFacts> pools) {
  std::map<EndpointKey, Pool> next;
  for (PoolFacts& facts : pools) {
    Pool& pool = next[facts.endpoint];
    const auto existing = pools_.find(facts.endpoint);
    if (existing != pools_.end() && existing->second.facts.lineage == facts.lineage) {
      pool.views = std::move(existing->second.views);  // same generation or a re-layout: views and progress carry over
      pool.routers = std::move(existing->second.routers);
    }
    auto declared = declared_ranks(facts.runtime_configs);
    pool.declared = declared ? std::move(*declared) : DeclaredRanks{};
    pool.deployment = declared ? deployment_of(facts.runtime_configs) : v1::PoolDeploymentStatus{};
    pool.facts = std::move(facts);
  }
  pools_ = std::move(next);
}

void ServingLoad::set_frontends(const std::string& ns, std::set<std::uint64_t> frontend_ids) {
  if (frontend_ids.empty()) {
    declared_frontends_.erase(ns);
  } else {
    declared_frontends_[ns] = std::move(frontend_ids);
  }
}

void ServingLoad::set_schedulers(const EndpointKey& endpoint, std::set<std::uint64_t> router_ids) {
  if (router_ids.empty()) {
    declared_routers_.erase(endpoint);
  } else {
    declared_routers_[endpoint] = std::move(router_ids);
  }
}

// ---- limits (docs/protocol/limits.md#serving-load-limits) ----

std::size_t ServingLoad::heard_sources() const {
  std::size_t heard = frontends_.size();
  for (const auto& [endpoint, pool] : pools_) heard += pool.routers.size();
  return heard;
}

std::size_t ServingLoad::declared_sources() const {
  std::size_t declared = 0;
  for (const auto& [ns, ids] : declared_frontends_) declared += ids.size();
  for (const auto& [endpoint, ids] : declared_routers_) declared += ids.size();
  return declared;
}

std::optional<LimitRefusal> ServingLoad::refusal_to_hear(const std::string& who) const {
  const std::size_t heard = heard_sources();
  if (heard < config_.max_sources) return std::nullopt;
  return LimitRefusal{LimitRefusal::Limit::kSources,
                      fmt::format("{}: the relay holds the reports of {} frontends and routers, the most "
                                  "--max-serving-load-sources ({}) allows",
                                  who, heard, config_.max_sources)};
}

std::optional<LimitRefusal> ServingLoad::declaring_past_limit(const std::string& who, std::size_t held_by_it,
                                                              std::size_t declaring) const {
  const std::size_t after = declared_sources() - held_by_it + declaring;
  if (after <= config_.max_sources) return std::nullopt;
  return LimitRefusal{LimitRefusal::Limit::kSources,
                      fmt::format("{}: declaring {} would make {} frontend and router ids declared in all, above "
                                  "--max-serving-load-sources ({})",
                                  who, declaring, after, config_.max_sources)};
}

std::optional<LimitRefusal> ServingLoad::refusal(const ingest_v1::FrontendLoadReport& report) const {
  const std::string who = fmt::format("frontend {} of namespace {}", report.frontend_id(), report.namespace_());
  const auto held = frontends_.find({report.namespace_(), report.frontend_id()});
  if (held == frontends_.end()) {
    if (auto refused = refusal_to_hear(who)) return refused;
  } else if (!accepted(classify(held->second.progress, false, report.incarnation(), report.sequence()))) {
    return std::nullopt;  // answered as a duplicate or a replaced incarnation: nothing of it is kept
  }
  std::size_t added = 0;
  std::size_t added_bytes = 0;
  for (const auto& model : report.models()) {
    if (totals_.contains({report.namespace_(), model.canonical_model_id()})) continue;
    ++added;
    added_bytes += report.namespace_().size() + model.canonical_model_id().size();
  }
  if (totals_.size() + added > config_.max_models) {
    return LimitRefusal{LimitRefusal::Limit::kModels,
                        fmt::format("{}: its new models ({}) would make {} models in all, above "
                                    "--max-serving-load-models ({})",
                                    who, added, totals_.size() + added, config_.max_models)};
  }
  if (model_name_bytes_ + added_bytes > config_.max_model_name_bytes) {
    return LimitRefusal{LimitRefusal::Limit::kModels,
                        fmt::format("{}: its new models' names ({} bytes) would make {} bytes of model names in all, "
                                    "above half of --max-message-bytes ({}): a window may carry them all",
                                    who, added_bytes, model_name_bytes_ + added_bytes, config_.max_model_name_bytes)};
  }
  return std::nullopt;
}

std::optional<LimitRefusal> ServingLoad::refusal(const ingest_v1::SchedulerLoadReport& report) const {
  const auto& ref = report.endpoint();
  const auto pool = pools_.find(EndpointKey{ref.namespace_(), ref.component(), ref.endpoint()});
  if (pool == pools_.end() || pool->second.routers.contains(report.router_id())) return std::nullopt;
  return refusal_to_hear(fmt::format("router {} of endpoint {}", report.router_id(), pool->first.display()));
}

std::optional<LimitRefusal> ServingLoad::refusal_to_declare(const std::string& ns,
                                                            const std::set<std::uint64_t>& ids) const {
  const auto held = declared_frontends_.find(ns);
  return declaring_past_limit(fmt::format("the frontends of namespace {}", ns),
                              held == declared_frontends_.end() ? 0 : held->second.size(), ids.size());
}

std::optional<LimitRefusal> ServingLoad::refusal_to_declare(const EndpointKey& endpoint,
                                                            const std::set<std::uint64_t>& ids) const {
  const auto held = declared_routers_.find(endpoint);
  return declaring_past_limit(fmt::format("the routers of endpoint {}", endpoint.display()),
                              held == declared_routers_.end() ? 0 : held->second.size(), ids.size());
}

// ---- reports ----

ingest_v1::ReportOutcome ServingLoad::classify(const Progress& progress, bool first_heard, std::uint64_t incarnation,
                                               std::uint64_t sequence) {
  if (first_heard) return ingest_v1::REPORT_OUTCOME_APPLIED;
  if (incarnation == progress.incarnation) {
    return sequence <= progress.sequence ? ingest_v1::REPORT_OUTCOME_DUPLICATE : ingest_v1::REPORT_OUTCOME_APPLIED;
  }
  if (std::ranges::count(progress.replaced, incarnation) > 0) return ingest_v1::REPORT_OUTCOME_REPLACED_INCARNATION;
  return ingest_v1::REPORT_OUTCOME_RESTARTED;
}

ingest_v1::ReportOutcome ServingLoad::advance(Progress& progress, bool first_heard, std::uint64_t incarnation,
                                              std::uint64_t sequence, TimePoint now) {
  const auto outcome = classify(progress, first_heard, incarnation, sequence);
  if (!accepted(outcome)) return outcome;
  if (outcome == ingest_v1::REPORT_OUTCOME_RESTARTED) {
    progress.replaced.push_back(progress.incarnation);
    if (progress.replaced.size() > kReplacedIncarnations) progress.replaced.erase(progress.replaced.begin());
  }
  progress.incarnation = incarnation;
  progress.sequence = sequence;
  progress.accepted = now;
  return outcome;
}

ingest_v1::ReportOutcome ServingLoad::report_frontend(const ingest_v1::FrontendLoadReport& report, TimePoint now,
                                                      std::uint64_t wall_ms) {
  const auto [found, first_heard] = frontends_.try_emplace({report.namespace_(), report.frontend_id()});
  Frontend& frontend = found->second;
  const auto outcome = advance(frontend.progress, first_heard, report.incarnation(), report.sequence(), now);
  if (!accepted(outcome)) return outcome;
  if (outcome == ingest_v1::REPORT_OUTCOME_RESTARTED) frontend.baselines.clear();
  fold_totals(report, frontend.baselines);
  // Kept for the windows, which read its readiness and each model's id and gauges: aliases
  // (informational, any number of them) and the totals, folded already, are not held.
  frontend.report = report;
  for (auto& model : *frontend.report.mutable_models()) {
    model.clear_aliases();
    model.clear_totals();
  }
  frontend.published_ms = report.published_ms() != 0 ? report.published_ms() : wall_ms;
  return outcome;
}

void ServingLoad::fold_totals(const ingest_v1::FrontendLoadReport& report, std::map<std::string, Counters>& baselines) {
  for (const auto& model : report.models()) {
    const auto& totals = model.totals();
    const Counters current{totals.requests_started(),   totals.requests_completed(), totals.requests_failed(),
                           totals.requests_cancelled(), totals.input_tokens(),       totals.output_tokens()};
    // A model first heard from this incarnation has a zero baseline: all of its counters are new.
    Counters& baseline = baselines[model.canonical_model_id()];
    const auto [held, added] = totals_.try_emplace({report.namespace_(), model.canonical_model_id()});
    if (added) model_name_bytes_ += report.namespace_().size() + model.canonical_model_id().size();
    Counters& sum = held->second;
    for (std::size_t i = 0; i < current.size(); ++i) sum[i] = saturating_add(sum[i], growth(current[i], baseline[i]));
    baseline = current;
  }
}

SchedulerOutcome ServingLoad::report_scheduler(const ingest_v1::SchedulerLoadReport& report, TimePoint now,
                                               std::uint64_t wall_ms) {
  const auto& ref = report.endpoint();
  const std::uint32_t listed = saturate_u32(report.ranks_size());
  const auto found = pools_.find(EndpointKey{ref.namespace_(), ref.component(), ref.endpoint()});
  if (found == pools_.end()) return {ingest_v1::REPORT_OUTCOME_NO_POOL, 0, listed};
  Pool& pool = found->second;
  const std::uint64_t router = report.router_id();
  const auto [progress, first_heard] = pool.routers.try_emplace(router);
  const auto outcome = advance(progress->second, first_heard, report.router_epoch(), report.sequence(), now);
  if (!accepted(outcome)) return {outcome, 0, listed};
  // A restarted router's old views describe requests the new process does not hold.
  if (outcome == ingest_v1::REPORT_OUTCOME_RESTARTED) {
    std::erase_if(pool.views, [&](const auto& entry) { return entry.first.second == router; });
  }
  const GroupKey group = report.replica_group().empty() ? GroupKey{"", router} : GroupKey{report.replica_group(), 0};
  const std::uint64_t published_ms = report.published_ms() != 0 ? report.published_ms() : wall_ms;
  SchedulerOutcome result{outcome, 0, 0};
  for (const auto& rank : report.ranks()) {
    const RankKey key{rank.worker_id(), rank.dp_rank()};
    if (!pool.declared.contains(key)) {
      ++result.ranks_ignored;
      continue;
    }
    pool.views[{key, router}] =
        View{rank.active_decode_blocks(), rank.active_prefill_tokens(), group, published_ms, now};
    ++result.ranks_recorded;
  }
  return result;
}

void ServingLoad::build(TimePoint now, v1::ServingLoadUpdate& update) {
  forget_expired(now);
  std::vector<std::pair<wire::PoolKey, const Pool*>> ordered;
  for (const auto& [endpoint, pool] : pools_)
    ordered.emplace_back(wire::pool_key(pool.facts.producer.pool_id()), &pool);
  std::ranges::stable_sort(ordered, {}, &std::pair<wire::PoolKey, const Pool*>::first);
  for (const auto& [key, pool] : ordered) fill_pool(*pool, now, *update.add_pools());
  fill_models(now, update);
}

void ServingLoad::forget_expired(TimePoint now) {
  const auto silent = [&](const Progress& progress) { return now - progress.accepted > config_.retention; };
  std::erase_if(frontends_, [&](const auto& entry) {
    return silent(entry.second.progress) && !declared_frontend(entry.first.first, entry.first.second);
  });
  for (auto& [endpoint, pool] : pools_) {
    std::erase_if(pool.routers, [&](const auto& entry) { return silent(entry.second); });
    // A stale view never counts again (only a newer report replaces it), so it is dropped.
    std::erase_if(pool.views, [&](const auto& entry) { return !fresh(entry.second.received, now); });
  }
}

bool ServingLoad::fresh(TimePoint received, TimePoint now) const { return now - received <= config_.freshness; }

bool ServingLoad::declared_frontend(const std::string& ns, std::uint64_t frontend_id) const {
  const auto found = declared_frontends_.find(ns);
  return found != declared_frontends_.end() && found->second.contains(frontend_id);
}

void ServingLoad::fill_pool(const Pool& pool, TimePoint now, v1::PoolServingLoad& out) const {
  *out.mutable_producer() = pool.facts.producer;
  *out.mutable_deployment() = pool.deployment;
  auto* load = out.mutable_load();
  auto* tokens = load->mutable_tokens();
  std::map<std::uint64_t, std::size_t> ranks_by_router;  // C(r): declared ranks with a counted view
  std::map<std::pair<RankKey, GroupKey>, std::pair<std::uint64_t, std::uint64_t>> groups;  // (decode, prefill)
  std::uint64_t oldest_published_ms = kMax;
  for (const auto& [key, view] : pool.views) {
    if (!pool.declared.contains(key.first) || !fresh(view.received, now)) continue;
    ++ranks_by_router[key.second];
    oldest_published_ms = std::min(oldest_published_ms, view.published_ms);
    // Routers of one replica group see the same requests: the group's value is their maximum.
    auto& [decode, prefill] = groups[{key.first, view.group}];
    decode = std::max(decode, view.active_decode_blocks);
    prefill = std::max(prefill, view.active_prefill_tokens);
  }
  if (ranks_by_router.empty()) {
    load->set_status(v1::DATA_STATUS_UNAVAILABLE);
    load->set_source_observed_ms(0);
    return;
  }
  load->set_source_observed_ms(oldest_published_ms);
  if (!every_router_covers(pool, ranks_by_router)) {
    load->set_status(v1::DATA_STATUS_DEGRADED);
    return;
  }
  load->set_status(v1::DATA_STATUS_COMPLETE);
  std::uint64_t decode_sum = 0;
  std::uint64_t prefill_sum = 0;
  for (const auto& [key, value] : groups) {
    decode_sum = saturating_add(decode_sum, value.first);
    prefill_sum = saturating_add(prefill_sum, value.second);
  }
  tokens->set_active_decode_blocks(decode_sum);
  tokens->set_active_prefill_tokens(prefill_sum);
}

// docs/protocol/serving-load.md#pool-status: every expected router (declared, or with a counted
// view) has a counted view of every declared rank.
bool ServingLoad::every_router_covers(const Pool& pool,
                                      const std::map<std::uint64_t, std::size_t>& ranks_by_router) const {
  const std::size_t all = pool.declared.size();
  const bool heard_cover = std::ranges::all_of(ranks_by_router, [&](const auto& entry) { return entry.second == all; });
  const auto declared = declared_routers_.find(pool.facts.endpoint);
  if (!heard_cover || declared == declared_routers_.end()) return heard_cover;
  return std::ranges::all_of(declared->second, [&](std::uint64_t router) { return ranks_by_router.contains(router); });
}

void ServingLoad::fill_models(TimePoint now, v1::ServingLoadUpdate& update) const {
  std::map<ModelKey, ModelEntry> entries;
  for (const auto& [endpoint, pool] : pools_) {
    for (const std::string& model : pool.facts.models) {
      const auto& pool_id = pool.facts.producer.pool_id();
      entries[{endpoint.ns, model}].serving_pools.emplace(wire::pool_key(pool_id), pool_id);
    }
  }
  std::map<std::string, Coverage> coverage;  // by namespace
  for (const auto& [ns, ids] : declared_frontends_) coverage[ns].expected = ids.size();
  for (const auto& [key, frontend] : frontends_) {
    if (!fresh(frontend.progress.accepted, now)) continue;
    Coverage& namespace_coverage = coverage[key.first];
    ++namespace_coverage.observed;
    if (!declared_frontend(key.first, key.second)) ++namespace_coverage.expected;
    namespace_coverage.oldest_published_ms = std::min(namespace_coverage.oldest_published_ms, frontend.published_ms);
    for (const auto& model : frontend.report.models()) {
      ModelEntry& entry = entries[{key.first, model.canonical_model_id()}];
      entry.add(model.gauges());
      if (frontend.report.serving_ready()) ++entry.ready_frontends;
    }
  }
  for (const auto& [key, entry] : entries) {
    v1::ModelServingLoad& out = *update.add_models();
    out.set_namespace_(key.first);
    out.set_canonical_model_id(key.second);
    const auto found_totals = totals_.find(key);
    write_model(entry, coverage[key.first], found_totals != totals_.end() ? found_totals->second : Counters{}, out);
  }
}

}  // namespace kvrelay::serving_load
