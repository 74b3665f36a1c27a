#include "actors/load_window.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/crash_report.hpp"
#include "core/rate_limited_log.hpp"

namespace kvrelay {

namespace {

using Self = LoadWindowActor::stateful_pointer<LoadWindowState>;

LoadUpdatePtr build_window(const LoadWindowState& state, std::uint64_t sequence) {
  v1::KvPoolLoadUpdate update;
  update.set_protocol_version(wire::kProtocolVersion);
  *update.mutable_relay() = state.relay;
  update.set_window_sequence(sequence);
  update.set_observed_ms(wall_clock_ms());
  update.set_window_ms(static_cast<std::uint64_t>(state.window.count()));
  std::map<wire::PoolKey, const LoadWindowState::Pool*> by_pool_id;
  for (const auto& [endpoint, pool] : state.pools) by_pool_id[wire::pool_key(pool.producer.pool_id())] = &pool;
  for (const auto& [key, pool] : by_pool_id) {
    const PoolLoadSnapshot snapshot = pool->load.snapshot();
    v1::KvPoolLoadEntry* entry = update.add_pools();
    *entry->mutable_producer() = pool->producer;
    entry->set_kv_used_blocks(snapshot.kv_used_blocks);
    entry->set_total_kv_blocks(snapshot.total_kv_blocks);
    entry->set_kv_observed_ranks(snapshot.observed_ranks);
    entry->set_kv_expected_ranks(snapshot.expected_ranks);
  }
  update.set_contract_marker(wire::kContractMarker);
  return std::make_shared<const LoadBroadcast>(std::move(update));
}

// The pool's load coverage for /metrics (kv_relay_pool_load_*_ranks).
void publish_coverage(const LoadWindowState::Pool& pool) {
  if (!pool.stats) return;
  const PoolLoadSnapshot snapshot = pool.load.snapshot();
  pool.stats->observed_ranks.store(snapshot.observed_ranks, std::memory_order_relaxed);
  pool.stats->expected_ranks.store(snapshot.expected_ranks, std::memory_order_relaxed);
}

void replace_pools(Self self, const std::vector<LoadPool>& pools) {
  std::map<EndpointKey, LoadWindowState::Pool> next;
  for (const auto& [facts, stats] : pools) {
    auto& slot = next[facts.endpoint];
    const auto existing = self->state.pools.find(facts.endpoint);
    if (existing != self->state.pools.end() && existing->second.lineage == facts.lineage) {
      slot = std::move(existing->second);  // same generation or a re-layout: observations carry over
    }
    slot.producer = facts.producer;
    slot.lineage = facts.lineage;
    slot.stats = stats;
    // Sent again at every membership change while it lasts: logged when it changes.
    const auto refreshed = slot.load.set_capacity(facts.runtime_configs);
    const std::string error = refreshed ? std::string() : refreshed.error();
    if (!error.empty() && error != slot.capacity_error) {
      spdlog::warn("load of pool {}: {}", facts.endpoint.display(), error);
    }
    slot.capacity_error = error;
    publish_coverage(slot);
  }
  self->state.pools = std::move(next);
}

// The worker's ranks are unobserved again; `only_from`, if set, must have made its latest report.
void forget_load(Self self, const EndpointKey& endpoint, std::uint64_t worker_id,
                 std::optional<caf::actor_addr> only_from = std::nullopt) {
  const auto pool = self->state.pools.find(endpoint);
  if (pool == self->state.pools.end()) return;
  auto& reporters = pool->second.reporters;
  if (only_from) {
    const auto reporter = reporters.find(worker_id);
    if (reporter == reporters.end() || reporter->second != *only_from) return;
  }
  reporters.erase(worker_id);
  pool->second.load.forget_worker(worker_id);
  publish_coverage(pool->second);
}

void apply_reports(Self self, const LoadReportBatch& batch) {
  const auto reporter = caf::actor_cast<caf::actor_addr>(self->current_sender());
  std::uint64_t applied = 0;
  for (const ingest_v1::LoadReport& report : batch.reports) {
    const EndpointKey endpoint{report.endpoint().namespace_(), report.endpoint().component(),
                               report.endpoint().endpoint()};
    const auto pool = self->state.pools.find(endpoint);
    if (pool != self->state.pools.end() &&
        pool->second.load.observe({report.worker_id(), report.dp_rank()}, report.kv_used_blocks())) {
      ++applied;
      publish_coverage(pool->second);
      pool->second.reporters[report.worker_id()] = reporter;
    } else {
      static RateLimitedLog log;
      log.warn([&] {
        return fmt::format(
            "rejected load report for endpoint={} worker={} rank={}: {}", endpoint.display(), report.worker_id(),
            report.dp_rank(),
            pool == self->state.pools.end() ? "the endpoint holds no pool" : "the pool's workers declare no such rank");
      });
    }
  }
  const std::uint64_t rejected = batch.reports.size() - applied;
  if (auto* metrics = self->state.metrics) {
    metrics->load_reports(metrics::LoadReportResult::kAccepted, applied);
    metrics->load_reports(metrics::LoadReportResult::kUnknownRank, rejected);
  }
  if (batch.reply) (*batch.reply)(LoadOutcome{applied, rejected});
}

}  // namespace

std::uint64_t wall_clock_ms() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count();
  return ms < 0 ? 0 : static_cast<std::uint64_t>(ms);
}

LoadWindowActor::behavior_type load_window(Self self, v1::RelayIdentity relay, std::chrono::milliseconds window,
                                           metrics::RelayMetrics* metrics) {
  auto& state = self->state;
  state.relay = std::move(relay);
  state.window = window;
  state.metrics = metrics;
  state.mailbox.start(self, metrics::mailbox_gauge(metrics, metrics::ActorKind::kLoadWindow));
  report_crashes(self, "load window");
  state.windows.start(self, window, [self](std::uint64_t sequence) { return build_window(self->state, sequence); });
  return {
      [=](atoms::load_pools_atom, const std::vector<LoadPool>& pools) { replace_pools(self, pools); },
      [=](atoms::report_atom, const LoadReportBatch& batch) { apply_reports(self, batch); },
      [=](atoms::forget_load_atom, const EndpointKey& endpoint, std::uint64_t worker_id) {
        forget_load(self, endpoint, worker_id);
      },
      [=](atoms::forget_reports_atom, const EndpointKey& endpoint, std::uint64_t worker_id) {
        forget_load(self, endpoint, worker_id, caf::actor_cast<caf::actor_addr>(self->current_sender()));
      },
      [=](atoms::subscribe_atom, const UpdateStreamActor<LoadBroadcast>& stream) {
        self->state.windows.subscribe(self, stream);
      },
      [=](atoms::shutdown_atom, const RpcStatus& status) { self->state.windows.end_all(self, status); },
      [=](atoms::tick_atom) { self->state.windows.tick(self); },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
