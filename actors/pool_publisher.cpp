#include "actors/pool_publisher.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "actors/crash_report.hpp"
#include "core/capacity.hpp"
#include "core/cbi1.hpp"
#include "core/rate_limited_log.hpp"

namespace kvrelay {

namespace {

using Self = PoolPublisherActor::stateful_pointer<PoolPublisherState>;

RpcStatus publication_unavailable(std::string message) {
  return RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, std::move(message));
}

// Ends every attached stream with `status`, except `detector` (a stream that found the
// publication broken), which ends with `detector_status`.
void end_attached_streams(Self self, const RpcStatus& status, const PoolFrameSinkActor& detector = {},
                          const RpcStatus& detector_status = {}) {
  for (const PoolFrameSinkActor& stream : self->state.streams) {
    self->demonitor(stream.address());
    self->send(stream, atoms::end_stream_atom_v, stream == detector ? detector_status : status);
  }
  self->state.streams.clear();
  self->state.hub_slot.reset();
}

// Ends every stream of the generation, attached or waiting to attach: the generation they were
// admitted to is gone.
void end_generation_streams(Self self, const RpcStatus& status, const PoolFrameSinkActor& detector = {},
                            const RpcStatus& detector_status = {}) {
  end_attached_streams(self, status, detector, detector_status);
  for (const PoolFrameSinkActor& stream : self->state.waiting) {
    self->demonitor(stream.address());
    self->send(stream, atoms::end_stream_atom_v, status);
  }
  self->state.waiting.clear();
}

// The generation can no longer be trusted: every stream ends, membership is told to build a
// new generation (whose sources all start over), and until membership retires this actor it
// refuses what still reaches it, so no ingest call waits on it. `detector`, if any, is the
// stream that saw the broken sequence: it alone ends with INVALID_PUBLICATION.
void fence(Self self, const std::string& reason, const PoolFrameSinkActor& detector) {
  auto& state = self->state;
  if (state.fenced) return;
  state.fenced = true;
  spdlog::error("pool fenced: endpoint={} layout_generation={}: {}", state.config.endpoint,
                state.config.spec.producer.layout_generation(), reason);
  const RpcStatus fenced = publication_unavailable("the pool generation was fenced; resubscribe from the catalog");
  end_generation_streams(self, fenced, detector,
                         RpcStatus::relay_error(v1::RELAY_ERROR_REASON_INVALID_PUBLICATION, reason));
  if (state.config.owner) {
    self->send(state.config.owner, atoms::generation_fenced_atom_v, state.config.spec.producer.layout_generation());
  }
}

RpcStatus resource_limit(std::string message) {
  return RpcStatus::relay_error(v1::RELAY_ERROR_REASON_RESOURCE_LIMIT, std::move(message));
}

cbi1::FilterFormat format_of(const PoolStreamSpec& spec) { return {spec.seed, spec.bucket_count}; }

// Publishes this generation's figures for /metrics, which reads them at scrape time
// without asking the actor. Called after every message that may change them.
void publish_stats(Self self) {
  auto& state = self->state;
  if (!state.config.stats) return;
  metrics::PoolStats& stats = *state.config.stats;
  const auto& index = *state.index;
  constexpr auto relaxed = std::memory_order_relaxed;
  stats.sequence.store(state.sequence, relaxed);
  stats.unique_blocks.store(index.unique_blocks(), relaxed);
  stats.occupied_slots.store(index.filter().occupied_count(), relaxed);
  stats.bucket_count.store(index.filter().bucket_count(), relaxed);
  stats.capacity_failures.store(index.capacity_failures(), relaxed);
  stats.omitted_blocks.store(index.omitted_blocks(), relaxed);
  stats.index_bytes.store(index.table_bytes(), relaxed);
  stats.publication_bytes.store(index.publication_bytes(), relaxed);
  stats.relayouts.store(state.relayouts, relaxed);
  stats.subscribers.store(static_cast<std::uint32_t>(state.streams.size()), relaxed);
  stats.publication_gap_ns.store(static_cast<std::uint64_t>(state.config.cadence.gap(state.streams.size()).count()),
                                 relaxed);
}

void delta_handed_on(Self self, std::int64_t receipt_ns) {
  if (self->state.config.metrics == nullptr || receipt_ns == 0) return;
  self->state.config.metrics->delta_handed_on(std::chrono::nanoseconds(steady_now_ns() - receipt_ns));
}

// Drains the touched buckets into one delta and fans it out. A delta too large for one
// CBI1 frame cannot be published: every stream ends and resubscribes from a snapshot.
void publish(Self self) {
  auto& state = self->state;
  const std::int64_t receipt_ns = state.oldest_pending_receipt_ns;
  state.pending_events = 0;
  state.oldest_pending_receipt_ns = 0;
  const std::vector<BucketImage> images = state.index->drain_publication();
  if (images.empty()) return;  // nothing net-changed: no delta, no new sequence, no gap to keep
  state.last_publication = self->clock().now();
  const std::uint64_t base = state.sequence++;
  state.snapshot_at_sequence.reset();
  if (state.streams.empty()) return;
  if (images.size() > cbi1::kMaxDeltaImages) {
    spdlog::warn(
        "pool endpoint={} layout_generation={}: a publication of {} bucket images exceeds one CBI1 frame; "
        "re-snapshotting",
        state.config.endpoint, state.config.spec.producer.layout_generation(), images.size());
    return end_attached_streams(self, publication_unavailable("publication too large for one delta; resubscribe"));
  }
  auto payload =
      cbi1::encode_delta(format_of(state.config.spec), state.config.spec.dc_id, base, state.sequence, images);
  // The image count fits one frame, so only images the index got wrong fail to encode.
  if (!payload) return fence(self, "a delta could not be encoded: " + payload.error().detail, {});
  PoolDeltaMsg delta{base, state.sequence, std::make_shared<const std::string>(std::move(*payload))};
  for (const PoolFrameSinkActor& stream : state.streams) {
    PoolDeltaMsg sent = delta;
    if (std::exchange(state.corrupt_next_delta, false)) sent.base_sequence += 1;
    self->send(stream, std::move(sent));
  }
  delta_handed_on(self, receipt_ns);
}

// A publication whose touched buckets reach this is published before the batch ends, so a
// delta fits one CBI1 frame however large the batch, unless one event alone touches more (a
// Cleared event or reset of a large source): publish then ends the streams, to resubscribe
// from a snapshot.
constexpr std::size_t kEarlyPublicationBuckets = cbi1::kMaxDeltaImages / 2;

void count_event(Self self, std::int64_t receipt_ns) {
  auto& state = self->state;
  if (state.pending_events++ == 0) state.oldest_pending_receipt_ns = receipt_ns;
  if (state.index->touched_buckets() >= kEarlyPublicationBuckets) publish(self);
}

// How long until one gap (for the streams attached now) has passed since the last
// publication; zero or less once it has.
std::chrono::nanoseconds until_gap_ends(Self self, caf::actor_clock::time_point now) {
  const auto& state = self->state;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(state.last_publication +
                                                              state.config.cadence.gap(state.streams.size()) - now);
}

void arm_delay(Self self, std::chrono::nanoseconds wait) {
  self->state.delay_armed = true;
  self->delayed_send(self, wait, atoms::publish_atom_v);
}

// Called once per message: the threshold is checked at message boundaries (events of one
// batch arrive together; publishing inside it would only split one instant's changes into
// more frames, so only a batch that touches half a frame of buckets publishes early, from
// count_event). Publications are also at least one gap apart (the delay, longer for a pool
// with more streams than its frame budget covers), so under heavy ingest a pool emits at most
// one delta per gap: fewer, larger frames that every subscriber can keep up with, for at most
// one gap of extra latency (docs/benchmarks.md#frame-budget). While a timer is armed nothing
// else publishes, even a threshold met after the gap: the timer's message waits behind
// whatever the publisher's mailbox holds, so a busy publisher publishes less often and each
// delta carries more. Publishing at once instead was measured to lose 256 subscribers
// (docs/benchmarks.md#cadence-under-load).
void publish_or_arm_delay(Self self) {
  auto& state = self->state;
  if (state.pending_events == 0 || state.delay_armed) return;
  const PublicationCadence& cadence = state.config.cadence;
  const auto now = self->clock().now();
  const auto until_gap = until_gap_ends(self, now);
  const bool threshold_met = state.pending_events >= cadence.threshold;
  if (threshold_met && until_gap.count() <= 0) return publish(self);
  arm_delay(self, threshold_met ? until_gap : std::max<std::chrono::nanoseconds>(cadence.delay, until_gap));
}

// The delay timer fired. A publication since it was armed (a stream attaching, an early one)
// moved the gap on, and more streams may have attached: what is pending waits out the rest of
// the gap as it stands now.
void on_publication_due(Self self) {
  auto& state = self->state;
  state.delay_armed = false;
  if (state.pending_events == 0 || state.fenced) return;
  const auto until_gap = until_gap_ends(self, self->clock().now());
  if (until_gap.count() <= 0) return publish(self);
  arm_delay(self, until_gap);
}

// ---- growth (docs/protocol/capacity.md#relayout) ----

// Asks the owner for twice the buckets when the filter wants to grow, at most once per
// min interval (a flood of blocks re-snapshots the pool at that rate at most) and never
// while an answer is awaited.
void maybe_grow(Self self) {
  auto& state = self->state;
  const auto& index = *state.index;
  if (state.fenced || state.growth_asked || state.growth_timer_armed || !state.config.owner) return;
  const std::uint64_t buckets = index.filter().bucket_count();
  if (!capacity::wants_growth(buckets, index.filter().occupied_count(), index.omitted_blocks(),
                              state.config.relayout_load)) {
    return;
  }
  const auto now = self->clock().now();
  const auto earliest = state.last_relayout + state.config.relayout_min_interval;
  if (now < earliest) {
    state.growth_timer_armed = true;
    self->delayed_send(self, std::chrono::duration_cast<std::chrono::nanoseconds>(earliest - now),
                       atoms::growth_due_atom_v);
    return;
  }
  state.growth_asked = true;
  self->send(state.config.owner, atoms::grow_atom_v, state.config.spec.producer.layout_generation(),
             capacity::grown_bucket_count(buckets, index.unique_blocks()));
}

// Rebuilds the filter as the granted generation: every live block placed again from the
// lineage, no source reset. The old generation's streams end; their consumers follow the
// catalog, which names the new generation once this has run.
void relayout(Self self, const v1::ProducerIdentity& producer) {
  auto& state = self->state;
  const std::uint64_t buckets = producer.ckf_format().bucket_count();
  const std::uint64_t previous_generation = state.config.spec.producer.layout_generation();
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t unplaced = state.index->relayout(buckets);
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
  const RpcStatus relaid_out = publication_unavailable(
      fmt::format("the pool was re-laid out into generation {} ({} buckets); resubscribe from the catalog",
                  producer.layout_generation(), buckets));
  end_generation_streams(self, relaid_out);
  state.config.spec.producer = producer;
  state.config.spec.bucket_count = buckets;
  state.sequence = 0;
  state.pending_events = 0;
  state.oldest_pending_receipt_ns = 0;
  state.snapshot_at_sequence.reset();
  state.last_relayout = self->clock().now();
  state.growth_asked = false;
  state.growth_refusal.reset();
  ++state.relayouts;
  spdlog::info(
      "pool re-laid out: endpoint={} layout_generation {} -> {}, {} buckets, {} live blocks, {} unplaced, {} us",
      state.config.endpoint, previous_generation, producer.layout_generation(), buckets, state.index->unique_blocks(),
      unplaced, took.count());
  maybe_grow(self);  // blocks that arrived meanwhile may need more still
}

void growth_refused(Self self, std::string reason) {
  auto& state = self->state;
  state.growth_asked = false;
  state.growth_refusal = std::move(reason);
  state.last_relayout = self->clock().now();  // asks again one interval later, if it still must
  maybe_grow(self);
}

// An index that contradicts itself cannot publish a trustworthy filter: the generation is
// fenced and rebuilt rather than the one event rejected.
bool breaks_index(const EventResult& result) { return result.error == EventError::kIndexerInvariantViolation; }

// A source starting over (a new epoch, or its rank gone): its blocks leave the pool. A clear
// that finds the index contradicting itself stops there and fences, as a Cleared event does.
// Counted once cleared, as every event is once applied: counting first could publish early
// what was pending and leave the clear uncounted, so that nothing would publish it.
void reset_source(Self self, SourceKey source, std::int64_t receipt_ns) {
  auto& state = self->state;
  if (state.index->clear(source) == EventError::kIndexerInvariantViolation) {
    return fence(self,
                 fmt::format("index invariant violated resetting worker {} rank {}", source.worker_id, source.dp_rank),
                 {});
  }
  count_event(self, receipt_ns);
}

// One source's event the pool could not apply (its metrics count every one by kind and error).
void log_rejected_event(const std::string& endpoint, SourceKey source, const EventResult& result) {
  static RateLimitedLog log;
  const std::string_view error = result.error ? to_string(*result.error) : std::string_view("invalid");
  log.warn([&] {
    return fmt::format("pool endpoint={}: rejected an event of worker {} rank {}: {}{}{}", endpoint, source.worker_id,
                       source.dp_rank, error, result.detail.empty() ? "" : ": ", result.detail);
  });
}

void apply_batch(Self self, const ingest_v1::KvEventBatch& batch, std::int64_t receipt_ns, BatchOutcome& outcome) {
  auto& state = self->state;
  const SourceKey source{batch.worker_id(), batch.dp_rank()};
  metrics::EventTally tally;
  for (const ingest_v1::KvEvent& event : batch.events()) {
    const EventResult result = state.events.apply(*state.index, source, event);
    tally.add(event, result);
    if (breaks_index(result)) {
      fence(self,
            fmt::format("index invariant violated by an event of worker {} rank {}", source.worker_id, source.dp_rank),
            {});
      break;
    }
    if (result.disposition == EventDisposition::kIgnored) continue;
    if (result.disposition == EventDisposition::kRejected) {
      ++outcome.events_rejected;
      log_rejected_event(state.config.endpoint, source, result);
    }
    count_event(self, receipt_ns);
    if (state.fenced) break;  // an early publication found the generation broken
  }
  if (state.config.metrics != nullptr) state.config.metrics->events(tally);
  if (!state.fenced) publish_or_arm_delay(self);
  maybe_grow(self);
}

// A copy of the bucket lane as last published, at the current sequence: what is pending
// reaches the new stream as the next delta, with every other stream's. Its bytes count in
// kv_relay_snapshot_image_bytes until the last stream sending it lets go.
std::shared_ptr<const SnapshotImage> take_snapshot_image(Self self) {
  std::vector<std::uint64_t> words = self->state.index->published_words();
  metrics::RelayMetrics* metrics = self->state.config.metrics;
  const auto bytes = static_cast<std::int64_t>(words.size() * sizeof(std::uint64_t));
  if (metrics != nullptr) metrics->snapshot_image_bytes(bytes);
  auto* image = new SnapshotImage{self->state.sequence, std::move(words)};
  return std::shared_ptr<const SnapshotImage>(image, [metrics, bytes](const SnapshotImage* released) {
    if (metrics != nullptr) metrics->snapshot_image_bytes(-bytes);
    delete released;
  });
}

// Why a stream admitted to `layout_generation` cannot join this one, if it cannot.
bool current_generation(const PoolPublisherState& state, std::uint64_t layout_generation) {
  return layout_generation == state.config.spec.producer.layout_generation();
}

std::optional<RpcStatus> generation_refusal(const PoolPublisherState& state, std::uint64_t layout_generation) {
  if (state.fenced) return publication_unavailable("the pool generation was fenced");
  if (!current_generation(state, layout_generation)) {  // re-laid out since admission
    return publication_unavailable("the pool was re-laid out; resubscribe from the catalog");
  }
  return std::nullopt;
}

void await_stream(Self self, const PoolFrameSinkActor& stream, std::uint64_t layout_generation) {
  if (auto refusal = generation_refusal(self->state, layout_generation)) {
    self->send(stream, atoms::end_stream_atom_v, std::move(*refusal));
    return;
  }
  self->monitor(stream);
  self->state.waiting.push_back(stream);
}

void attach_stream(Self self, const PoolFrameSinkActor& stream, std::uint64_t layout_generation) {
  auto& state = self->state;
  if (std::erase(state.waiting, stream) > 0) self->demonitor(stream.address());
  if (auto refusal = generation_refusal(state, layout_generation)) {
    self->send(stream, atoms::end_stream_atom_v, std::move(*refusal));
    return;
  }
  if (!state.hub_slot && state.config.hub_slots) {
    state.hub_slot = state.config.hub_slots->try_acquire();
    if (!state.hub_slot) {
      self->send(stream, atoms::end_stream_atom_v,
                 resource_limit("Relay initialized publication hub limit " +
                                std::to_string(state.config.hub_slots->max()) + " reached"));
      return;
    }
  }
  auto image = state.snapshot_at_sequence.lock();
  if (!image) {
    image = take_snapshot_image(self);
    state.snapshot_at_sequence = image;
  }
  self->monitor(stream);
  state.streams.push_back(stream);
  self->send(stream, PoolSnapshotMsg{std::move(image)});
}

// Sequence and digest describe the last publication, never changes still waiting for one,
// so a replica at that sequence can be checked against them.
PoolStateReport state_report(Self self) {
  auto& state = self->state;
  const auto& filter = state.index->filter();
  PoolStateReport report;
  ingest_v1::PoolState& pool = report.state;
  pool.set_layout_generation(state.config.spec.producer.layout_generation());
  pool.set_sequence(state.sequence);
  pool.set_unique_blocks(state.index->unique_blocks());
  pool.set_occupied_slots(filter.occupied_slots());
  pool.set_bucket_count(filter.bucket_count());
  pool.set_capacity_failures(state.index->capacity_failures());
  pool.set_subscribers(static_cast<std::uint32_t>(state.streams.size()));
  pool.set_filter_digest(state.index->published_digest());
  pool.set_publication_pending(state.pending_events > 0);
  pool.set_omitted_blocks(state.index->omitted_blocks());
  pool.set_relayouts(state.relayouts);
  if (state.growth_refusal) pool.set_growth_refusal(*state.growth_refusal);
  *pool.mutable_producer() = state.config.spec.producer;
  publish_stats(self);
  return report;
}

}  // namespace

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

PoolPublisherActor::behavior_type pool_publisher(Self self, PublisherConfig config) {
  self->state.index.emplace(PoolIndexConfig{
      .bucket_count = config.spec.bucket_count, .seed = config.spec.seed, .expected = config.expected_blocks});
  self->state.events = KvEventApplier(config.semantics);
  self->state.config = std::move(config);
  self->state.last_relayout = self->clock().now();
  auto* recorder = self->state.config.metrics;
  self->state.mailbox.start(self, metrics::mailbox_gauge(recorder, metrics::ActorKind::kPoolPublisher));
  report_crashes(self, "pool publisher");
  publish_stats(self);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    const auto gone = [&](const PoolFrameSinkActor& s) { return s.address() == down.source; };
    std::erase_if(state.streams, gone);
    std::erase_if(state.waiting, gone);
    if (state.streams.empty()) state.hub_slot.reset();  // an idle pool gives its hub slot back
    publish_stats(self);
  });
  return {
      [=](atoms::apply_batch_atom, const EventBatchPtr& batch, SourceReset reset, const BatchReplyPtr& reply,
          std::int64_t receipt_ns) {
        if (reset != SourceReset::kNone && !self->state.fenced) {
          reset_source(self, {batch->worker_id(), batch->dp_rank()}, receipt_ns);
        }
        BatchOutcome outcome{.applied = true, .reset = reset};
        if (!self->state.fenced) {
          apply_batch(self, *batch, receipt_ns, outcome);
          publish_stats(self);
        }
        // A fenced generation refuses every batch, the one that fenced it too (only part of it
        // applied): the source starts over on the next generation.
        (*reply)(self->state.fenced ? BatchOutcome{} : outcome);
      },
      [=](atoms::reset_atom, SourceKey source) {
        if (self->state.fenced) return;
        reset_source(self, source, steady_now_ns());
        if (!self->state.fenced) publish_or_arm_delay(self);
        publish_stats(self);
      },
      [=](atoms::waiting_atom, const PoolFrameSinkActor& stream, std::uint64_t layout_generation) {
        await_stream(self, stream, layout_generation);
      },
      [=](atoms::attach_atom, const PoolFrameSinkActor& stream, std::uint64_t layout_generation) {
        attach_stream(self, stream, layout_generation);
        publish_stats(self);
      },
      [=](atoms::relayout_atom, const v1::ProducerIdentity& producer) {
        if (self->state.fenced) return;  // membership rebuilds the pool instead
        relayout(self, producer);
        publish_stats(self);
      },
      [=](atoms::growth_refused_atom, std::string& reason) {
        growth_refused(self, std::move(reason));
        publish_stats(self);
      },
      [=](atoms::growth_due_atom) {
        self->state.growth_timer_armed = false;
        maybe_grow(self);
      },
      [=](atoms::broken_sequence_atom, const PoolFrameSinkActor& detector, std::uint64_t layout_generation,
          const std::string& reason) {
        // A stream of an earlier layout, ended by the re-layout before its report came, says
        // nothing of this one.
        if (!current_generation(self->state, layout_generation)) return;
        fence(self, reason, detector);
        publish_stats(self);
      },
      [=](atoms::pool_state_atom) { return state_report(self); },
      [=](atoms::retire_atom, const RpcStatus& status) {
        end_generation_streams(self, status);
        self->quit();
      },
      [=](atoms::publish_atom) {
        on_publication_due(self);
        publish_stats(self);
      },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
      [=](atoms::corrupt_atom) { self->state.corrupt_next_delta = true; },
      [=](atoms::evict_atom, std::uint64_t canonical) { self->state.index->evict_fingerprint_for_test(canonical); },
  };
}

}  // namespace kvrelay
