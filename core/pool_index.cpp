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
    case EventError::kPoolFull:
      return "PoolFull";
  }
  return "Unknown";
}

PoolIndex::PoolIndex(const PoolIndexConfig& config)
    : filter_(config.bucket_count, config.seed, config.max_kicks),
      window_(config.bucket_count),
      max_live_blocks_(std::min(config.max_live_blocks, OwnerTable::kMaxOwners)) {}

void PoolIndex::placed(OwnerId id, std::span<const ckf::BucketWrite> writes) {
  window_.mark(writes);
  owners_.set_resident(id, true);
  ++resident_blocks_;
}

std::optional<EventError> PoolIndex::resolve_candidate_owners() {
  constexpr std::uint64_t kMaxMappings = std::numeric_limits<std::uint32_t>::max();
  const auto candidates = scratch_candidates_.values();
  auto& owner = scratch_candidate_owner_;
  owner.clear();
  std::uint64_t new_owners = 0;
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    owner.push_back(owners_.find(candidates[k]));
    const std::uint64_t existing = owner.back() ? owners_.mappings(*owner.back()) : 0;
    if (existing + scratch_candidate_added_[k] > kMaxMappings) return EventError::kOwnershipDegreeOverflow;
    new_owners += owner.back() ? 0 : 1;
  }
  if (owners_.size() + new_owners > max_live_blocks_) return EventError::kPoolFull;
  return std::nullopt;
}

std::optional<EventError> PoolIndex::store(SourceKey source, std::optional<std::uint64_t> parent_engine_id,
                                           std::optional<std::uint32_t> start_position,
                                           std::span<const StoredBlockRef> blocks) {
  if (blocks.empty()) return std::nullopt;  // checked before the parent lookup
  const auto lineage_it = lineage_.find(source);
  const LineageTable* lineage = lineage_it == lineage_.end() ? nullptr : &lineage_it->second;
  auto mapped = [&](std::uint64_t engine_id) -> std::optional<OwnerId> {
    if (lineage == nullptr) return std::nullopt;
    const std::size_t position = lineage->find(engine_id);
    if (position == LineageTable::kNotFound) return std::nullopt;
    return lineage->owner_at(position);
  };

  std::optional<std::uint64_t> previous;
  if (parent_engine_id) {
    const auto parent = mapped(*parent_engine_id);
    if (!parent) return EventError::kParentBlockNotFound;
    previous = owners_.canonical(*parent);
  } else if (start_position.value_or(0) != 0) {
    return EventError::kInvalidBlockSequence;
  }

  // Resolve the whole event before touching anything.
  auto& new_engine_ids = scratch_new_engine_ids_;
  auto& new_candidate = scratch_new_candidate_;
  auto& candidates = scratch_candidates_;
  auto& added = scratch_candidate_added_;
  auto& reoffers = scratch_reoffers_;
  new_engine_ids.clear();
  new_candidate.clear();
  candidates.clear();
  added.clear();
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
    if (const auto known = mapped(block.engine_id)) {
      if (owners_.canonical(*known) != canonical) return EventError::kInvalidBlockSequence;
      reoffers.push_unique(canonical);
    } else if (const auto new_at = new_engine_ids.find(block.engine_id)) {
      if (candidates.values()[new_candidate[*new_at]] != canonical) return EventError::kInvalidBlockSequence;
      reoffers.push_unique(canonical);
    } else {
      const auto at = candidates.find(canonical);
      new_engine_ids.push_new(block.engine_id);
      new_candidate.push_back(at ? *at : candidates.size());
      if (at) {
        ++added[*at];
      } else {
        candidates.push_new(canonical);
        added.push_back(1);
      }
    }
  }
  reoffers.erase_if([&](std::uint64_t c) { return candidates.contains(c); });
  if (auto error = resolve_candidate_owners()) return error;

  return commit_and_admit(source);
}

std::optional<EventError> PoolIndex::commit_and_admit(SourceKey source) {
  const auto candidates = scratch_candidates_.values();
  auto& owner = scratch_candidate_owner_;
  auto& placements = scratch_placements_;
  auto& placement_owners = scratch_placement_owners_;
  placements.clear();
  placement_owners.clear();
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    if (owner[k]) {
      owners_.add_mappings(*owner[k], scratch_candidate_added_[k]);
    } else {
      owner[k] = owners_.add(candidates[k], scratch_candidate_added_[k]);
    }
    if (owners_.resident(*owner[k])) continue;
    placements.push_back(candidates[k]);
    placement_owners.push_back(*owner[k]);
  }
  const auto new_engine_ids = scratch_new_engine_ids_.values();
  if (!new_engine_ids.empty()) {
    LineageTable& target = lineage_[source];
    for (std::size_t i = 0; i < new_engine_ids.size(); ++i) {
      target.insert(new_engine_ids[i], *owner[scratch_new_candidate_[i]]);
    }
  }
  std::optional<EventError> first_error;
  filter_.insert_each(placements, filter_.max_kicks(), scratch_writes_,
                      [&](std::size_t i, ckf::InsertOutcome outcome, const std::vector<ckf::BucketWrite>& writes) {
                        if (outcome == ckf::InsertOutcome::kInserted) return placed(placement_owners[i], writes);
                        ++capacity_failures_;
                        if (!first_error) first_error = EventError::kCapacityExhausted;
                      });
  // The only retry path for a capacity-omitted block: direct placement, silent on failure.
  for (std::uint64_t canonical : scratch_reoffers_.values()) {
    const OwnerId id = *owners_.find(canonical);
    if (owners_.resident(id)) continue;
    if (filter_.insert_with_kicks(canonical, 0, scratch_writes_) == ckf::InsertOutcome::kInserted) {
      placed(id, scratch_writes_);
    }
  }
  return first_error;
}

std::optional<EventError> PoolIndex::remove_one(SourceKey source, LineageTable& lineage, std::size_t position) {
  const OwnerId id = lineage.owner_at(position);
  if (owners_.mappings(id) == 1) {
    if (owners_.resident(id)) {
      const auto write = filter_.remove(owners_.canonical(id));
      if (!write) return EventError::kIndexerInvariantViolation;  // entry left unchanged
      window_.mark(*write);
      --resident_blocks_;
    }
    owners_.erase(id);
  } else {
    owners_.drop_mapping(id);
  }
  lineage.erase_at(position);
  if (lineage.empty()) lineage_.erase(source);
  return std::nullopt;
}

std::optional<EventError> PoolIndex::remove(SourceKey source, std::span<const std::uint64_t> engine_ids) {
  const auto lineage = lineage_.find(source);
  if (lineage == lineage_.end()) {
    unknown_removals_ += engine_ids.size();
    return std::nullopt;
  }
  // As in store, each step's cache misses overlap: the lineage slots first, then their owners,
  // then (the canonical hashes now at hand) the index slots and filter buckets of last owners.
  LineageTable& entries = lineage->second;
  for (std::uint64_t engine_id : engine_ids) entries.prefetch(engine_id);
  auto& owners = scratch_removed_owners_;
  owners.clear();
  for (std::uint64_t engine_id : engine_ids) {
    if (const auto at = entries.find(engine_id); at != LineageTable::kNotFound) {
      owners.push_back(entries.owner_at(at));
      owners_.prefetch_owner(owners.back());
    }
  }
  for (const OwnerId id : owners) {
    if (owners_.mappings(id) != 1) continue;
    owners_.prefetch(owners_.canonical(id));
    filter_.prefetch(owners_.canonical(id));
  }
  std::optional<EventError> first_error;
  for (std::size_t i = 0; i < engine_ids.size(); ++i) {
    // remove_one drops the source's lineage with its last entry: what is left is unknown.
    const auto at = entries.find(engine_ids[i]);
    if (at == LineageTable::kNotFound) {
      ++unknown_removals_;
      continue;
    }
    const bool last_entry = entries.size() == 1;
    const auto error = remove_one(source, entries, at);
    if (error) {
      if (!first_error) first_error = error;
    } else if (last_entry) {  // `entries` is gone with it
      unknown_removals_ += engine_ids.size() - i - 1;
      break;
    }
  }
  return first_error;
}

std::optional<EventError> PoolIndex::clear(SourceKey source) {
  const auto lineage = lineage_.find(source);
  if (lineage == lineage_.end()) return std::nullopt;
  std::vector<std::size_t> positions;
  positions.reserve(lineage->second.size());
  lineage->second.for_each([&](std::size_t position, OwnerId) { positions.push_back(position); });
  LineageTable& entries = lineage->second;  // remove_one drops it with its last entry, ending the loop
  for (std::size_t position : positions) {
    if (const auto error = remove_one(source, entries, position)) {
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
  std::vector<OwnerId> run;
  std::vector<std::uint64_t> hashes;
  run.reserve(kRun);
  hashes.reserve(kRun);
  auto place_run = [&] {
    filter_.insert_each(hashes, filter_.max_kicks(), scratch_writes_,
                        [&](std::size_t i, ckf::InsertOutcome outcome, const std::vector<ckf::BucketWrite>&) {
                          const bool resident = outcome == ckf::InsertOutcome::kInserted;
                          owners_.set_resident(run[i], resident);
                          resident ? ++resident_blocks_ : ++unplaced;
                        });
    run.clear();
    hashes.clear();
  };
  owners_.for_each([&](OwnerId id, std::uint64_t canonical) {
    run.push_back(id);
    hashes.push_back(canonical);
    if (run.size() == kRun) place_run();
  });
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
  const auto id = owners_.find(canonical);
  return id ? owners_.mappings(*id) : 0;
}

bool PoolIndex::is_resident(std::uint64_t canonical) const {
  const auto id = owners_.find(canonical);
  return id && owners_.resident(*id);
}

std::size_t PoolIndex::table_bytes() const {
  std::size_t bytes = owners_.memory_bytes();
  for (const auto& [source, lineage] : lineage_) bytes += lineage.memory_bytes();
  return bytes;
}

}  // namespace kvrelay
