#include "ingest/demo_workload.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <list>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <unordered_map>

#include "ingest/demo_serving_load.hpp"
#include "ingest/fake_engine.hpp"
#include "ingest/fake_metrics.hpp"

namespace kvrelay {

namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace demo {

// One fake engine core (a dp rank of a worker) and the blocks it holds, least recently used
// first. Blocks are known by the engine's own ids, which chain its parent's id and the block's
// tokens, so equal prefixes have equal ids.
class EngineCache {
 public:
  // What the demo's frontends and router call what this engine serves.
  struct Serving {
    std::string ns;
    std::string model;                             // the base model's canonical id
    std::map<std::string, std::string> served_as;  // LoRA name -> the adapter's served name
  };

  EngineCache(FakeEngineOptions engine, std::uint32_t block_size, std::size_t capacity, Serving serving,
              FakeMetricsServer* page)
      : rank_(engine.dp_rank),
        engine_(std::move(engine)),
        block_size_(block_size),
        capacity_(capacity),
        serving_(std::move(serving)),
        page_(page) {}

  const Serving& serving() const { return serving_; }
  std::size_t held() const { return held_.size(); }

  // Serves one prompt: stores the full blocks it lacks, evicts at capacity. Returns the
  // prompt tokens prefill computed (those of the blocks it lacked).
  std::uint64_t serve(std::span<const std::uint32_t> tokens, const std::string& lora) {
    std::vector<std::uint64_t> chain;
    std::optional<std::uint64_t> parent;
    for (std::size_t start = 0; start + block_size_ <= tokens.size(); start += block_size_) {
      parent = engine_block_hash(parent, tokens.subspan(start, block_size_), lora);
      chain.push_back(*parent);
    }
    std::size_t first_new = 0;
    while (first_new < chain.size() && touch(chain[first_new])) ++first_new;
    if (first_new == chain.size()) return tokens.size() - chain.size() * block_size_;
    drop_orphans(std::span(chain).subspan(first_new));
    const std::optional<std::uint64_t> held_parent =
        first_new == 0 ? std::nullopt : std::optional<std::uint64_t>(chain[first_new - 1]);
    pending_.push_back(stored_blocks(tokens.subspan(first_new * block_size_), block_size_, held_parent,
                                     lora.empty() ? std::nullopt : std::optional<std::string>(lora)));
    for (std::size_t i = first_new; i < chain.size(); ++i) {
      lru_.push_back(chain[i]);
      held_[chain[i]] = std::prev(lru_.end());
    }
    evict();
    return tokens.size() - first_new * block_size_;
  }

  // Publishes what was served since the last flush as one batch, and the occupancy.
  void flush() {
    if (!pending_.empty()) engine_.publish(pending_);
    pending_.clear();
    if (page_ != nullptr) page_->set_usage(rank_, static_cast<double>(held_.size()) / static_cast<double>(capacity_));
  }

 private:
  bool touch(std::uint64_t id) {
    const auto it = held_.find(id);
    if (it == held_.end()) return false;
    lru_.splice(lru_.end(), lru_, it->second);
    return true;
  }

  // Blocks held past an evicted ancestor are stored again under the new chain: drop the old ones.
  void drop_orphans(std::span<const std::uint64_t> chain) {
    BlockRemoved removed;
    for (std::uint64_t id : chain) {
      const auto it = held_.find(id);
      if (it == held_.end()) continue;
      removed.block_hashes.push_back(id);
      lru_.erase(it->second);
      held_.erase(it);
    }
    if (!removed.block_hashes.empty()) pending_.push_back(std::move(removed));
  }

  void evict() {
    if (held_.size() <= capacity_) return;
    BlockRemoved removed;
    while (held_.size() > capacity_) {
      removed.block_hashes.push_back(lru_.front());
      held_.erase(lru_.front());
      lru_.pop_front();
    }
    pending_.push_back(std::move(removed));
  }

  std::uint32_t rank_;
  FakeEngine engine_;
  std::uint32_t block_size_;
  std::size_t capacity_;
  Serving serving_;
  FakeMetricsServer* page_;  // the worker's page; null when it has none
  std::vector<EngineEvent> pending_;
  std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> held_;
  std::list<std::uint64_t> lru_;
};

}  // namespace demo

namespace {

constexpr auto kTick = std::chrono::milliseconds(10);
constexpr std::size_t kSystemPrompts = 4;
constexpr std::size_t kConversations = 64;

// Every turn of a conversation goes to the engine its first turn went to, as a KV-aware router
// keeps a conversation where its prefix is cached: one model, and one of its adapters or none.
struct Conversation {
  std::size_t system_prompt = 0;
  std::size_t engine = 0;
  std::string adapter;  // empty = base model
  std::vector<std::uint32_t> history;
};

bool is_loopback(std::string_view host) { return host == "127.0.0.1" || host == "localhost" || host == "[::1]"; }

// "tcp://HOST:PORT" with a loopback HOST, as the address a fake engine binds; else none.
std::optional<std::string> loopback_zmq(const std::string& endpoint) {
  if (!endpoint.starts_with("tcp://")) return std::nullopt;
  const auto colon = endpoint.rfind(':');
  if (colon < 6 || !is_loopback(std::string_view(endpoint).substr(6, colon - 6))) return std::nullopt;
  return endpoint;
}

// "http://HOST:PORT/metrics" with a loopback HOST, as (host, port); else none.
std::optional<std::pair<std::string, int>> loopback_page(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme) || !url.ends_with("/metrics")) return std::nullopt;
  const std::string authority = url.substr(kScheme.size(), url.size() - kScheme.size() - 8);
  const auto colon = authority.rfind(':');
  if (colon == std::string::npos || !is_loopback(std::string_view(authority).substr(0, colon))) return std::nullopt;
  try {
    return std::pair(authority.substr(0, colon), std::stoi(authority.substr(colon + 1)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::uint32_t> random_tokens(std::mt19937_64& rng, std::size_t count) {
  std::vector<std::uint32_t> tokens(count);
  for (auto& token : tokens) token = static_cast<std::uint32_t>(rng() % 32000);
  return tokens;
}

}  // namespace

DemoWorkload::DemoWorkload(DemoOptions options) : options_(std::move(options)) {}

DemoWorkload::~DemoWorkload() { stop(); }

std::size_t DemoWorkload::start() {
  std::vector<demo::RouterRank> ranks;  // one per engine, in the order of engines_
  for (const auto& endpoint : options_.topology.endpoints()) {
    for (const auto& worker : endpoint.workers()) {
      const auto& card = worker.card();
      const std::string name =
          fmt::format("worker {} of {}/{}/{}", worker.worker_id(), endpoint.endpoint().namespace_(),
                      endpoint.endpoint().component(), endpoint.endpoint().endpoint());
      if (card.runtime_config().enable_eagle()) {
        spdlog::warn("demo: {} is an Eagle worker; the demo does not fake Eagle engines", name);
        continue;
      }
      const std::uint64_t capacity =
          card.runtime_config().total_kv_blocks() != 0 ? card.runtime_config().total_kv_blocks() : 4096;
      demo::FakeMetricsServer* page = nullptr;
      if (worker.has_engine_metrics()) {
        const auto address = loopback_page(worker.engine_metrics().url());
        demo::FakeMetricsOptions options;
        options.model_name = card.display_name();
        options.block_size = card.kv_cache_block_size();
        options.num_gpu_blocks = capacity;
        options.dp_ranks.clear();
        for (const auto& source : worker.kv_sources()) options.dp_ranks.push_back(source.dp_rank());
        try {
          if (!address) throw std::runtime_error("not an http://<loopback>:<port>/metrics URL");
          options.host = address->first;
          options.port = address->second;
          pages_.push_back(std::make_unique<demo::FakeMetricsServer>(std::move(options)));
          page = pages_.back().get();
        } catch (const std::exception& error) {
          spdlog::warn("demo: no metrics page for {} at {}: {}", name, worker.engine_metrics().url(), error.what());
        }
      }
      demo::EngineCache::Serving serving{endpoint.endpoint().namespace_(), card.display_name(), {}};
      for (const auto& adapter : worker.adapters()) serving.served_as[adapter.lora_name()] = adapter.served_name();
      for (const auto& source : worker.kv_sources()) {
        if (!source.has_zmq()) continue;
        const auto& zmq = source.zmq();
        demo::FakeEngineOptions engine;
        engine.dp_rank = source.dp_rank();
        engine.topic = zmq.topic();
        engine.replay_endpoint.reset();
        try {
          const auto pub = loopback_zmq(zmq.endpoint());
          if (!pub) throw std::runtime_error("not a tcp://<loopback>:<port> endpoint");
          engine.endpoint = *pub;
          if (!zmq.replay_endpoint().empty()) {
            const auto replay = loopback_zmq(zmq.replay_endpoint());
            if (!replay) throw std::runtime_error("the replay endpoint is not a tcp://<loopback>:<port> endpoint");
            engine.replay_endpoint = *replay;
          }
          engines_.push_back(std::make_unique<demo::EngineCache>(std::move(engine), card.kv_cache_block_size(),
                                                                 capacity, serving, page));
          ranks.push_back({endpoint.endpoint(), worker.worker_id(), source.dp_rank()});
        } catch (const std::exception& error) {
          spdlog::warn("demo: no fake engine for rank {} of {} at {}: {}", source.dp_rank(), name, zmq.endpoint(),
                       error.what());
        }
      }
    }
  }
  if (engines_.empty()) {
    spdlog::warn("demo: the topology declares no ZeroMQ KV source on loopback; nothing to drive");
    return 0;
  }
  std::set<std::pair<std::string, std::string>> models;
  for (const auto& engine : engines_) {
    const auto& serving = engine->serving();
    models.emplace(serving.ns, serving.model);
    for (const auto& [lora, served] : serving.served_as) models.emplace(serving.ns, served);
  }
  serving_load_ = std::make_unique<demo::ServingLoadFeed>(std::move(ranks), std::vector(models.begin(), models.end()),
                                                          options_.seed);
  spdlog::info("demo: {} fake vLLM engines and {} metrics pages at ~{} KV events/s", engines_.size(), pages_.size(),
               options_.events_per_second);
  thread_ = std::thread([this] { run(); });
  return engines_.size();
}

void DemoWorkload::report_serving_load_to(std::string ingest_address, std::optional<std::string> token_file) {
  std::lock_guard lock(ingest_mutex_);
  ingest_address_ = std::move(ingest_address);
  token_file_ = std::move(token_file);
}

void DemoWorkload::stop_traffic() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void DemoWorkload::stop() {
  stop_traffic();
  engines_.clear();
  pages_.clear();
}

std::unique_ptr<ingest_v1::RelayIngest::Stub> DemoWorkload::ingest_stub() {
  std::lock_guard lock(ingest_mutex_);
  if (!ingest_address_) return nullptr;
  serving_load_->set_token_file(token_file_);
  return ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(*ingest_address_, grpc::InsecureChannelCredentials()));
}

void DemoWorkload::run() {
  std::mt19937_64 rng(options_.seed);
  // System prompts are well known so that an operator can query them (README): prompt i is
  // the 64 + 32 i tokens 1000 i, 1000 i + 1, ...
  std::vector<std::vector<std::uint32_t>> system_prompts(kSystemPrompts);
  for (std::size_t i = 0; i < kSystemPrompts; ++i) {
    for (std::uint32_t t = 0; t < 64 + 32 * i; ++t)
      system_prompts[i].push_back(static_cast<std::uint32_t>(1000 * i) + t);
  }
  std::vector<Conversation> conversations(kConversations);
  const double requests_per_tick =
      static_cast<double>(options_.events_per_second) * std::chrono::duration<double>(kTick).count() / 2.0;
  double owed = 0;
  std::unique_ptr<ingest_v1::RelayIngest::Stub> ingest;
  while (!stopping_) {
    const auto tick_start = std::chrono::steady_clock::now();
    for (owed += requests_per_tick; owed >= 1; owed -= 1) {
      Conversation& conversation = conversations[rng() % conversations.size()];
      if (conversation.history.empty() || conversation.history.size() > 2048 || rng() % 8 == 0) {
        conversation = Conversation{
            .system_prompt = rng() % kSystemPrompts, .engine = rng() % engines_.size(), .adapter = {}, .history = {}};
        const auto& served_as = engines_[conversation.engine]->serving().served_as;
        if (!served_as.empty() && rng() % 3 == 0) {
          conversation.adapter = std::next(served_as.begin(), rng() % served_as.size())->first;
        }
      }
      const std::size_t rank = conversation.engine;
      demo::EngineCache& engine = *engines_[rank];
      const auto& serving = engine.serving();
      const auto turn = random_tokens(rng, 16 + rng() % 96);
      conversation.history.insert(conversation.history.end(), turn.begin(), turn.end());
      std::vector<std::uint32_t> prompt = system_prompts[conversation.system_prompt];
      prompt.insert(prompt.end(), conversation.history.begin(), conversation.history.end());
      const std::uint64_t uncached = engine.serve(prompt, conversation.adapter);
      // The adapter was chosen among this engine's own.
      const std::string& model =
          conversation.adapter.empty() ? serving.model : serving.served_as.at(conversation.adapter);
      serving_load_->served(serving.ns, model, rank, prompt.size(), uncached, tick_start);
    }
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      engines_[i]->flush();
      serving_load_->set_decode_blocks(i, engines_[i]->held());
    }
    if (!ingest) ingest = ingest_stub();
    if (ingest) serving_load_->tick(*ingest, tick_start);
    std::this_thread::sleep_until(tick_start + kTick);  // pacing the generator, not awaiting anything
  }
}

}  // namespace kvrelay
