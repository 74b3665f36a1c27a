#include "ingest/demo_workload.hpp"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <list>
#include <random>
#include <span>
#include <unordered_map>

#include "core/token_hashing.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

namespace kvrelay {

namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

constexpr auto kTick = std::chrono::milliseconds(10);
constexpr auto kLoadPeriod = std::chrono::milliseconds(250);
constexpr std::size_t kSystemPrompts = 4;
constexpr std::size_t kConversations = 64;

struct Conversation {
  std::size_t system_prompt = 0;
  std::string adapter;  // empty = base model
  std::vector<std::uint32_t> history;
};

// One push source (a dp rank of a worker): the blocks it holds, least recently used first.
class SourceCache {
 public:
  SourceCache(ingest_v1::EndpointRef endpoint, std::uint64_t worker, std::uint32_t rank, std::uint32_t block_size,
              bool eagle, std::size_t capacity, std::vector<std::string> adapters, std::uint64_t epoch)
      : endpoint_(std::move(endpoint)),
        worker_(worker),
        rank_(rank),
        block_size_(block_size),
        eagle_(eagle),
        capacity_(capacity),
        adapters_(std::move(adapters)),
        epoch_(epoch) {}

  const std::vector<std::string>& adapters() const { return adapters_; }

  // Serves one prompt: stores the blocks it lacks, evicts at capacity. Returns the events.
  void serve(const std::vector<std::uint32_t>& tokens, const std::string& lora, std::mt19937_64& rng,
             ingest_v1::KvEventBatch& batch) {
    const std::uint64_t seed = hashing::block_hash_seed(lora, "");
    hashing::BlockHashOptions options;
    options.kv_block_size = block_size_;
    options.format = eagle_ ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard;
    options.seed = seed;
    const auto local = hashing::block_hashes(tokens, options);
    const auto sequence = hashing::sequence_hashes(local);
    std::optional<std::uint64_t> parent;
    std::size_t first_new = 0;
    while (first_new < sequence.size() && touch(sequence[first_new])) {
      parent = blocks_.at(sequence[first_new]).engine_id;
      ++first_new;
    }
    if (first_new == sequence.size()) return;
    drop_orphans(std::span(sequence).subspan(first_new), batch);
    auto* stored = batch.add_events()->mutable_stored();
    if (parent) stored->set_parent_block_hash(*parent);
    stored->set_lora_name(lora);
    for (std::size_t i = first_new; i < sequence.size(); ++i) {
      const std::uint64_t engine_id = rng();
      auto* block = stored->add_blocks();
      block->set_block_hash(engine_id);
      block->set_tokens_hash(local[i]);
      lru_.push_back(sequence[i]);
      blocks_[sequence[i]] = {engine_id, std::prev(lru_.end())};
    }
    evict(batch);
  }

  ingest_v1::KvEventBatch begin_batch() {
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = endpoint_;
    batch.set_worker_id(worker_);
    batch.set_dp_rank(rank_);
    batch.set_source_epoch(epoch_);
    return batch;
  }

  // Batches are numbered when sent, so an empty one (nothing served) costs no sequence.
  std::uint64_t take_sequence() { return next_sequence_++; }

  ingest_v1::LoadReport load() const {
    ingest_v1::LoadReport report;
    *report.mutable_endpoint() = endpoint_;
    report.set_worker_id(worker_);
    report.set_dp_rank(rank_);
    report.set_kv_used_blocks(blocks_.size());
    return report;
  }

 private:
  struct Held {
    std::uint64_t engine_id;
    std::list<std::uint64_t>::iterator position;
  };

  bool touch(std::uint64_t canonical) {
    const auto it = blocks_.find(canonical);
    if (it == blocks_.end()) return false;
    lru_.splice(lru_.end(), lru_, it->second.position);
    return true;
  }

  // Blocks held past an evicted ancestor are stored again under the new chain: drop the old ones.
  void drop_orphans(std::span<const std::uint64_t> chain, ingest_v1::KvEventBatch& batch) {
    ingest_v1::BlocksRemoved* removed = nullptr;
    for (std::uint64_t canonical : chain) {
      const auto it = blocks_.find(canonical);
      if (it == blocks_.end()) continue;
      if (removed == nullptr) removed = batch.add_events()->mutable_removed();
      removed->add_block_hashes(it->second.engine_id);
      lru_.erase(it->second.position);
      blocks_.erase(it);
    }
  }

  void evict(ingest_v1::KvEventBatch& batch) {
    if (blocks_.size() <= capacity_) return;
    auto* removed = batch.add_events()->mutable_removed();
    while (blocks_.size() > capacity_) {
      const std::uint64_t victim = lru_.front();
      lru_.pop_front();
      removed->add_block_hashes(blocks_.at(victim).engine_id);
      blocks_.erase(victim);
    }
  }

  ingest_v1::EndpointRef endpoint_;
  std::uint64_t worker_;
  std::uint32_t rank_;
  std::uint32_t block_size_;
  bool eagle_;
  std::size_t capacity_;
  std::vector<std::string> adapters_;
  std::uint64_t epoch_;
  std::uint64_t next_sequence_ = 0;
  std::unordered_map<std::uint64_t, Held> blocks_;
  std::list<std::uint64_t> lru_;
};

std::vector<SourceCache> push_sources(const ingest_v1::TopologyFile& topology, std::mt19937_64& rng) {
  std::vector<SourceCache> sources;
  for (const auto& endpoint : topology.endpoints()) {
    for (const auto& worker : endpoint.workers()) {
      const auto& card = worker.card();
      const std::uint64_t capacity =
          card.runtime_config().total_kv_blocks() != 0 ? card.runtime_config().total_kv_blocks() : 4096;
      std::vector<std::string> adapters;
      for (const auto& adapter : worker.adapters()) adapters.push_back(adapter.lora_name());
      for (const auto& source : worker.kv_sources()) {
        if (!source.has_push() || card.kv_cache_block_size() == 0) continue;
        sources.emplace_back(endpoint.endpoint(), worker.worker_id(), source.dp_rank(), card.kv_cache_block_size(),
                             card.runtime_config().enable_eagle(), capacity, adapters, rng() >> 1);
      }
    }
  }
  return sources;
}

std::vector<std::uint32_t> random_tokens(std::mt19937_64& rng, std::size_t count) {
  std::vector<std::uint32_t> tokens(count);
  for (auto& token : tokens) token = static_cast<std::uint32_t>(rng() % 32000);
  return tokens;
}

}  // namespace

DemoWorkload::DemoWorkload(DemoOptions options) : options_(std::move(options)) {}

DemoWorkload::~DemoWorkload() { stop(); }

void DemoWorkload::start() {
  thread_ = std::thread([this] { run(); });
}

void DemoWorkload::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void DemoWorkload::run() {
  std::mt19937_64 rng(options_.seed);
  auto stub =
      ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(options_.ingest_address, grpc::InsecureChannelCredentials()));
  std::vector<SourceCache> sources = push_sources(options_.topology, rng);
  if (sources.empty()) {
    spdlog::warn("demo: the topology declares no push KV sources; nothing to drive");
    return;
  }
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
  auto next_load = std::chrono::steady_clock::now();
  spdlog::info("demo: driving {} push sources at ~{} KV events/s", sources.size(), options_.events_per_second);

  grpc::ClientContext events_context;
  ingest_v1::PublishKvEventsResponse events_response;
  auto events = stub->PublishKvEvents(&events_context, &events_response);
  while (!stopping_) {
    const auto tick_start = std::chrono::steady_clock::now();
    std::vector<ingest_v1::KvEventBatch> batches;
    for (auto& source : sources) batches.push_back(source.begin_batch());
    for (owed += requests_per_tick; owed >= 1; owed -= 1) {
      Conversation& conversation = conversations[rng() % conversations.size()];
      const std::size_t s = rng() % sources.size();
      if (conversation.history.size() > 2048 || rng() % 8 == 0) {  // a new conversation
        conversation = Conversation{rng() % kSystemPrompts, {}, {}};
        const auto& adapters = sources[s].adapters();
        if (!adapters.empty() && rng() % 3 == 0) conversation.adapter = adapters[rng() % adapters.size()];
      }
      const auto turn = random_tokens(rng, 16 + rng() % 96);
      conversation.history.insert(conversation.history.end(), turn.begin(), turn.end());
      std::vector<std::uint32_t> prompt = system_prompts[conversation.system_prompt];
      prompt.insert(prompt.end(), conversation.history.begin(), conversation.history.end());
      sources[s].serve(prompt, conversation.adapter, rng, batches[s]);
    }
    for (std::size_t i = 0; i < batches.size(); ++i) {
      auto& batch = batches[i];
      if (batch.events_size() == 0) continue;
      batch.set_sequence(sources[i].take_sequence());
      if (!events->Write(batch)) {
        spdlog::warn("demo: the relay's ingest stream closed; stopping the demo");
        return;
      }
    }
    if (tick_start >= next_load) {
      grpc::ClientContext load_context;
      ingest_v1::ReportLoadResponse load_response;
      auto load = stub->ReportLoad(&load_context, &load_response);
      for (const auto& source : sources) load->Write(source.load());
      load->WritesDone();
      load->Finish();
      next_load = tick_start + kLoadPeriod;
    }
    std::this_thread::sleep_until(tick_start + kTick);  // pacing the generator, not awaiting anything
  }
  events->WritesDone();
  events->Finish();
}

}  // namespace kvrelay
