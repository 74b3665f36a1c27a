#pragma once
// Pool load windows: the latest kv_used_blocks per (worker, dp_rank) of every materialized
// pool, published as one complete window every window_ms whether or not anything changed.
#include <caf/all.hpp>

#include <map>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"
#include "actors/schedule.hpp"
#include "actors/subscribers.hpp"
#include "core/wire_validation.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

struct LoadWindowState {
  struct Pool {
    v1::ProducerIdentity producer;
    PoolLoad load;
    std::shared_ptr<metrics::PoolStats> stats;  // where its coverage is published, or none
  };
  v1::RelayIdentity relay;
  std::chrono::milliseconds window{1000};
  std::map<EndpointKey, Pool> pools;
  std::uint64_t window_sequence = 0;
  LoadUpdatePtr current;
  FixedSchedule schedule;
  Subscribers streams;
  metrics::RelayMetrics* metrics = nullptr;
  MailboxSampler mailbox;
  static inline const char* name = "load-window";
};

// Messages: (pools_atom, std::vector<LoadPool>) replaces the set of pools (a pool keeps its
// observations while its producer identity is unchanged); (report_atom, LoadReportBatch);
// (subscribe_atom, stream); (shutdown_atom, RpcStatus); (tick_atom) internal.
// `metrics` may be null (nothing is recorded).
caf::behavior load_window(caf::stateful_actor<LoadWindowState>* self, v1::RelayIdentity relay,
                          std::chrono::milliseconds window, metrics::RelayMetrics* metrics);

// Wall-clock milliseconds since the Unix epoch (0 before it).
std::uint64_t wall_clock_ms();

}  // namespace kvrelay
