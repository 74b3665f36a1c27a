#include "actors/engine_scraper.hpp"

#include <spdlog/spdlog.h>

#include "actors/crash_report.hpp"
#include "core/rate_limited_log.hpp"

namespace kvrelay {

namespace {

using Self = EngineScraperActor::stateful_pointer<EngineScraperState>;

RateLimitedLog& scrape_log() {
  static RateLimitedLog log;
  return log;
}

std::int64_t steady_now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

// A scrape may take as long as the interval, within [0.5 s, 5 s].
std::chrono::milliseconds scrape_timeout(std::chrono::milliseconds interval) {
  return std::clamp(interval, std::chrono::milliseconds(500), std::chrono::milliseconds(5000));
}

// The page is read where it arrives, on the scrape thread: a page of up to 16 MiB never
// passes through the mailbox or takes an actor thread.
void scrape(Self self) {
  const auto& config = self->state.config;
  config.http->get(config.url, scrape_timeout(config.interval),
                   [handle = EngineScraperActor(self), query = config.query](engine_io::HttpResult result) {
                     ScrapeOutcome outcome = result.ok ? engine_load::read_page(result.body, query)
                                                       : std::unexpected(std::move(result.error));
                     caf::anon_send(handle, atoms::scrape_atom_v, std::move(outcome));
                   });
}

ingest_v1::LoadReport report(const EngineScraperConfig& config, const engine_load::RankOccupancy& rank) {
  ingest_v1::LoadReport report;
  report.mutable_endpoint()->set_namespace_(config.endpoint.ns);
  report.mutable_endpoint()->set_component(config.endpoint.component);
  report.mutable_endpoint()->set_endpoint(config.endpoint.endpoint);
  report.set_worker_id(config.worker_id);
  report.set_dp_rank(rank.dp_rank);
  report.set_kv_used_blocks(rank.kv_used_blocks);
  return report;
}

void succeeded(Self self, const std::vector<engine_load::RankOccupancy>& ranks) {
  auto& state = self->state;
  LoadReportBatch batch;
  for (const auto& rank : ranks) batch.reports.push_back(report(state.config, rank));
  batch.reply = std::make_shared<Reply<LoadOutcome>>([](const LoadOutcome&) {}, LoadOutcome{});
  self->send(state.config.load, atoms::report_atom_v, std::move(batch));
  state.failures_in_a_row = 0;
  state.config.stats->succeeded.fetch_add(1, std::memory_order_relaxed);
  state.config.stats->last_success_ns.store(steady_now_ns(), std::memory_order_relaxed);
}

// The ranks it observed are unobserved again, unless another reporter (a scraper that replaced
// this one) has reported them since (docs/protocol/load.md).
void forget_load(Self self) {
  self->send(self->state.config.load, atoms::forget_reports_atom_v, self->state.config.endpoint,
             self->state.config.worker_id);
}

void failed(Self self, const std::string& why) {
  auto& state = self->state;
  state.config.stats->failed.fetch_add(1, std::memory_order_relaxed);
  scrape_log().warn(fmt::format("engine metrics of {} worker={} ({}): {}", state.config.endpoint.display(),
                                state.config.worker_id, state.config.url, why));
  if (++state.failures_in_a_row == state.config.failures_before_unknown) {
    spdlog::warn("engine metrics of {} worker={}: {} failed scrapes in a row; its load is unknown until one succeeds",
                 state.config.endpoint.display(), state.config.worker_id, state.failures_in_a_row);
    forget_load(self);
  }
}

void on_result(Self self, const ScrapeOutcome& outcome) {
  if (outcome) {
    succeeded(self, *outcome);
  } else {
    failed(self, outcome.error());
  }
  self->delayed_send(self, self->state.config.interval, atoms::scrape_atom_v);
}

}  // namespace

EngineScraperActor::behavior_type engine_scraper(Self self, EngineScraperConfig config) {
  self->state.config = std::move(config);
  report_crashes(self, "engine-scraper");
  self->send(self, atoms::scrape_atom_v);
  return {
      [=](atoms::scrape_atom) { scrape(self); },
      [=](atoms::scrape_atom, const ScrapeOutcome& outcome) { on_result(self, outcome); },
      // Its last word, so that a worker that keeps its registration but drops or changes its
      // page keeps no frozen load.
      [=](atoms::stop_atom) {
        forget_load(self);
        self->quit();
      },
  };
}

}  // namespace kvrelay
