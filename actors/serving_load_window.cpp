#include "actors/serving_load_window.hpp"

#include <fmt/format.h>

#include "actors/crash_report.hpp"
#include "actors/ingest_refusal.hpp"
#include "actors/load_window.hpp"
#include "core/ingest_validation.hpp"
#include "core/rate_limited_log.hpp"

namespace kvrelay {

namespace {

using Self = ServingLoadWindowActor::stateful_pointer<ServingLoadWindowState>;

ServingLoadUpdatePtr build_window(Self self, std::uint64_t sequence) {
  auto& state = self->state;
  v1::ServingLoadUpdate update;
  update.set_protocol_version(wire::kProtocolVersion);
  *update.mutable_relay() = state.config.relay;
  update.set_window_sequence(sequence);
  update.set_observed_ms(wall_clock_ms());
  update.set_window_ms(static_cast<std::uint64_t>(state.config.window.count()));
  state.load.build(self->clock().now(), update);
  update.set_contract_marker(wire::kContractMarker);
  return std::make_shared<const ServingLoadBroadcast>(std::move(update));
}

void set_pools(Self self, const std::vector<LoadPool>& pools) {
  std::vector<PoolFacts> facts;
  for (const LoadPool& pool : pools) facts.push_back(pool.facts);
  self->state.load.set_pools(std::move(facts));
}

void count_report(Self self, metrics::ServingLoadSource source, ingest_v1::ReportOutcome outcome) {
  if (auto* metrics = self->state.config.metrics) metrics->serving_load_report(source, outcome);
}

// A call past a serving-load limit: counted, logged (rate-limited) and answered as a refusal,
// which the gateway turns into RESOURCE_EXHAUSTED.
caf::error refuse(Self self, std::string_view call, serving_load::LimitRefusal refusal) {
  static RateLimitedLog log;
  log.warn(fmt::format("refused {}: {}", call, refusal.message));
  if (auto* metrics = self->state.config.metrics) {
    metrics->ingest_limit_refused(refusal.limit == serving_load::LimitRefusal::Limit::kModels
                                      ? metrics::IngestLimit::kServingLoadModels
                                      : metrics::IngestLimit::kServingLoadSources);
  }
  return ingest_refusal(std::move(refusal.message));
}

caf::result<ingest_v1::ReportFrontendLoadResponse> on_frontend(Self self, const ingest_v1::FrontendLoadReport& report) {
  if (auto refused = self->state.load.refusal(report)) return refuse(self, "ReportFrontendLoad", std::move(*refused));
  ingest_v1::ReportFrontendLoadResponse response;
  response.set_outcome(self->state.load.report_frontend(report, self->clock().now(), wall_clock_ms()));
  count_report(self, metrics::ServingLoadSource::kFrontend, response.outcome());
  return response;
}

caf::result<ingest_v1::ReportSchedulerLoadResponse> on_scheduler(Self self,
                                                                 const ingest_v1::SchedulerLoadReport& report) {
  if (auto refused = self->state.load.refusal(report)) return refuse(self, "ReportSchedulerLoad", std::move(*refused));
  const auto outcome = self->state.load.report_scheduler(report, self->clock().now(), wall_clock_ms());
  ingest_v1::ReportSchedulerLoadResponse response;
  response.set_outcome(outcome.outcome);
  response.set_ranks_recorded(outcome.ranks_recorded);
  response.set_ranks_ignored(outcome.ranks_ignored);
  count_report(self, metrics::ServingLoadSource::kScheduler, outcome.outcome);
  return response;
}

}  // namespace

ServingLoadWindowActor::behavior_type serving_load_window(Self self, ServingLoadWindowConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  state.load = serving_load::ServingLoad(state.config.sources);
  state.mailbox.start(self, metrics::mailbox_gauge(state.config.metrics, metrics::ActorKind::kServingLoadWindow));
  report_crashes(self, "serving-load window");
  state.windows.start(self, state.config.window,
                      [self](std::uint64_t sequence) { return build_window(self, sequence); });
  return {
      [=](atoms::load_pools_atom, const std::vector<LoadPool>& pools) { set_pools(self, pools); },
      [=](atoms::frontend_load_atom, const ingest_v1::FrontendLoadReport& report) { return on_frontend(self, report); },
      [=](atoms::scheduler_load_atom, const ingest_v1::SchedulerLoadReport& report) {
        return on_scheduler(self, report);
      },
      [=](atoms::frontends_atom,
          const ingest_v1::SetFrontendsRequest& request) -> caf::result<ingest_v1::SetFrontendsResponse> {
        std::set<std::uint64_t> ids(request.frontend_ids().begin(), request.frontend_ids().end());
        if (auto refused = self->state.load.refusal_to_declare(request.namespace_(), ids)) {
          return refuse(self, "SetFrontends", std::move(*refused));
        }
        self->state.load.set_frontends(request.namespace_(), std::move(ids));
        return ingest_v1::SetFrontendsResponse{};
      },
      [=](atoms::schedulers_atom,
          const ingest_v1::SetSchedulersRequest& request) -> caf::result<ingest_v1::SetSchedulersResponse> {
        const EndpointKey endpoint = ingest_check::endpoint_key(request.endpoint());
        std::set<std::uint64_t> ids(request.router_ids().begin(), request.router_ids().end());
        if (auto refused = self->state.load.refusal_to_declare(endpoint, ids)) {
          return refuse(self, "SetSchedulers", std::move(*refused));
        }
        self->state.load.set_schedulers(endpoint, std::move(ids));
        return ingest_v1::SetSchedulersResponse{};
      },
      [=](atoms::subscribe_atom, const UpdateStreamActor<ServingLoadBroadcast>& stream) {
        self->state.windows.subscribe(self, stream);
      },
      [=](atoms::shutdown_atom, const RpcStatus& status) { self->state.windows.end_all(self, status); },
      [=](atoms::tick_atom) { self->state.windows.tick(self); },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
