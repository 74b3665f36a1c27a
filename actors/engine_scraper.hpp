#pragma once
// Load from an engine's own Prometheus page (docs/protocol/engine-sources.md#load): every
// interval it scrapes the worker's metrics URL and reports each rank's kv_used_blocks to the
// load windows, as ReportLoad would. The GET and the reading of the page run on the HTTP scrape
// threads, so the actor never blocks and only the ranks reach its mailbox. Three failed
// scrapes in a row make the worker's load unknown until a scrape succeeds.
#include <caf/all.hpp>

#include <chrono>
#include <expected>
#include <memory>
#include <string>

#include "actors/load_window.hpp"
#include "actors/messages.hpp"
#include "core/engine_load.hpp"
#include "ingest/http_scrape.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// What one scrape made of the worker's page: each rank's occupancy, or why there is none.
using ScrapeOutcome = engine_load::OccupancyRead;

struct EngineScraperConfig {
  EndpointKey endpoint;
  std::uint64_t worker_id = 0;
  std::string url;
  std::chrono::milliseconds interval{1000};
  engine_load::OccupancyQuery query;
  std::uint32_t failures_before_unknown = 3;
  engine_io::HttpScraper* http = nullptr;  // outlives every scraper
  LoadWindowActor load;
  std::shared_ptr<metrics::ScrapeStats> stats;  // never null
};

using EngineScraperActor = caf::typed_actor<caf::reacts_to<atoms::scrape_atom>,  // the next scrape is due
                                            caf::reacts_to<atoms::scrape_atom, ScrapeOutcome>,  // a scrape's result
                                            caf::reacts_to<atoms::stop_atom>>;

struct EngineScraperState {
  EngineScraperConfig config;
  std::uint32_t failures_in_a_row = 0;
  static inline const char* name = "engine-scraper";
};

EngineScraperActor::behavior_type engine_scraper(EngineScraperActor::stateful_pointer<EngineScraperState> self,
                                                 EngineScraperConfig config);

}  // namespace kvrelay

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ScrapeOutcome)
