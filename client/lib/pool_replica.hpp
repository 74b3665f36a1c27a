#pragma once
// One pool's CKF replica: assembles the initial CBI1 snapshot, then applies contiguous deltas.
// It accepts a frame only when the relay identity, producer identity, filter format and base
// sequence all match what it installed; any fault retires the replica for good — the owner
// drops it and subscribes afresh (docs/protocol/rpcs.md#consumer-rules).
#include <cstdint>
#include <span>
#include <vector>

#include "client/lib/fault.hpp"
#include "core/cbi1.hpp"
#include "core/ckf.hpp"

namespace kvrelay::client {

enum class ReplicaPhase { kAssembling, kInstalled, kFaulted };

class PoolReplica {
 public:
  PoolReplica(const v1::ProducerIdentity& producer, const v1::RelayIdentity& relay);

  // With `applied_images`, an applied delta's bucket images are moved there; a snapshot chunk,
  // a heartbeat or a fault leave it untouched.
  Applied apply(const v1::FilterUpdate& update, std::vector<BucketImage>* applied_images = nullptr);

  ReplicaPhase phase() const { return phase_; }
  bool installed() const { return phase_ == ReplicaPhase::kInstalled; }
  std::uint64_t sequence() const { return sequence_; }
  std::span<const std::uint64_t> words() const { return words_; }
  const ckf::Addressing& addressing() const { return addressing_; }
  std::uint64_t deltas_applied() const { return deltas_applied_; }
  std::uint64_t images_applied() const { return images_applied_; }
  // Deltas at or below the installed sequence, ignored (docs/protocol/cbi1-ckf.md#applying-deltas).
  std::uint64_t stale_deltas() const { return stale_deltas_; }
  // Fingerprints held: occupied slots over every bucket.
  std::uint64_t occupied_slots() const { return occupied_slots_; }
  std::uint64_t digest() const;  // XXH3 of the bucket words, as GetState's filter_digest

 private:
  Applied check_frame(const v1::FilterUpdate& update) const;
  Applied absorb_chunk(const cbi1::Decoded& frame);
  Applied apply_delta(const v1::FilterUpdate& update, const cbi1::DecodedDelta& delta);
  Applied fail(Fault fault);

  wire::ProducerKey producer_;
  std::uint64_t relay_instance_;
  std::uint64_t relay_incarnation_;
  cbi1::FilterFormat format_;
  ckf::Addressing addressing_;
  cbi1::SnapshotAssembly assembly_;
  ReplicaPhase phase_ = ReplicaPhase::kAssembling;
  RandomAccessWords words_;
  std::vector<std::uint64_t> touched_;  // one bit per bucket, set only while a delta is checked
  std::uint64_t sequence_ = 0;
  std::uint64_t deltas_applied_ = 0;
  std::uint64_t images_applied_ = 0;
  std::uint64_t stale_deltas_ = 0;
  std::uint64_t occupied_slots_ = 0;
};

}  // namespace kvrelay::client
