#pragma once
// Serving load (docs/protocol/serving-load.md): what frontends and routers report, kept per
// namespace and per active pool generation, and the pools and models of one complete
// ServingLoadUpdate window built from it. Pure: the caller passes the relay's monotonic
// receive time and wall clock; nothing here waits, sleeps or reads a clock.
//
// Sources: frontends report per namespace (FrontendLoadReport), routers per serving endpoint
// (SchedulerLoadReport). Expected sources are the declared sets (SetFrontends /
// SetSchedulers / the topology file) together with the fresh ones. A source is fresh while
// its last accepted report is at most `freshness` old; an undeclared frontend silent for more
// than `retention` is forgotten (its totals stay), and so is a router's sequence progress.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/pool_load.hpp"
#include "core/topology_model.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::serving_load {

namespace v1 = ::dynamo::kvrelay::v1;
namespace ingest_v1 = ::kvrelay::ingest::v1;

using TimePoint = std::chrono::steady_clock::time_point;

struct Config {
  std::chrono::milliseconds freshness{3000};    // a report this old is still fresh (inclusive)
  std::chrono::milliseconds retention{600000};  // >= freshness
  // docs/protocol/limits.md#serving-load-limits: frontends and routers heard from (and, apart,
  // declared), and (namespace, model) pairs whose totals are kept.
  std::size_t max_sources = 4096;
  std::size_t max_models = 4096;
  // The bytes of those pairs' names together (namespace and model id): a window names the
  // models of every fresh frontend, and it must fit one gRPC message. The relay gives half of
  // --max-message-bytes.
  std::size_t max_model_name_bytes = std::size_t{4} << 20;
};

// A call that would make the plane hold more than a limit allows: which, and why, naming the flag.
struct LimitRefusal {
  enum class Limit { kSources, kModels } limit;
  std::string message;
};

struct SchedulerOutcome {
  ingest_v1::ReportOutcome outcome = ingest_v1::REPORT_OUTCOME_UNSPECIFIED;
  std::uint32_t ranks_recorded = 0;
  std::uint32_t ranks_ignored = 0;
};

class ServingLoad {
 public:
  explicit ServingLoad(Config config = {});

  // The active pools. A pool whose lineage is unchanged (the same generation, or a re-layout of
  // it) keeps its router views and progress (only declared ranks count); a new generation starts
  // with none.
  void set_pools(std::vector<PoolFacts> pools);
  // The declared sets; each call replaces the set of that namespace / endpoint.
  void set_frontends(const std::string& ns, std::set<std::uint64_t> frontend_ids);
  void set_schedulers(const EndpointKey& endpoint, std::set<std::uint64_t> router_ids);

  // Validated reports (core/ingest_validation.hpp). `now` is the relay's monotonic receive
  // time, `wall_ms` its wall clock (Unix ms), used when the report's published_ms is 0.
  ingest_v1::ReportOutcome report_frontend(const ingest_v1::FrontendLoadReport& report, TimePoint now,
                                           std::uint64_t wall_ms);
  SchedulerOutcome report_scheduler(const ingest_v1::SchedulerLoadReport& report, TimePoint now, std::uint64_t wall_ms);

  // Why a call would pass a limit, checked before it is applied: a frontend or router not yet
  // heard from past max_sources, a report's new models past max_models, a declared set that
  // would make the declared ids of all sets more than max_sources.
  std::optional<LimitRefusal> refusal(const ingest_v1::FrontendLoadReport& report) const;
  std::optional<LimitRefusal> refusal(const ingest_v1::SchedulerLoadReport& report) const;
  std::optional<LimitRefusal> refusal_to_declare(const std::string& ns, const std::set<std::uint64_t>& ids) const;
  std::optional<LimitRefusal> refusal_to_declare(const EndpointKey& endpoint, const std::set<std::uint64_t>& ids) const;

  // Forgets what retention says to forget, then appends the window's pools (ascending PoolId)
  // and models (ascending (namespace, canonical id)) as of `now` to `update`.
  void build(TimePoint now, v1::ServingLoadUpdate& update);

 private:
  // Incarnations (or epochs) a source keeps as replaced: a late report from any of them, as from
  // a process a rolling update left running, is REPLACED_INCARNATION, not a restart
  // (docs/protocol/decisions.md#d42).
  static constexpr std::size_t kReplacedIncarnations = 8;
  // Dedupe state of one source: a frontend incarnation or a router epoch.
  struct Progress {
    std::uint64_t incarnation = 0;
    std::vector<std::uint64_t> replaced;  // the latest kReplacedIncarnations, oldest first
    std::uint64_t sequence = 0;
    TimePoint accepted;  // receive time of the last accepted report; ignored ones never move it
  };
  // The six RequestTotals counters, in field order.
  using Counters = std::array<std::uint64_t, 6>;
  struct Frontend {
    Progress progress;
    ingest_v1::FrontendLoadReport report;       // the last accepted one, without aliases and totals
    std::uint64_t published_ms = 0;             // its published_ms, or the receive wall time
    std::map<std::string, Counters> baselines;  // by canonical model id; per incarnation
  };
  // A replica group is (name, 0); a standalone router is its own group ("", router id).
  using GroupKey = std::pair<std::string, std::uint64_t>;
  struct View {
    std::uint64_t active_decode_blocks = 0;
    std::uint64_t active_prefill_tokens = 0;
    GroupKey group;
    std::uint64_t published_ms = 0;
    TimePoint received;
  };
  struct Pool {
    PoolFacts facts;
    DeclaredRanks declared;  // D(P); empty when the rank configuration is invalid
    v1::PoolDeploymentStatus deployment;
    std::map<std::pair<RankKey, std::uint64_t>, View> views;  // by (rank, router id)
    std::map<std::uint64_t, Progress> routers;                // by router id
  };
  using ModelKey = std::pair<std::string, std::string>;  // (namespace, canonical model id)

  // Classifies a report against its source's progress.
  static ingest_v1::ReportOutcome classify(const Progress& progress, bool first_heard, std::uint64_t incarnation,
                                           std::uint64_t sequence);
  // Classifies a report against its source's progress and advances it if accepted.
  static ingest_v1::ReportOutcome advance(Progress& progress, bool first_heard, std::uint64_t incarnation,
                                          std::uint64_t sequence, TimePoint now);
  void fold_totals(const ingest_v1::FrontendLoadReport& report, std::map<std::string, Counters>& baselines);
  void forget_expired(TimePoint now);
  bool fresh(TimePoint received, TimePoint now) const;
  bool declared_frontend(const std::string& ns, std::uint64_t frontend_id) const;
  void fill_pool(const Pool& pool, TimePoint now, v1::PoolServingLoad& out) const;
  bool every_router_covers(const Pool& pool, const std::map<std::uint64_t, std::size_t>& ranks_by_router) const;
  void fill_models(TimePoint now, v1::ServingLoadUpdate& update) const;
  std::size_t heard_sources() const;
  std::size_t declared_sources() const;
  std::optional<LimitRefusal> refusal_to_hear(const std::string& who) const;
  std::optional<LimitRefusal> declaring_past_limit(const std::string& who, std::size_t held_by_it,
                                                   std::size_t declaring) const;

  Config config_;
  std::map<EndpointKey, Pool> pools_;
  std::map<std::string, std::set<std::uint64_t>> declared_frontends_;  // by namespace
  std::map<EndpointKey, std::set<std::uint64_t>> declared_routers_;
  std::map<std::pair<std::string, std::uint64_t>, Frontend> frontends_;  // by (namespace, frontend id)
  std::map<ModelKey, Counters> totals_;
  std::size_t model_name_bytes_ = 0;  // of totals_' keys
};

}  // namespace kvrelay::serving_load
