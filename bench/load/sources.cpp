#include "bench/load/sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <random>
#include <thread>

#include "bench/pool_endpoint.hpp"
#include "core/bearer_token.hpp"
#include "core/token_hashing.hpp"
#include "ingest/fake_engine.hpp"

namespace kvrelay::bench {
namespace {

constexpr auto kTick = std::chrono::milliseconds(1);
constexpr std::uint32_t kBlockSize = 16;
// A source that fell behind catches up at most this many stores per batch: within the relay's
// --max-batch-events (16 384 by default) with the batch's removals.
constexpr std::uint64_t kMaxStoresPerBatch = 4096;
constexpr auto kSubscribeTimeout = std::chrono::seconds(30);

// Capacity declared at twice the working set: auto sizing then lays the pool out for it with
// room to spare, so no run re-lays a pool out while it is being timed.
ingest_v1::PutWorkerRequest worker_of(std::size_t source, const LoadShape& shape, const demo::FakeEngine* engine) {
  ingest_v1::PutWorkerRequest request;
  *request.mutable_endpoint() = pool_endpoint(source % shape.pools);
  request.set_worker_id(source + 1);
  auto* card = request.mutable_card();
  card->set_display_name(fmt::format("bench/model-{}", source % shape.pools));
  card->set_kv_cache_block_size(kBlockSize);
  card->set_worker_type(ingest_v1::WORKER_TYPE_AGGREGATED);
  card->set_model_type(1);
  card->mutable_runtime_config()->set_total_kv_blocks(2 * shape.live_blocks);
  auto* source_spec = request.add_kv_sources();
  if (engine == nullptr) {
    source_spec->mutable_push();
  } else {
    source_spec->mutable_zmq()->set_endpoint(engine->pub_endpoint());
    source_spec->mutable_zmq()->set_replay_endpoint(engine->replay_endpoint());
  }
  return request;
}

// One source's blocks: fresh random engine ids, and the ones it still holds, oldest first.
class WorkingSet {
 public:
  WorkingSet(std::size_t source, std::size_t live_blocks) : rng(0x6b7672656c6179 + source), live_(live_blocks) {}

  std::uint64_t fresh() {
    held_.push_back(rng());
    return held_.back();
  }
  // The oldest blocks past the working set's size, now no longer held.
  std::vector<std::uint64_t> evicted() {
    std::vector<std::uint64_t> ids;
    for (; held_.size() > live_; held_.pop_front()) ids.push_back(held_.front());
    return ids;
  }

  std::mt19937_64 rng;

 private:
  std::size_t live_;
  std::deque<std::uint64_t> held_;
};

// One source's transport: `prepare` builds the next batch and returns its probe's sequence
// hash, `send` writes it (false once the transport has failed), `finish` closes it.
class Feed {
 public:
  virtual ~Feed() = default;
  virtual std::uint64_t prepare(std::uint64_t stores) = 0;
  virtual bool send() = 0;
  virtual void finish(SourceTotals& totals) = 0;
};

// Stored blocks carrying precomputed hashes (`tokens_hash`), which the relay takes as they are.
class PushFeed final : public Feed {
 public:
  PushFeed(ingest_v1::RelayIngest::Stub& stub, const std::optional<std::string>& token, std::size_t source,
           std::size_t pool, std::uint64_t epoch, std::size_t live_blocks)
      : blocks_(source, live_blocks) {
    if (token) context_.AddMetadata(std::string(bearer::kMetadataKey), bearer::metadata_value(*token));
    writer_ = stub.PublishKvEvents(&context_, &response_);
    *batch_.mutable_endpoint() = pool_endpoint(pool);
    batch_.set_worker_id(source + 1);
    batch_.set_source_epoch(epoch);
  }

  std::uint64_t prepare(std::uint64_t stores) override {
    batch_.clear_events();
    std::uint64_t probe = 0;
    for (std::uint64_t i = 0; i < stores; ++i) {
      const std::uint64_t id = blocks_.fresh();
      auto* block = batch_.add_events()->mutable_stored()->add_blocks();
      block->set_block_hash(id);
      block->set_tokens_hash(id);
      if (i == 0) probe = id;  // a parentless block's sequence hash is its own hash
    }
    const auto evicted = blocks_.evicted();
    if (!evicted.empty())
      batch_.add_events()->mutable_removed()->mutable_block_hashes()->Add(evicted.begin(), evicted.end());
    return probe;
  }
  bool send() override {
    const bool written = writer_->Write(batch_);
    batch_.set_sequence(batch_.sequence() + 1);
    return written;
  }
  void finish(SourceTotals& totals) override {
    writer_->WritesDone();
    const auto status = writer_->Finish();
    totals.batches_rejected = response_.batches_rejected();
    if (!status.ok()) totals.failure = "PublishKvEvents: " + status.error_message();
  }

 private:
  WorkingSet blocks_;
  grpc::ClientContext context_;
  ingest_v1::PublishKvEventsResponse response_;
  std::unique_ptr<grpc::ClientWriter<ingest_v1::KvEventBatch>> writer_;
  ingest_v1::KvEventBatch batch_;
};

// vLLM's wire format: every block carries its 16 token ids, which the relay hashes itself.
class EngineFeed final : public Feed {
 public:
  EngineFeed(demo::FakeEngine& engine, std::size_t source, std::size_t live_blocks)
      : engine_(engine), blocks_(source, live_blocks) {}

  std::uint64_t prepare(std::uint64_t stores) override {
    events_.clear();
    std::uint64_t probe = 0;
    std::vector<std::uint32_t> tokens(kBlockSize);
    for (std::uint64_t i = 0; i < stores; ++i) {
      for (auto& token : tokens) token = static_cast<std::uint32_t>(blocks_.rng() % 32000);
      demo::BlockStored stored;
      stored.block_size = kBlockSize;
      stored.block_hashes = {blocks_.fresh()};
      if (i == 0) probe = hashing::hash_block(tokens, hashing::kChainSeed);  // a root block's sequence hash
      stored.token_ids = tokens;
      events_.emplace_back(std::move(stored));
    }
    if (auto evicted = blocks_.evicted(); !evicted.empty()) {
      demo::BlockRemoved removed;
      removed.block_hashes = std::move(evicted);
      events_.emplace_back(std::move(removed));
    }
    return probe;
  }
  bool send() override {
    engine_.publish(events_);
    return true;
  }
  void finish(SourceTotals&) override {}

 private:
  demo::FakeEngine& engine_;
  WorkingSet blocks_;
  std::vector<demo::EngineEvent> events_;
};

}  // namespace

Sources::Sources(std::unique_ptr<ingest_v1::RelayIngest::Stub> stub, std::optional<std::string> token, LoadShape shape)
    : stub_(std::move(stub)), token_(std::move(token)), shape_(shape) {}
Sources::Sources(Sources&&) noexcept = default;
Sources::~Sources() = default;

std::string Sources::endpoint_name(std::size_t index) {
  const auto ref = pool_endpoint(index);
  return ref.namespace_() + "/" + ref.component() + "/" + ref.endpoint();
}

std::expected<Sources, std::string> Sources::declare(const std::string& ingest_address,
                                                     std::optional<std::string> token, LoadShape shape) {
  Sources sources(
      ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(ingest_address, grpc::InsecureChannelCredentials())),
      std::move(token), shape);
  for (std::size_t source = 0; source < shape.sources; ++source) {
    if (shape.transport == Transport::kZmq)
      sources.engines_.push_back(std::make_unique<demo::FakeEngine>(demo::FakeEngineOptions{}));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    sources.authorize(context);
    ingest_v1::PutWorkerResponse response;
    const auto* engine = sources.engines_.empty() ? nullptr : sources.engines_.back().get();
    const auto status = sources.stub_->PutWorker(&context, worker_of(source, shape, engine), &response);
    if (!status.ok()) {
      return std::unexpected(
          fmt::format("PutWorker of source {} at {}: {}", source, ingest_address, status.error_message()));
    }
  }
  for (std::size_t source = 0; source < sources.engines_.size(); ++source) {
    if (!sources.engines_[source]->await_subscribers(1, kSubscribeTimeout)) {
      return std::unexpected(fmt::format("the relay did not subscribe to source {}'s engine at {} within 30 s", source,
                                         sources.engines_[source]->pub_endpoint()));
    }
  }
  return sources;
}

void Sources::authorize(grpc::ClientContext& context) const {
  if (token_) context.AddMetadata(std::string(bearer::kMetadataKey), bearer::metadata_value(*token_));
}

SourceTotals Sources::run(std::uint64_t epoch, const std::atomic<bool>& stop,
                          const std::function<void(const Probe&)>& on_probe, std::atomic<std::uint64_t>& stores_sent) {
  std::vector<SourceTotals> totals(shape_.sources);
  std::vector<std::thread> threads;
  for (std::size_t source = 0; source < shape_.sources; ++source) {
    threads.emplace_back([&, source] { totals[source] = run_source(source, epoch, stop, on_probe, stores_sent); });
  }
  SourceTotals sum;
  for (std::size_t source = 0; source < shape_.sources; ++source) {
    threads[source].join();
    sum.stores += totals[source].stores;
    sum.batches += totals[source].batches;
    sum.batches_rejected += totals[source].batches_rejected;
    if (sum.failure.empty() && !totals[source].failure.empty()) {
      sum.failure = fmt::format("source {}: {}", source, totals[source].failure);
    }
  }
  return sum;
}

SourceTotals Sources::run_source(std::size_t source, std::uint64_t epoch, const std::atomic<bool>& stop,
                                 const std::function<void(const Probe&)>& on_probe,
                                 std::atomic<std::uint64_t>& stores_sent) {
  const double per_second = shape_.stores_per_second / static_cast<double>(shape_.sources);
  const auto pool = source % shape_.pools;
  std::unique_ptr<Feed> feed;
  if (engines_.empty()) {
    feed = std::make_unique<PushFeed>(*stub_, token_, source, pool, epoch, shape_.live_blocks);
  } else {
    feed = std::make_unique<EngineFeed>(*engines_[source], source, shape_.live_blocks);
  }
  SourceTotals totals;
  const auto start = Clock::now();
  for (auto tick = start; !stop.load(std::memory_order_relaxed); tick += kTick) {
    std::this_thread::sleep_until(tick);
    // What the rate owes by now, so a source that fell behind catches up in larger batches (the
    // Sent column shows a source that cannot).
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const auto owed = std::min(static_cast<std::uint64_t>(elapsed * per_second) - totals.stores, kMaxStoresPerBatch);
    if (owed == 0) continue;
    const std::uint64_t probe = feed->prepare(owed);
    on_probe(Probe{pool, probe, Clock::now()});
    if (!feed->send()) break;
    totals.stores += owed;
    ++totals.batches;
    stores_sent.fetch_add(owed, std::memory_order_relaxed);
  }
  feed->finish(totals);
  return totals;
}

}  // namespace kvrelay::bench
