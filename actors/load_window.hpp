#pragma once
// Pool load windows: the latest kv_used_blocks per (worker, dp_rank) of every materialized
// pool, published as one complete window every window_ms whether or not anything changed.
#include <caf/all.hpp>

#include <map>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/window_fanout.hpp"
#include "core/wire_validation.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// The load windows, as membership, the ingest gateway and load streams see them.
using LoadWindowActor = caf::typed_actor<
    // The set of pools; a pool keeps its observations while its lineage is unchanged.
    caf::reacts_to<atoms::load_pools_atom, std::vector<LoadPool>>,
    caf::reacts_to<atoms::report_atom, LoadReportBatch>,                  // the outcome goes to the batch's reply
    caf::reacts_to<atoms::forget_load_atom, EndpointKey, std::uint64_t>,  // that worker's ranks: unobserved
    // The same, if the sender made the latest report of that worker (an engine scraper that
    // stops or keeps failing: its successor may have reported since).
    caf::reacts_to<atoms::forget_reports_atom, EndpointKey, std::uint64_t>,
    caf::reacts_to<atoms::subscribe_atom, UpdateStreamActor<LoadBroadcast>>,
    caf::reacts_to<atoms::shutdown_atom, RpcStatus>,  // end every stream with this status
    caf::reacts_to<atoms::tick_atom>,                 // its window timer
    caf::reacts_to<atoms::sample_atom>>;              // its mailbox sampling timer

struct LoadWindowState {
  struct Pool {
    v1::ProducerIdentity producer;
    std::uint64_t lineage = 0;  // PoolFacts::lineage
    PoolLoad load;
    std::shared_ptr<metrics::PoolStats> stats;  // where its coverage is published, or none
    // Who sent each worker's latest applied report (null: a call of the ingest API).
    std::map<std::uint64_t, caf::actor_addr> reporters;
    std::string capacity_error;  // why its declared ranks could not be read, as last logged
  };
  v1::RelayIdentity relay;
  std::chrono::milliseconds window{1000};
  std::map<EndpointKey, Pool> pools;
  WindowFanout<LoadBroadcast> windows;
  metrics::RelayMetrics* metrics = nullptr;
  MailboxSampler mailbox;
  static inline const char* name = "load-window";
};

// `metrics` may be null (nothing is recorded).
LoadWindowActor::behavior_type load_window(LoadWindowActor::stateful_pointer<LoadWindowState> self,
                                           v1::RelayIdentity relay, std::chrono::milliseconds window,
                                           metrics::RelayMetrics* metrics);

// Wall-clock milliseconds since the Unix epoch (0 before it).
std::uint64_t wall_clock_ms();

}  // namespace kvrelay
