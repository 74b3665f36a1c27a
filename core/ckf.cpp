#include "core/ckf.hpp"

#include <algorithm>
#include <bit>
#include <list>
#include <mutex>

namespace kvrelay::ckf {

std::string_view to_string(ConfigError error) {
  switch (error) {
    case ConfigError::kExpectedCapacityZero:
      return "ExpectedCapacityZero";
    case ConfigError::kCapacityOverflow:
      return "CapacityOverflow";
  }
  return "Unknown";
}

std::expected<std::uint64_t, ConfigError> bucket_count_for(std::uint64_t expected_blocks) {
  if (expected_blocks == 0) return std::unexpected(ConfigError::kExpectedCapacityZero);
  if (expected_blocks > kMaxExpectedBlocks) return std::unexpected(ConfigError::kCapacityOverflow);
  const std::uint64_t required = std::max<std::uint64_t>((5 * expected_blocks + 15) / 16, 2);
  return std::bit_ceil(required);
}

namespace {

// Tables of the seeds seen most recently. A relay uses one seed; a consumer one per relay it
// follows. The bound keeps a peer that announces ever new seeds from growing this without
// limit: an evicted table lives on in the filters and replicas that still hold it.
constexpr std::size_t kKeptSeeds = 16;

std::shared_ptr<const AlternateOffsets> compute_offsets(std::uint64_t seed) {
  auto table = std::make_shared<AlternateOffsets>();
  for (std::uint32_t fingerprint = 0; fingerprint < table->size(); ++fingerprint) {
    std::uint8_t bytes[2];
    store_le16(bytes, static_cast<std::uint16_t>(fingerprint));
    (*table)[fingerprint] = static_cast<std::uint32_t>(xxh3(bytes, sizeof bytes, seed ^ kGolden));
  }
  return table;
}

}  // namespace

std::shared_ptr<const AlternateOffsets> alternate_offsets(std::uint64_t seed) {
  static std::mutex mutex;
  static std::list<std::pair<std::uint64_t, std::shared_ptr<const AlternateOffsets>>> recent;  // newest first
  std::lock_guard lock(mutex);
  const auto hit = std::find_if(recent.begin(), recent.end(), [&](const auto& entry) { return entry.first == seed; });
  if (hit != recent.end()) {
    recent.splice(recent.begin(), recent, hit);
    return hit->second;
  }
  recent.emplace_front(seed, compute_offsets(seed));
  if (recent.size() > kKeptSeeds) recent.pop_back();
  return recent.front().second;
}

std::uint64_t lane_rng_seed(std::uint64_t seed, std::uint64_t lane) {
  return SplitMix64(seed ^ ((lane + 1) * kGolden)).next();
}

std::size_t prefix_hits(std::span<const std::uint64_t> words, const Addressing& addressing,
                        std::span<const std::uint64_t> sequence_hashes) {
  std::size_t hits = 0;
  while (hits < sequence_hashes.size() && contains(words, addressing.probe(sequence_hashes[hits]))) {
    ++hits;
  }
  return hits;
}

Filter::Filter(std::uint64_t bucket_count, std::uint64_t seed, std::uint32_t max_kicks)
    : addressing_(seed, bucket_count), max_kicks_(max_kicks), rng_(lane_rng_seed(seed, 0)), words_(bucket_count, 0) {}

InsertOutcome Filter::relocate(const Probe& p, std::uint32_t max_kicks, std::vector<BucketWrite>& writes) {
  std::uint16_t fingerprint = p.fingerprint;
  std::uint64_t bucket = (rng_.next() & 1) == 0 ? p.bucket_a : p.bucket_b;
  for (std::uint32_t kick = 0; kick < max_kicks; ++kick) {
    const auto victim_slot = static_cast<unsigned>(rng_.next() & 3);
    const std::uint16_t victim = slot(words_[bucket], victim_slot);
    write_slot(bucket, victim_slot, fingerprint, writes);
    fingerprint = victim;
    bucket = addressing_.alternate(bucket, fingerprint);
    if (place_in_empty_slot(bucket, fingerprint, writes)) {
      ++occupied_;  // the kicks only moved fingerprints: one slot more in all
      return InsertOutcome::kInserted;
    }
  }
  for (auto it = writes.rbegin(); it != writes.rend(); ++it) words_[it->bucket] = it->before;
  writes.clear();
  return InsertOutcome::kCapacityExhausted;
}

std::optional<BucketWrite> Filter::remove(std::uint64_t hash) {
  const Probe p = addressing_.probe(hash);
  for (std::uint64_t bucket : {p.bucket_a, p.bucket_b}) {
    const int found = first_slot(words_[bucket], p.fingerprint);
    if (found >= 0) {
      const BucketWrite write{bucket, words_[bucket]};
      words_[bucket] = with_slot(words_[bucket], static_cast<unsigned>(found), 0);
      --occupied_;
      return write;
    }
  }
  return std::nullopt;
}

std::uint64_t Filter::occupied_slots() const {
  std::uint64_t occupied = 0;
  for (std::uint64_t word : words_) occupied += occupied_in(word);
  return occupied;
}

}  // namespace kvrelay::ckf
