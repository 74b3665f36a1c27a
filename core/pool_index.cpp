#include "core/pool_index.hpp"

#include <algorithm>
#include <limits>

#include "core/token_hashing.hpp"
#include "core/xxh3.hpp"

namespace kvrelay {

std::string_view to_string(EventError error) {
  switch (error) {
    case EventError::kParentBlockNotFound:
      return "ParentBlockNotFound";
    case EventError::kInvalidBlockSequence:
      return "InvalidBlockSequence";
    case EventError::kCapacityExhausted:
      return "CapacityExhausted";
    case EventError::kOwnershipDegreeOverflow:
      return "OwnershipDegreeOverflow";
    case EventError::kIndexerInvariantViolation:
      return "IndexerInvariantViolation";
  }
  return "Unknown";
}

PoolIndex::PoolIndex(const PoolIndexConfig& config)
    : filter_(config.bucket_count, config.seed, config.max_kicks), window_(config.bucket_count) {}

void PoolIndex::placed(std::uint64_t canonical, std::span<const ckf::BucketWrite> writes) {
  window_.mark(writes);
  owners_[canonical].resident = true;
  ++resident_blocks_;
}

// Whether the new mappings would push a canonical hash's owner count past 32 bits. Counting a
// hash's share of the new mappings is needed only that close to the limit.
std::optional<EventError> PoolIndex::ownership_overflow(std::span<const std::uint64_t> new_canonicals) const {
  constexpr std::uint64_t kMaxMappings = std::numeric_limits<std::uint32_t>::max();
  for (const std::uint64_t canonical : new_canonicals) {
    const auto it = owners_.find(canonical);
    const std::uint64_t existing = it == owners_.end() ? 0 : it->second.mappings;
    if (existing + new_canonicals.size() <= kMaxMappings) continue;
    const auto added = std::count(new_canonicals.begin(), new_canonicals.end(), canonical);
    if (existing + static_cast<std::uint64_t>(added) > kMaxMappings) return EventError::kOwnershipDegreeOverflow;
  }
  return std::nullopt;
}

std::optional<EventError> PoolIndex::store(SourceKey source, std::optional<std::uint64_t> parent_engine_id,
                                           std::optional<std::uint32_t> start_position,
                                           std::span<const StoredBlockRef> blocks) {
  if (blocks.empty()) return std::nullopt;  // checked before the parent lookup
  const auto lineage_it = lineage_.find(source);
  const Lineage* lineage = lineage_it == lineage_.end() ? nullptr : &lineage_it->second;
  auto mapped = [&](std::uint64_t engine_id) -> std::optional<std::uint64_t> {
    if (lineage == nullptr) return std::nullopt;
    const auto it = lineage->find(engine_id);
    if (it == lineage->end()) return std::nullopt;
    return it->second;
  };

  std::optional<std::uint64_t> previous;
  if (parent_engine_id) {
    previous = mapped(*parent_engine_id);
    if (!previous) return EventError::kParentBlockNotFound;
  } else if (start_position.value_or(0) != 0) {
    return EventError::kInvalidBlockSequence;
  }

  // Resolve the whole event before touching anything.
  auto& new_engine_ids = scratch_new_engine_ids_;
  auto& new_canonicals = scratch_new_canonicals_;
  auto& candidates = scratch_candidates_;
  auto& reoffers = scratch_reoffers_;
  new_engine_ids.clear();
  new_canonicals.clear();
  candidates.clear();
  reoffers.clear();
  // A busy pool's tables are far larger than the cache: every block's lineage and owner slots
  // are requested before any is read, so that their cache misses overlap.
  auto& canonicals = scratch_canonicals_;
  canonicals.clear();
  for (const StoredBlockRef& block : blocks) {
    previous = previous ? hashing::next_sequence_hash(*previous, block.local_hash) : block.local_hash;
    canonicals.push_back(*previous);
    if (lineage != nullptr) lineage->prefetch(block.engine_id);
    owners_.prefetch(*previous);
  }
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const StoredBlockRef& block = blocks[b];
    const std::uint64_t canonical = canonicals[b];
    std::optional<std::uint64_t> known = mapped(block.engine_id);
    std::optional<std::size_t> new_at;
    if (!known && (new_at = new_engine_ids.find(block.engine_id))) known = new_canonicals[*new_at];
    if (known && *known != canonical) return EventError::kInvalidBlockSequence;
    if (known) {
      reoffers.push_unique(canonical);
    } else {
      new_engine_ids.push_new(block.engine_id);
      new_canonicals.push_back(canonical);
      candidates.push_unique(canonical);
    }
  }
  reoffers.erase_if([&](std::uint64_t c) { return candidates.contains(c); });
  if (auto overflow = ownership_overflow(new_canonicals)) return overflow;

  // Commit lineage and owner counts, then admit.
  if (!new_canonicals.empty()) {
    Lineage& target = lineage_[source];
    for (std::size_t i = 0; i < new_canonicals.size(); ++i) {
      target.emplace(new_engine_ids.values()[i], new_canonicals[i]);
      ++owners_[new_canonicals[i]].mappings;
    }
  }
  std::optional<EventError> first_error;
  candidates.erase_if([&](std::uint64_t canonical) { return owners_[canonical].resident; });
  filter_.insert_each(candidates.values(), filter_.max_kicks(), scratch_writes_,
                      [&](std::size_t i, ckf::InsertOutcome outcome, const std::vector<ckf::BucketWrite>& writes) {
                        if (outcome == ckf::InsertOutcome::kInserted) return placed(candidates.values()[i], writes);
                        ++capacity_failures_;
                        if (!first_error) first_error = EventError::kCapacityExhausted;
                      });
  // The only retry path for a capacity-omitted block: direct placement, silent on failure.
  for (std::uint64_t canonical : reoffers.values()) {
    if (owners_[canonical].resident) continue;
    if (filter_.insert_with_kicks(canonical, 0, scratch_writes_) == ckf::InsertOutcome::kInserted) {
      placed(canonical, scratch_writes_);
    }
  }
  return first_error;
}

std::optional<EventError> PoolIndex::remove_one(SourceKey source, Lineage& lineage, Lineage::iterator entry) {
  const std::uint64_t canonical = entry->second;
  const auto owner = owners_.find(canonical);
  if (owner->second.mappings == 1) {
    if (owner->second.resident) {
      const auto write = filter_.remove(canonical);
      if (!write) return EventError::kIndexerInvariantViolation;  // entry left unchanged
      window_.mark(*write);
      --resident_blocks_;
    }
    owners_.erase(owner);
  } else {
    --owner->second.mappings;
  }
  lineage.erase(entry);
  if (lineage.empty()) lineage_.erase(source);
  return std::nullopt;
}

std::optional<EventError> PoolIndex::remove(SourceKey source, std::span<const std::uint64_t> engine_ids) {
  // As in store: the lineage slots first, then (their canonical hashes now at hand) the owners'.
  if (const auto lineage = lineage_.find(source); lineage != lineage_.end()) {
    const Lineage& entries = lineage->second;
    for (std::uint64_t engine_id : engine_ids) entries.prefetch(engine_id);
    for (std::uint64_t engine_id : engine_ids) {
      if (const auto entry = entries.find(engine_id); entry != entries.end()) owners_.prefetch(entry->second);
    }
  }
  std::optional<EventError> first_error;
  for (std::uint64_t engine_id : engine_ids) {
    // Looked up per id: remove_one drops the source's lineage with its last entry.
    const auto lineage = lineage_.find(source);
    const auto entry = lineage == lineage_.end() ? Lineage::iterator{} : lineage->second.find(engine_id);
    if (lineage == lineage_.end() || entry == lineage->second.end()) {
      ++unknown_removals_;
      continue;
    }
    const auto error = remove_one(source, lineage->second, entry);
    if (error && !first_error) first_error = error;
  }
  return first_error;
}

std::optional<EventError> PoolIndex::clear(SourceKey source) {
  const auto lineage = lineage_.find(source);
  if (lineage == lineage_.end()) return std::nullopt;
  std::vector<std::uint64_t> engine_ids;
  engine_ids.reserve(lineage->second.size());
  for (const auto& [engine_id, canonical] : lineage->second) engine_ids.push_back(engine_id);
  Lineage& entries = lineage->second;  // remove_one drops it with its last entry, ending the loop
  for (std::uint64_t engine_id : engine_ids) {
    if (const auto error = remove_one(source, entries, entries.find(engine_id))) {
      return error;  // as upstream: the clear stops at the first invariant violation
    }
  }
  return std::nullopt;
}

std::uint64_t PoolIndex::relayout(std::uint64_t bucket_count) {
  filter_ = ckf::Filter(bucket_count, filter_.seed(), filter_.max_kicks());
  window_ = PublicationWindow(bucket_count);  // the new layout is a snapshot, not a delta
  resident_blocks_ = 0;
  std::uint64_t unplaced = 0;
  // In runs of live blocks, so the filter prefetches ahead without a copy of every hash.
  constexpr std::size_t kRun = 4096;
  std::vector<Owner*> run;
  std::vector<std::uint64_t> hashes;
  run.reserve(kRun);
  hashes.reserve(kRun);
  auto place_run = [&] {
    filter_.insert_each(hashes, filter_.max_kicks(), scratch_writes_,
                        [&](std::size_t i, ckf::InsertOutcome outcome, const std::vector<ckf::BucketWrite>&) {
                          Owner& owner = *run[i];
                          owner.resident = outcome == ckf::InsertOutcome::kInserted;
                          owner.resident ? ++resident_blocks_ : ++unplaced;
                        });
    run.clear();
    hashes.clear();
  };
  for (auto& [canonical, owner] : owners_) {
    run.push_back(&owner);
    hashes.push_back(canonical);
    if (run.size() == kRun) place_run();
  }
  place_run();
  capacity_failures_ += unplaced;
  return unplaced;
}

std::uint64_t PoolIndex::published_digest() const {
  std::vector<ckf::BucketWrite> unpublished(window_.first_touches().begin(), window_.first_touches().end());
  std::ranges::sort(unpublished, {}, &ckf::BucketWrite::bucket);
  const std::span<const std::uint64_t> words = filter_.words();
  XXH3_state_t hasher;
  XXH3_64bits_reset(&hasher);
  std::size_t next = 0;  // the first word not hashed yet
  for (const ckf::BucketWrite& touch : unpublished) {
    XXH3_64bits_update(&hasher, words.data() + next, (touch.bucket - next) * sizeof(std::uint64_t));
    XXH3_64bits_update(&hasher, &touch.before, sizeof touch.before);
    next = touch.bucket + 1;
  }
  XXH3_64bits_update(&hasher, words.data() + next, (words.size() - next) * sizeof(std::uint64_t));
  return XXH3_64bits_digest(&hasher);
}

std::size_t PoolIndex::lineage_entries(SourceKey source) const {
  const auto it = lineage_.find(source);
  return it == lineage_.end() ? 0 : it->second.size();
}

std::uint32_t PoolIndex::owner_count(std::uint64_t canonical) const {
  const auto it = owners_.find(canonical);
  return it == owners_.end() ? 0 : it->second.mappings;
}

bool PoolIndex::is_resident(std::uint64_t canonical) const {
  const auto it = owners_.find(canonical);
  return it != owners_.end() && it->second.resident;
}

}  // namespace kvrelay
