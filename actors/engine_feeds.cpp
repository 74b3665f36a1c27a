#include "actors/engine_feeds.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <google/protobuf/util/message_differencer.h>

namespace kvrelay {

namespace {

using google::protobuf::util::MessageDifferencer;

engine_load::EngineKind engine_kind(ingest_v1::EngineKind kind) {
  return kind == ingest_v1::ENGINE_KIND_SGLANG ? engine_load::EngineKind::kSglang : engine_load::EngineKind::kVllm;
}

std::chrono::milliseconds scrape_interval(const ingest_v1::EngineMetricsSource& source) {
  return std::chrono::milliseconds(source.interval_ms() == 0 ? 1000 : source.interval_ms());
}

hashing::HashFormat hash_format(const ingest_v1::ModelCard& card) {
  return card.runtime_config().enable_eagle() ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard;
}

template <class Stats, class Collector>
std::shared_ptr<Stats> published_stats(metrics::RelayMetrics* metrics, Collector& (metrics::RelayMetrics::*collector)(),
                                       typename Collector::Key key) {
  auto stats = std::make_shared<Stats>();
  if (metrics != nullptr) (metrics->*collector)().publish(std::move(key), stats);
  return stats;
}

std::vector<std::string> source_key(const SourceId& id) {
  return {id.endpoint.label(), std::to_string(id.worker_id), std::to_string(id.dp_rank)};
}

std::vector<std::string> scraper_key(const std::pair<EndpointKey, std::uint64_t>& id) {
  return {id.first.label(), std::to_string(id.second)};
}

}  // namespace

bool EngineFeeds::SourceSpec::operator==(const SourceSpec& other) const {
  return MessageDifferencer::Equals(zmq, other.zmq) && decoder.block_size == other.decoder.block_size &&
         decoder.format == other.decoder.format && decoder.dp_rank == other.decoder.dp_rank;
}

bool EngineFeeds::ScraperSpec::operator==(const ScraperSpec& other) const {
  return url == other.url && interval == other.interval && query.kind == other.query.kind &&
         query.default_rank == other.query.default_rank && query.block_size == other.query.block_size;
}

std::optional<EngineFeeds::SourceSpec> EngineFeeds::spec_of(const ingest_v1::ModelCard& card,
                                                            const ingest_v1::KvSource& source) {
  if (!source.has_zmq()) return std::nullopt;
  return SourceSpec{source.zmq(), {card.kv_cache_block_size(), hash_format(card), source.dp_rank()}};
}

bool EngineFeeds::read_differently(const ingest_v1::ModelCard& card_before, const ingest_v1::KvSource& before,
                                   const ingest_v1::ModelCard& card_after, const ingest_v1::KvSource& after) {
  return spec_of(card_before, before) != spec_of(card_after, after);  // nullopt for push: a switch differs too
}

void EngineFeeds::reconcile(caf::local_actor* owner, const std::map<EndpointKey, membership::WorkerCards>& workers,
                            const LoadWindowActor& load) {
  std::map<SourceId, SourceSpec> wanted_sources;
  std::map<ScraperId, ScraperSpec> wanted_scrapers;
  for (const auto& [endpoint, cards] : workers) {
    for (const auto& [worker_id, spec] : cards) {
      const auto& card = spec.card();
      for (const auto& source : spec.kv_sources()) {
        auto read_as = spec_of(card, source);
        if (!read_as || config_.io == nullptr) continue;
        wanted_sources[{endpoint, worker_id, source.dp_rank()}] = std::move(*read_as);
      }
      if (spec.has_engine_metrics() && config_.http != nullptr) {
        const auto& metrics = spec.engine_metrics();
        wanted_scrapers[{endpoint, worker_id}] =
            ScraperSpec{metrics.url(),
                        scrape_interval(metrics),
                        {engine_kind(metrics.kind()), card.runtime_config().data_parallel_start_rank(),
                         card.kv_cache_block_size()}};
      }
    }
  }
  for (auto it = sources_.begin(); it != sources_.end();) {
    const auto wanted = wanted_sources.find(it->first);
    const bool keep = wanted != wanted_sources.end() && wanted->second == it->second.spec;
    ++it;
    if (!keep) stop_source(std::prev(it)->first);
  }
  for (auto& [id, spec] : wanted_sources) {
    if (!sources_.contains(id)) start_source(owner, id, std::move(spec));
  }
  for (auto it = scrapers_.begin(); it != scrapers_.end();) {
    const auto wanted = wanted_scrapers.find(it->first);
    const bool keep = wanted != wanted_scrapers.end() && wanted->second == it->second.spec;
    ++it;
    if (!keep) stop_scraper(std::prev(it)->first);
  }
  for (auto& [id, spec] : wanted_scrapers) {
    if (!scrapers_.contains(id)) start_scraper(owner, id, std::move(spec), load);
  }
}

void EngineFeeds::start_source(caf::local_actor* owner, const SourceId& id, SourceSpec spec) {
  EngineSourceConfig config;
  config.source = id;
  config.zmq = spec.zmq;
  config.decoder = spec.decoder;
  config.incarnation = ++incarnations_;
  config.replay_timeout = config_.replay_timeout;
  config.max_message_bytes = config_.max_message_bytes;
  // What a replay may hold back grows with the frames an engine may send.
  config.held_during_replay.bytes = std::max(config.held_during_replay.bytes, 4 * config_.max_message_bytes);
  config.io = config_.io;
  config.links = caf::actor_cast<SourceLinksActor>(owner);
  config.router = config_.router;
  config.stats =
      published_stats<metrics::SourceStats>(config_.metrics, &metrics::RelayMetrics::sources, source_key(id));
  spdlog::info("engine source started: {} worker={} rank={} endpoint={} replay={}", id.endpoint.display(), id.worker_id,
               id.dp_rank, spec.zmq.endpoint(),
               spec.zmq.replay_endpoint().empty() ? "none" : spec.zmq.replay_endpoint());
  // Linked: a source actor that fails is a bug, and takes the relay down loudly.
  auto actor = owner->spawn<caf::linked>(engine_source, std::move(config));
  sources_.emplace(id, RunningSource{std::move(spec), std::move(actor), false});
}

void EngineFeeds::stop_source(const SourceId& id) {
  const auto it = sources_.find(id);
  if (it == sources_.end()) return;
  caf::anon_send(it->second.actor, atoms::stop_atom_v);
  if (config_.metrics != nullptr) config_.metrics->sources().withdraw(source_key(id));
  sources_.erase(it);
}

void EngineFeeds::start_scraper(caf::local_actor* owner, const ScraperId& id, ScraperSpec spec,
                                const LoadWindowActor& load) {
  EngineScraperConfig config;
  config.endpoint = id.first;
  config.worker_id = id.second;
  config.url = spec.url;
  config.interval = spec.interval;
  config.query = spec.query;
  config.http = config_.http;
  config.load = load;
  config.stats =
      published_stats<metrics::ScrapeStats>(config_.metrics, &metrics::RelayMetrics::scrapes, scraper_key(id));
  spdlog::info("engine metrics scraper started: {} worker={} url={}", id.first.display(), id.second, spec.url);
  auto actor = owner->spawn<caf::linked>(engine_scraper, std::move(config));
  scrapers_.emplace(id, RunningScraper{std::move(spec), std::move(actor)});
}

void EngineFeeds::stop_scraper(const ScraperId& id) {
  const auto it = scrapers_.find(id);
  if (it == scrapers_.end()) return;
  caf::anon_send(it->second.actor, atoms::stop_atom_v);
  if (config_.metrics != nullptr) config_.metrics->scrapes().withdraw(scraper_key(id));
  scrapers_.erase(it);
}

void EngineFeeds::stop_all() {
  while (!sources_.empty()) stop_source(sources_.begin()->first);
  while (!scrapers_.empty()) stop_scraper(scrapers_.begin()->first);
}

bool EngineFeeds::is_current(const caf::strong_actor_ptr& sender, const SourceId& id) const {
  const auto it = sources_.find(id);
  return it != sources_.end() && sender != nullptr &&
         sender == caf::actor_cast<caf::strong_actor_ptr>(it->second.actor);
}

bool EngineFeeds::set_link(const caf::strong_actor_ptr& sender, const SourceId& id, bool connected) {
  if (!is_current(sender, id)) return false;
  bool& state = sources_.at(id).connected;
  if (state == connected) return false;
  state = connected;
  return true;
}

bool EngineFeeds::connected(const SourceId& id) const {
  const auto it = sources_.find(id);
  return it != sources_.end() && it->second.connected;
}

std::map<SourceId, EngineSourceActor> EngineFeeds::sources() const {
  std::map<SourceId, EngineSourceActor> actors;
  for (const auto& [id, running] : sources_) actors.emplace(id, running.actor);
  return actors;
}

}  // namespace kvrelay
