#pragma once
// Serving-load windows (docs/protocol/serving-load.md): what frontends and routers report,
// held per namespace and per active pool generation, published as one complete
// ServingLoadUpdate every window_ms whether or not anything changed. Membership tells it the
// pools; the ingest gateway hands it the reports and the declared source sets, as requests.
#include <caf/all.hpp>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/window_fanout.hpp"
#include "core/serving_load.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

using ServingLoadWindowActor = caf::typed_actor<
    // The active pools; a pool keeps its router views while its lineage is unchanged.
    caf::reacts_to<atoms::load_pools_atom, std::vector<LoadPool>>,
    caf::replies_to<atoms::frontend_load_atom,
                    ingest_v1::FrontendLoadReport>::with<ingest_v1::ReportFrontendLoadResponse>,
    caf::replies_to<atoms::scheduler_load_atom,
                    ingest_v1::SchedulerLoadReport>::with<ingest_v1::ReportSchedulerLoadResponse>,
    caf::replies_to<atoms::frontends_atom, ingest_v1::SetFrontendsRequest>::with<ingest_v1::SetFrontendsResponse>,
    caf::replies_to<atoms::schedulers_atom, ingest_v1::SetSchedulersRequest>::with<ingest_v1::SetSchedulersResponse>,
    caf::reacts_to<atoms::subscribe_atom, UpdateStreamActor<ServingLoadBroadcast>>,
    caf::reacts_to<atoms::shutdown_atom, RpcStatus>,  // end every stream with this status
    caf::reacts_to<atoms::tick_atom>,                 // its window timer
    caf::reacts_to<atoms::sample_atom>>;              // its mailbox sampling timer

struct ServingLoadWindowConfig {
  v1::RelayIdentity relay;
  std::chrono::milliseconds window{1000};
  serving_load::Config sources;
  metrics::RelayMetrics* metrics = nullptr;  // none: nothing is recorded
};

struct ServingLoadWindowState {
  ServingLoadWindowConfig config;
  serving_load::ServingLoad load;
  WindowFanout<ServingLoadBroadcast> windows;
  MailboxSampler mailbox;
  static inline const char* name = "serving-load-window";
};

ServingLoadWindowActor::behavior_type serving_load_window(
    ServingLoadWindowActor::stateful_pointer<ServingLoadWindowState> self, ServingLoadWindowConfig config);

}  // namespace kvrelay
