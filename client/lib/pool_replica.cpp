#include "client/lib/pool_replica.hpp"

#include <fmt/format.h>

#include "core/xxh3.hpp"

namespace kvrelay::client {

namespace {

cbi1::FilterFormat format_of(const v1::ProducerIdentity& producer) {
  return {producer.ckf_format().seed(), producer.ckf_format().bucket_count()};
}

const cbi1::Header& header_of(const cbi1::Decoded& frame) {
  return std::visit([](const auto& decoded) -> const cbi1::Header& { return decoded.header; }, frame);
}

}  // namespace

// Only constructed from a validated catalog descriptor, so the format is a supported shape.
PoolReplica::PoolReplica(const v1::ProducerIdentity& producer, const v1::RelayIdentity& relay)
    : producer_(wire::producer_key(producer)),
      relay_instance_(relay.drt_instance_id()),
      relay_incarnation_(relay.relay_incarnation()),
      format_(format_of(producer)),
      addressing_(format_.seed, format_.bucket_count),
      assembly_(format_.bucket_count) {}

Applied PoolReplica::apply(const v1::FilterUpdate& update, std::vector<BucketImage>* applied_images) {
  if (phase_ == ReplicaPhase::kFaulted) return Fault{"Retired", "the replica already faulted"};
  if (auto fault = check_frame(update)) return fail(std::move(*fault));
  if (update.kind() == v1::FILTER_UPDATE_KIND_HEARTBEAT) {
    if (!installed()) return fail({"HeartbeatBeforeSnapshot", "a heartbeat arrived before the snapshot completed"});
    if (update.sequence() != sequence_) {
      return fail(
          {"SequenceGap", fmt::format("heartbeat at sequence {}, replica at {}", update.sequence(), sequence_)});
    }
    return std::nullopt;
  }
  auto decoded = cbi1::decode(update.payload(), format_);
  if (!decoded) {
    return fail({fmt::format("Cbi1:{}", cbi1::to_string(decoded.error().kind)), decoded.error().detail});
  }
  const auto& header = header_of(*decoded);
  if (header.dc_id != producer_.pool.dc_id) {
    return fail(
        {"DcIdMismatch", fmt::format("CBI1 dc_id {:#x}, pool dc_id {:#x}", header.dc_id, producer_.pool.dc_id)});
  }
  if (header.epoch != update.sequence()) {
    return fail({"EpochMismatch", fmt::format("CBI1 epoch {}, frame sequence {}", header.epoch, update.sequence())});
  }
  if (update.kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK) {
    if (!std::holds_alternative<cbi1::DecodedChunk>(*decoded))
      return fail({"PayloadKind", "a snapshot frame carries a delta"});
    return absorb_chunk(*decoded);
  }
  auto* delta = std::get_if<cbi1::DecodedDelta>(&*decoded);
  if (delta == nullptr) return fail({"PayloadKind", "a delta frame carries a snapshot chunk"});
  auto fault = apply_delta(update, *delta);
  if (!fault && applied_images != nullptr) *applied_images = std::move(delta->images);
  return fault;
}

// Envelope and identity: the frame must come from the relay and producer this replica follows.
Applied PoolReplica::check_frame(const v1::FilterUpdate& update) const {
  if (auto error = wire::check_response(update)) return fault_of(*error);
  if (update.relay().drt_instance_id() != relay_instance_ || update.relay().relay_incarnation() != relay_incarnation_) {
    return Fault{"RelayIdentityDrift", "the frame comes from another relay incarnation"};
  }
  if (wire::producer_key(update.producer()) != producer_) {
    return Fault{"ProducerIdentityDrift", "the frame names another producer generation"};
  }
  return std::nullopt;
}

Applied PoolReplica::absorb_chunk(const cbi1::Decoded& frame) {
  if (installed()) return fail({"SnapshotAfterInstall", "a snapshot chunk arrived after the snapshot completed"});
  auto outcome = assembly_.absorb(frame);
  if (!outcome) return fail({fmt::format("Cbi1:{}", cbi1::to_string(outcome.error().kind)), outcome.error().detail});
  if (!*outcome) return std::nullopt;
  words_ = std::move((*outcome)->words);
  touched_.assign((format_.bucket_count + 63) / 64, 0);
  occupied_slots_ = 0;
  for (std::uint64_t word : words_) occupied_slots_ += ckf::occupied_in(word);
  sequence_ = (*outcome)->epoch;
  phase_ = ReplicaPhase::kInstalled;
  return std::nullopt;
}

// Consumer acceptance of a delta (docs/protocol/cbi1-ckf.md#applying-deltas): stale ones
// ignored; the others contiguous, non-empty, no bucket twice.
Applied PoolReplica::apply_delta(const v1::FilterUpdate& update, const cbi1::DecodedDelta& delta) {
  if (!installed()) return fail({"DeltaBeforeSnapshot", "a delta arrived before the snapshot completed"});
  if (update.sequence() <= sequence_) {  // the replica holds its changes already
    ++stale_deltas_;
    return std::nullopt;
  }
  if (update.base_sequence() != sequence_ || delta.base_epoch != sequence_) {
    return fail({"SequenceGap", fmt::format("delta from {} onto replica at {}", update.base_sequence(), sequence_)});
  }
  if (delta.images.empty()) return fail({"EmptyDelta", "a delta without bucket images"});
  // A replica larger than the cache misses on nearly every image's bucket. The old words are
  // read first, in a loop of independent loads the core runs many of at once; the writes then
  // find their lines in the cache. (Software prefetches of every bucket, tried before, left the
  // writes waiting on memory: docs/benchmarks.md#replica-prefetch.)
  std::uint64_t occupied_before = 0;
  for (const auto& image : delta.images) occupied_before += ckf::occupied_in(words_[image.bucket]);
  // A fault retires the replica, so images may be written while duplicates are still sought.
  std::uint64_t occupied_after = 0;
  for (const auto& image : delta.images) {
    auto& bits = touched_[image.bucket / 64];
    const std::uint64_t bit = std::uint64_t{1} << (image.bucket % 64);
    if (bits & bit) return fail({"DuplicateBucket", fmt::format("bucket {} twice in one delta", image.bucket)});
    bits |= bit;
    occupied_after += ckf::occupied_in(image.word);
    words_[image.bucket] = image.word;
  }
  occupied_slots_ = occupied_slots_ - occupied_before + occupied_after;
  for (const auto& image : delta.images) touched_[image.bucket / 64] = 0;
  sequence_ = update.sequence();
  ++deltas_applied_;
  images_applied_ += delta.images.size();
  return std::nullopt;
}

Applied PoolReplica::fail(Fault fault) {
  phase_ = ReplicaPhase::kFaulted;
  words_ = {};
  touched_ = {};
  occupied_slots_ = 0;  // a retired replica holds nothing
  return fault;
}

std::uint64_t PoolReplica::digest() const { return xxh3(words_.data(), words_.size() * 8, 0); }

}  // namespace kvrelay::client
