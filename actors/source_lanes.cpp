#include "actors/source_lanes.hpp"

#include <fmt/format.h>

#include "core/ingest_validation.hpp"
#include "core/rate_limited_log.hpp"

namespace kvrelay {

namespace {

using metrics::BatchResult;

// kv_relay_ingest_batches_total counts what came through the ingest API; an engine source
// counts its own batches (kv_relay_engine_source_batches_total) and logs what it drops.
void count_batch(metrics::RelayMetrics* metrics, SourceTransport transport, BatchResult result) {
  if (transport == SourceTransport::kPush && metrics != nullptr) metrics->batch(result);
}

// The source a pushed batch names, as the relay's log lines name a source.
std::string source_of(const ingest_v1::KvEventBatch& batch) {
  return fmt::format("endpoint={} worker={} rank={} epoch={} sequence={}",
                     ingest_check::endpoint_key(batch.endpoint()).display(), batch.worker_id(), batch.dp_rank(),
                     batch.source_epoch(), batch.sequence());
}

void refuse(const CarriedBatch& carried, metrics::RelayMetrics* metrics, BatchResult why) {
  count_batch(metrics, carried.transport, why);
  if (carried.transport == SourceTransport::kPush && why != BatchResult::kDraining) {
    static RateLimitedLog log;
    log.warn([&] {
      return fmt::format("refused KV event batch from {}: {}", source_of(*carried.batch),
                         why == BatchResult::kStaleSequence ? "its source already sent this sequence in this epoch"
                                                            : "no pool, worker or push source is declared for it");
    });
  }
  (*carried.reply)(BatchOutcome{});
}

}  // namespace

void SourceLane::declare(LaneDeclaration declaration) {
  std::lock_guard lock(mutex_);
  declaration_ = std::move(declaration);
}

void SourceLane::retire() {
  std::lock_guard lock(mutex_);
  retired_ = true;
  declaration_.pool.reset();
}

void SourceLane::drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
  declaration_.pool.reset();
}

LaneReport SourceLane::report() const {
  std::lock_guard lock(mutex_);
  LaneReport report;
  report.resets = resets_;
  if (cursor_) report.last_sequence = cursor_->next_sequence - 1;
  return report;
}

// Only a source declared with the transport the batch came by, whose endpoint holds a pool,
// and -- for an engine source -- from the actor reading it now: a replaced engine source's
// last batches must not touch its successor's state.
bool SourceLane::accepts(const CarriedBatch& carried) const {
  if (retired_ || !declaration_.pool || declaration_.transport != carried.transport) return false;
  return carried.transport == SourceTransport::kPush || declaration_.feeder == carried.carrier;
}

// docs/protocol/decisions.md#d16: whether to apply the batch, and whether (why) the source is
// reset first. A source whose pool was rebuilt since its last batch starts over too: the new
// publisher holds none of its lineage, so the feeder must replay what its engine holds. A
// re-layout keeps the lineage and so resets nothing. A batch is a duplicate only of one sent
// to the same generation: a fenced generation refuses what reaches it after the lane moved
// the cursor, and the feeder's retry of that batch starts the source over in the next one.
SourceLane::Verdict SourceLane::sequence(const ingest_v1::KvEventBatch& batch, std::uint64_t lineage) {
  const std::optional<SourceCursor> previous = cursor_;
  if (previous && batch.source_epoch() == previous->epoch && batch.sequence() < previous->next_sequence &&
      previous->lineage == lineage) {
    return Verdict::kStale;
  }
  cursor_ = SourceCursor{batch.source_epoch(), batch.sequence() + 1, lineage};
  if (!previous) return Verdict::kInOrder;
  // A rebuild is named first: the source starts over whatever else its batch says.
  if (previous->lineage != lineage) return Verdict::kNewGeneration;
  if (batch.source_epoch() != previous->epoch) return Verdict::kEpochChanged;
  return batch.sequence() > previous->next_sequence ? Verdict::kSequenceGap : Verdict::kInOrder;
}

void SourceLane::carry(CarriedBatch carried, metrics::RelayMetrics* metrics) {
  // Held past the lock: a publisher that is gone drops the batch inside anon_send, and the
  // reply's "lost" answer calls into its reader, which must not happen under the lock.
  const BatchReplyPtr reply = carried.reply;
  std::unique_lock lock(mutex_);
  if (draining_ || !accepts(carried)) {
    const BatchResult why = draining_ ? BatchResult::kDraining : BatchResult::kUnknownSource;
    lock.unlock();
    return refuse(carried, metrics, why);
  }
  const Verdict verdict = sequence(*carried.batch, declaration_.pool->lineage);
  if (verdict == Verdict::kStale) {
    lock.unlock();
    return refuse(carried, metrics, BatchResult::kStaleSequence);
  }
  // What the verdict does to the source's blocks, and the reason /metrics counts it under.
  SourceReset reset = SourceReset::kSource;
  metrics::ResetReason reason = metrics::ResetReason::kEpochChanged;
  switch (verdict) {
    case Verdict::kStale:  // refused above
    case Verdict::kInOrder:
      reset = SourceReset::kNone;
      break;
    case Verdict::kEpochChanged:
      break;
    case Verdict::kSequenceGap:
      reason = metrics::ResetReason::kSequenceGap;
      break;
    case Verdict::kNewGeneration:
      reset = SourceReset::kNewGeneration;
      reason = metrics::ResetReason::kNewGeneration;
      break;
  }
  if (reset != SourceReset::kNone) {
    ++resets_;
    if (metrics != nullptr) metrics->source_reset(reason);
    if (carried.transport == SourceTransport::kPush) {
      static RateLimitedLog log;  // apart from refusals: a feeder refused in a loop hides no reset
      log.info([&] {
        return fmt::format("KV source reset ({}): its blocks leave the pool; batch from {}", metrics::label(reason),
                           source_of(*carried.batch));
      });
    }
  }
  count_batch(metrics, carried.transport, BatchResult::kAccepted);
  caf::anon_send(declaration_.pool->publisher, atoms::apply_batch_atom_v, std::move(carried.batch), reset,
                 std::move(carried.reply), carried.receipt_ns);
}

void BatchRouter::route(CarriedBatch carried) const {
  const SourceId id{ingest_check::endpoint_key(carried.batch->endpoint()), carried.batch->worker_id(),
                    carried.batch->dp_rank()};
  const std::shared_ptr<const RoutingView> view = routes_ ? routes_->current() : RoutingView::closed();
  if (!view->open) return (*carried.reply)(BatchOutcome{.lost = true});
  const auto lane = view->lanes.find(id);
  if (lane == view->lanes.end()) return refuse(carried, metrics_, BatchResult::kUnknownSource);
  lane->second->carry(std::move(carried), metrics_);
}

}  // namespace kvrelay
