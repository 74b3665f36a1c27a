#pragma once
// The engine feeds membership runs (docs/protocol/engine-sources.md): one source actor per
// declared ZeroMQ KV source and one scraper per worker that names an engine metrics URL, each
// restarted when its declaration changes and stopped when it goes. Membership owns this and
// asks it which sources are connected (a connected source keeps its pool materialized) and
// which actor reads each source now (its lane refuses batches from any other).
#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "actors/engine_scraper.hpp"
#include "actors/engine_source.hpp"
#include "actors/load_window.hpp"
#include "actors/source_lanes.hpp"
#include "core/membership.hpp"

namespace kvrelay {

struct EngineFeedsConfig {
  engine_io::ZmqIo* io = nullptr;          // none: ZeroMQ sources are declared but not read
  engine_io::HttpScraper* http = nullptr;  // none: engine metrics are declared but not scraped
  std::chrono::milliseconds replay_timeout{5000};
  std::size_t max_message_bytes = std::size_t{64} << 20;  // --max-engine-message-bytes
  metrics::RelayMetrics* metrics = nullptr;               // none: a private stats object per feed
  BatchRouter router;                                     // how engine sources hand their batches on (membership's)
};

class EngineFeeds {
 public:
  explicit EngineFeeds(EngineFeedsConfig config = {}) : config_(std::move(config)) {}

  // Starts, restarts and stops feeds to match the workers' cards. Feeds are linked to `owner`.
  void reconcile(caf::local_actor* owner, const std::map<EndpointKey, membership::WorkerCards>& workers,
                 const LoadWindowActor& load);
  void stop_all();

  // A source's connection report; false when nothing changed or the sender is not current.
  bool set_link(const caf::strong_actor_ptr& sender, const SourceId& id, bool connected);
  bool connected(const SourceId& id) const;

  // GetState: every running source actor, by source.
  std::map<SourceId, EngineSourceActor> sources() const;

  // Whether a source declared again, under the same worker and rank, is read otherwise from now
  // on: another transport, or for a ZeroMQ source another engine address, replay address, topic,
  // block size or hash format (its actor is replaced). The blocks it gave so far came from what
  // was declared before.
  static bool read_differently(const ingest_v1::ModelCard& card_before, const ingest_v1::KvSource& before,
                               const ingest_v1::ModelCard& card_after, const ingest_v1::KvSource& after);

 private:
  struct SourceSpec {
    ingest_v1::ZmqSource zmq;
    engine::DecoderConfig decoder;
    bool operator==(const SourceSpec& other) const;
  };
  // How a ZeroMQ source is read; nullopt for a push source.
  static std::optional<SourceSpec> spec_of(const ingest_v1::ModelCard& card, const ingest_v1::KvSource& source);
  struct RunningSource {
    SourceSpec spec;
    EngineSourceActor actor;
    bool connected = false;
  };
  struct ScraperSpec {
    std::string url;
    std::chrono::milliseconds interval{1000};
    engine_load::OccupancyQuery query;
    bool operator==(const ScraperSpec& other) const;
  };
  struct RunningScraper {
    ScraperSpec spec;
    EngineScraperActor actor;
  };
  using ScraperId = std::pair<EndpointKey, std::uint64_t>;

  bool is_current(const caf::strong_actor_ptr& sender, const SourceId& id) const;
  void start_source(caf::local_actor* owner, const SourceId& id, SourceSpec spec);
  void stop_source(const SourceId& id);
  void start_scraper(caf::local_actor* owner, const ScraperId& id, ScraperSpec spec, const LoadWindowActor& load);
  void stop_scraper(const ScraperId& id);

  EngineFeedsConfig config_;
  std::uint64_t incarnations_ = 0;
  std::map<SourceId, RunningSource> sources_;
  std::map<ScraperId, RunningScraper> scrapers_;
};

}  // namespace kvrelay
