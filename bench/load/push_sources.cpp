#include "bench/load/push_sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <random>
#include <thread>

#include "core/bearer_token.hpp"

namespace kvrelay::bench {
namespace {

constexpr auto kTick = std::chrono::milliseconds(1);
// A source that fell behind catches up at most this many stores per batch: within the relay's
// --max-batch-events (16 384 by default) with the batch's removals.
constexpr std::uint64_t kMaxStoresPerBatch = 4096;

ingest_v1::EndpointRef endpoint_of(std::size_t pool) {
  ingest_v1::EndpointRef ref;
  ref.set_namespace_("bench");
  ref.set_component(fmt::format("pool-{}", pool));
  ref.set_endpoint("generate");
  return ref;
}

// Capacity declared at twice the working set: auto sizing then lays the pool out for it with
// room to spare, so no run re-lays a pool out while it is being timed.
ingest_v1::PutWorkerRequest worker_of(std::size_t source, const LoadShape& shape) {
  ingest_v1::PutWorkerRequest request;
  *request.mutable_endpoint() = endpoint_of(source % shape.pools);
  request.set_worker_id(source + 1);
  auto* card = request.mutable_card();
  card->set_display_name(fmt::format("bench/model-{}", source % shape.pools));
  card->set_kv_cache_block_size(16);
  card->set_worker_type(ingest_v1::WORKER_TYPE_AGGREGATED);
  card->set_model_type(1);
  card->mutable_runtime_config()->set_total_kv_blocks(2 * shape.live_blocks);
  request.add_kv_sources()->mutable_push();
  return request;
}

// One source's blocks: fresh random ids, and the ones it still holds, oldest first.
class WorkingSet {
 public:
  WorkingSet(std::size_t source, std::size_t live_blocks) : rng_(0x6b7672656c6179 + source), live_(live_blocks) {}

  // Adds `count` stored events (one new block each) and the removals that keep the working
  // set at its size; returns the first new block's hash.
  std::uint64_t add_to(ingest_v1::KvEventBatch& batch, std::uint64_t count) {
    const std::uint64_t first = rng_();
    std::uint64_t hash = first;
    ingest_v1::BlocksRemoved* removed = nullptr;
    for (std::uint64_t i = 0; i < count; ++i, hash = rng_()) {
      auto* block = batch.add_events()->mutable_stored()->add_blocks();
      block->set_block_hash(hash);
      block->set_tokens_hash(hash);
      held_.push_back(hash);
      if (held_.size() <= live_) continue;
      if (removed == nullptr) removed = batch.add_events()->mutable_removed();
      removed->add_block_hashes(held_.front());
      held_.pop_front();
    }
    return first;
  }

 private:
  std::mt19937_64 rng_;
  std::size_t live_;
  std::deque<std::uint64_t> held_;
};

}  // namespace

std::string PushSources::endpoint_name(std::size_t index) {
  const auto ref = endpoint_of(index);
  return ref.namespace_() + "/" + ref.component() + "/" + ref.endpoint();
}

std::expected<PushSources, std::string> PushSources::declare(const std::string& ingest_address,
                                                             std::optional<std::string> token, LoadShape shape) {
  PushSources sources(ingest_v1::RelayIngest::NewStub(
                          grpc::CreateChannel(ingest_address, grpc::InsecureChannelCredentials())),
                      std::move(token), shape);
  for (std::size_t source = 0; source < shape.sources; ++source) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    sources.authorize(context);
    ingest_v1::PutWorkerResponse response;
    const auto status = sources.stub_->PutWorker(&context, worker_of(source, shape), &response);
    if (!status.ok()) {
      return std::unexpected(fmt::format("PutWorker of source {} at {}: {}", source, ingest_address,
                                         status.error_message()));
    }
  }
  return sources;
}

void PushSources::authorize(grpc::ClientContext& context) const {
  if (token_) context.AddMetadata(std::string(bearer::kMetadataKey), bearer::metadata_value(*token_));
}

SourceTotals PushSources::run(std::uint64_t epoch, const std::atomic<bool>& stop,
                              const std::function<void(const Probe&)>& on_probe,
                              std::atomic<std::uint64_t>& stores_sent) {
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
    if (sum.failure.empty()) sum.failure = totals[source].failure;
  }
  return sum;
}

SourceTotals PushSources::run_source(std::size_t source, std::uint64_t epoch, const std::atomic<bool>& stop,
                                     const std::function<void(const Probe&)>& on_probe,
                                     std::atomic<std::uint64_t>& stores_sent) const {
  const double per_second = shape_.stores_per_second / static_cast<double>(shape_.sources);
  const auto pool = source % shape_.pools;
  grpc::ClientContext context;
  authorize(context);
  ingest_v1::PublishKvEventsResponse response;
  auto writer = stub_->PublishKvEvents(&context, &response);
  WorkingSet blocks(source, shape_.live_blocks);
  SourceTotals totals;
  const auto start = Clock::now();
  for (auto tick = start; !stop.load(std::memory_order_relaxed); tick += kTick) {
    std::this_thread::sleep_until(tick);
    // What the rate owes by now, so a source that fell behind catches up in larger batches (the
    // Sent column shows a source that cannot).
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const auto owed = std::min(static_cast<std::uint64_t>(elapsed * per_second) - totals.stores, kMaxStoresPerBatch);
    if (owed == 0) continue;
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = endpoint_of(pool);
    batch.set_worker_id(source + 1);
    batch.set_source_epoch(epoch);
    batch.set_sequence(totals.batches);
    const std::uint64_t probe = blocks.add_to(batch, owed);
    on_probe(Probe{pool, probe, Clock::now()});
    if (!writer->Write(batch)) break;
    totals.stores += owed;
    ++totals.batches;
    stores_sent.fetch_add(owed, std::memory_order_relaxed);
  }
  writer->WritesDone();
  const auto status = writer->Finish();
  totals.batches_rejected = response.batches_rejected();
  if (!status.ok()) totals.failure = fmt::format("source {}: PublishKvEvents: {}", source, status.error_message());
  return totals;
}

}  // namespace kvrelay::bench
