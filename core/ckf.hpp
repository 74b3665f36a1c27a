#pragma once
// The cuckoo filter (CKF) of one KV pool (docs/protocol/cbi1-ckf.md#ckf): packed buckets of four
// 16-bit fingerprints, two candidate buckets per hash, bounded relocation with a SplitMix64
// stream, and every write of a failed insertion undone.
#include <array>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/huge_pages.hpp"
#include "core/xxh3.hpp"

namespace kvrelay::ckf {

inline constexpr std::uint64_t kDefaultSeed = 0x5DEECE66D1B54A33;
inline constexpr std::uint32_t kDefaultMaxKicks = 500;
inline constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15;
inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr std::uint32_t kFingerprintBits = 16;
inline constexpr std::uint32_t kSlotsPerBucket = 4;
inline constexpr std::uint64_t kMaxBucketCount = std::uint64_t{1} << 24;
// Largest expected_unique_blocks whose bucket count CBI1 can still carry (2^24 buckets).
inline constexpr std::uint64_t kMaxExpectedBlocks = 53'687'091;

enum class ConfigError { kExpectedCapacityZero, kCapacityOverflow };
std::string_view to_string(ConfigError error);

// Buckets for `expected_blocks` unique blocks at <= 80 % slot load: a power of two.
std::expected<std::uint64_t, ConfigError> bucket_count_for(std::uint64_t expected_blocks);

// ---- bucket words: slot i occupies bits [16i, 16i + 16); 0 is an empty slot ----

inline std::uint16_t slot(std::uint64_t word, unsigned i) { return static_cast<std::uint16_t>(word >> (16 * i)); }
inline std::uint64_t with_slot(std::uint64_t word, unsigned i, std::uint16_t fingerprint) {
  const unsigned shift = 16 * i;
  return (word & ~(std::uint64_t{0xFFFF} << shift)) | (std::uint64_t{fingerprint} << shift);
}
// Non-empty slots: fold each 16-bit lane onto its lowest bit, then sum those four bits into
// the top lane with one multiplication (no popcount instruction is assumed).
inline unsigned occupied_in(std::uint64_t word) {
  constexpr std::uint64_t kLaneLowBits = 0x0001000100010001;
  std::uint64_t folded = word | (word >> 8);
  folded |= folded >> 4;
  folded |= folded >> 2;
  folded |= folded >> 1;
  return static_cast<unsigned>(((folded & kLaneLowBits) * kLaneLowBits) >> 48);
}
// Lowest slot holding `fingerprint` (0 finds an empty slot), or -1.
inline int first_slot(std::uint64_t word, std::uint16_t fingerprint) {
  for (unsigned i = 0; i < kSlotsPerBucket; ++i) {
    if (slot(word, i) == fingerprint) return static_cast<int>(i);
  }
  return -1;
}
// SWAR "some 16-bit lane equals fingerprint".
inline bool bucket_holds(std::uint64_t word, std::uint16_t fingerprint) {
  constexpr std::uint64_t kLanes = 0x0001000100010001;
  constexpr std::uint64_t kHighBits = 0x8000800080008000;
  const std::uint64_t diff = word ^ (fingerprint * kLanes);
  return ((diff - kLanes) & ~diff & kHighBits) != 0;
}

// ---- addressing ----

// The alternate-bucket offset of every fingerprint under one seed, before masking to a
// filter's bucket count: the low 32 bits of XXH3-64(le16(fingerprint), seed ^ kGolden). Bucket
// counts stop at 2^24, so 32 bits are all any mask keeps. 256 KiB per seed, computed once and
// shared by every filter and replica of that seed (docs/protocol/cbi1-ckf.md#addressing).
using AlternateOffsets = std::array<std::uint32_t, 65536>;
std::shared_ptr<const AlternateOffsets> alternate_offsets(std::uint64_t seed);

struct Probe {
  std::uint16_t fingerprint;
  std::uint64_t bucket_a;
  std::uint64_t bucket_b;
  friend bool operator==(const Probe&, const Probe&) = default;
};

class Addressing {
 public:
  // bucket_count must be a power of two >= 2.
  Addressing(std::uint64_t seed, std::uint64_t bucket_count)
      : seed_(seed), mask_(bucket_count - 1), offsets_(alternate_offsets(seed)) {}

  Probe probe(std::uint64_t sequence_hash) const {
    const std::uint64_t mixed = xxh3_u64(sequence_hash, seed_);
    std::uint16_t fingerprint = static_cast<std::uint16_t>(mixed);
    if (fingerprint == 0) fingerprint = 1;
    const std::uint64_t a = (mixed >> 16) & mask_;
    return {fingerprint, a, alternate(a, fingerprint)};
  }

  // An involution: depends only on (fingerprint, seed, bucket_count), never returns bucket.
  std::uint64_t alternate(std::uint64_t bucket, std::uint16_t fingerprint) const {
    std::uint64_t delta = (*offsets_)[fingerprint] & mask_;
    if (delta == 0) delta = 1;
    return bucket ^ delta;
  }

  std::uint64_t seed() const { return seed_; }
  std::uint64_t bucket_count() const { return mask_ + 1; }

 private:
  std::uint64_t seed_;
  std::uint64_t mask_;
  std::shared_ptr<const AlternateOffsets> offsets_;
};

// ---- relocation RNG ----

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() {
    state_ += kGolden;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
    return z ^ (z >> 31);
  }
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

// Initial RNG state of a producer lane: the first output of a SplitMix64 seeded per lane.
std::uint64_t lane_rng_seed(std::uint64_t seed, std::uint64_t lane = 0);

// ---- read-only queries over bucket words (shared by the producer and consumer replicas) ----

inline bool contains(std::span<const std::uint64_t> words, const Probe& p) {
  return bucket_holds(words[p.bucket_a], p.fingerprint) || bucket_holds(words[p.bucket_b], p.fingerprint);
}

// How many leading sequence hashes of a prompt the filter holds.
std::size_t prefix_hits(std::span<const std::uint64_t> words, const Addressing& addressing,
                        std::span<const std::uint64_t> sequence_hashes);

// ---- the mutable filter ----

struct BucketWrite {
  std::uint64_t bucket;
  std::uint64_t before;  // the word before this write
};

enum class InsertOutcome { kInserted, kCapacityExhausted };

class Filter {
 public:
  Filter(std::uint64_t bucket_count, std::uint64_t seed = kDefaultSeed, std::uint32_t max_kicks = kDefaultMaxKicks);

  // Places one fingerprint copy of `hash`. On success `writes` lists every write in order
  // (a bucket may repeat); on failure every write is undone (the RNG is not rewound).
  InsertOutcome insert(std::uint64_t hash, std::vector<BucketWrite>& writes) {
    return insert_with_kicks(hash, max_kicks_, writes);
  }
  // max_kicks 0: direct placement only (one RNG draw still happens when both are full).
  InsertOutcome insert_with_kicks(std::uint64_t hash, std::uint32_t max_kicks, std::vector<BucketWrite>& writes) {
    return insert_probe(addressing_.probe(hash), max_kicks, writes);
  }
  InsertOutcome insert_probe(const Probe& probe, std::uint32_t max_kicks, std::vector<BucketWrite>& writes) {
    writes.clear();
    if (place_in_empty_slot(probe.bucket_a, probe.fingerprint, writes) ||
        place_in_empty_slot(probe.bucket_b, probe.fingerprint, writes)) {
      ++occupied_;
      return InsertOutcome::kInserted;
    }
    return relocate(probe, max_kicks, writes);
  }

  // Inserts each hash in order exactly as insert_with_kicks would, hashing ahead and prefetching
  // the candidate buckets of the next few so that a cache-cold filter waits on memory for
  // several inserts at once. on_outcome(i, outcome, writes) follows each insert.
  template <class OnOutcome>
  void insert_each(std::span<const std::uint64_t> hashes, std::uint32_t max_kicks, std::vector<BucketWrite>& writes,
                   OnOutcome&& on_outcome) {
    each_prefetched(hashes, [&](std::size_t i, const Probe& probe) {
      on_outcome(i, insert_probe(probe, max_kicks, writes), writes);
    });
  }

  // Clears the lowest matching slot, bucket_a first; nullopt when no copy is present.
  std::optional<BucketWrite> remove(std::uint64_t hash);
  // Requests both candidate buckets of `hash` ahead of a remove.
  void prefetch(std::uint64_t hash) const { prefetched(hash); }

  bool contains(std::uint64_t hash) const { return ckf::contains(words_, addressing_.probe(hash)); }
  // on_result(i, contained) for each hash, with the buckets of the next few prefetched.
  template <class OnResult>
  void contains_each(std::span<const std::uint64_t> hashes, OnResult&& on_result) const {
    each_prefetched(hashes, [&](std::size_t i, const Probe& probe) { on_result(i, ckf::contains(words_, probe)); });
  }
  std::size_t prefix_hits(std::span<const std::uint64_t> sequence_hashes) const {
    return ckf::prefix_hits(words_, addressing_, sequence_hashes);
  }

  const Addressing& addressing() const { return addressing_; }
  std::span<const std::uint64_t> words() const { return words_; }
  std::uint64_t bucket_count() const { return words_.size(); }
  std::uint64_t seed() const { return addressing_.seed(); }
  std::uint64_t rng_state() const { return rng_.state(); }
  std::uint32_t max_kicks() const { return max_kicks_; }
  // Non-empty slots counted from the words, O(buckets).
  std::uint64_t occupied_slots() const;
  // The same number kept up to date by insert and remove, O(1): what /metrics reads after
  // every batch.
  std::uint64_t occupied_count() const { return occupied_; }

 private:
  Probe prefetched(std::uint64_t hash) const {
    const Probe probe = addressing_.probe(hash);
    __builtin_prefetch(&words_[probe.bucket_a], 1);
    __builtin_prefetch(&words_[probe.bucket_b], 1);
    return probe;
  }
  // visit(i, probe) for each hash in order, its probe computed and its buckets prefetched
  // kAhead hashes earlier.
  template <class Visit>
  void each_prefetched(std::span<const std::uint64_t> hashes, Visit&& visit) const {
    constexpr std::size_t kAhead = 8;
    std::array<Probe, kAhead> ring;
    const std::size_t primed = std::min(kAhead, hashes.size());
    for (std::size_t i = 0; i < primed; ++i) ring[i] = prefetched(hashes[i]);
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      const Probe probe = ring[i % kAhead];
      if (i + kAhead < hashes.size()) ring[i % kAhead] = prefetched(hashes[i + kAhead]);
      visit(i, probe);
    }
  }
  bool place_in_empty_slot(std::uint64_t bucket, std::uint16_t fingerprint, std::vector<BucketWrite>& writes) {
    const int empty = first_slot(words_[bucket], 0);
    if (empty < 0) return false;
    write_slot(bucket, static_cast<unsigned>(empty), fingerprint, writes);
    return true;
  }
  void write_slot(std::uint64_t bucket, unsigned slot_index, std::uint16_t fingerprint,
                  std::vector<BucketWrite>& writes) {
    writes.push_back({bucket, words_[bucket]});
    words_[bucket] = with_slot(words_[bucket], slot_index, fingerprint);
  }
  // Both candidate buckets are full: the bounded random walk of kicks, undone if it fails.
  InsertOutcome relocate(const Probe& probe, std::uint32_t max_kicks, std::vector<BucketWrite>& writes);

  Addressing addressing_;
  std::uint32_t max_kicks_;
  SplitMix64 rng_;
  RandomAccessWords words_;
  std::uint64_t occupied_ = 0;  // non-empty slots of words_
};

}  // namespace kvrelay::ckf
