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
      max_live_blocks_(std::min(config.max_live_blocks, OwnerTable::kMaxOwners)),
      expected_source_blocks_(config.expected.per_source) {
  owners_.reserve(std::min(config.expected.unique, max_live_blocks_));
}

void PoolIndex::placed(OwnerId id, std::span<const ckf::BucketWrite> writes) {
  window_.mark(writes);
  owners_.set_resident(id, true);
  ++resident_blocks_;
}

std::optional<EventError> PoolIndex::store(SourceKey source, std::optional<std::uint64_t> parent_engine_id,
                                           std::optional<std::uint32_t> start_position,
                                           std::span<const StoredBlockRef> blocks) {
  if (blocks.empty()) return std::nullopt;  // checked before the parent lookup
  const auto lineage_it = lineage_.find(source);
  LineageTable* lineage = lineage_it == lineage_.end() ? nullptr : &lineage_it->second;

  std::optional<std::uint64_t> previous;
  if (parent_engine_id) {
    const std::size_t parent = lineage == nullptr ? LineageTable::kNotFound : lineage->find(*parent_engine_id);
    if (parent == LineageTable::kNotFound) return EventError::kParentBlockNotFound;
    previous = owners_.canonical(lineage->owner_at(parent));
  } else if (start_position.value_or(0) != 0) {
    return EventError::kInvalidBlockSequence;
  }

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

  // The blocks are mapped as they come and the mappings undone if one is rejected: the event is
  // applied whole or not at all, as if everything had been checked first.
  const bool new_source = lineage == nullptr;
  if (new_source) lineage = &lineage_[source];
  scratch_new_mappings_.clear();
  scratch_placements_.clear();
  scratch_placement_owners_.clear();
  scratch_requeued_.clear();
  scratch_reoffers_.clear();
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    EventError error{};
    if (map_block(*lineage, blocks[b].engine_id, canonicals[b], error)) continue;
    undo_new_mappings(source, *lineage);
    if (error != EventError::kInvalidBlockSequence && breaks_sequence(source, blocks)) {
      return EventError::kInvalidBlockSequence;
    }
    return error;
  }
  const auto outcome = place_and_reoffer();
  // A new source's lineage is made room for its declared capacity once its first event has
  // held: a source whose events are all rejected never takes that memory.
  if (new_source) {
    if (const auto expected = expected_source_blocks_.find(source); expected != expected_source_blocks_.end()) {
      lineage->reserve(std::min(expected->second, max_live_blocks_));
    }
  }
  return outcome;
}

inline bool PoolIndex::map_block(LineageTable& lineage, std::uint64_t engine_id, std::uint64_t canonical,
                                 EventError& error) {
  const auto [position, added] = lineage.find_or_add(engine_id);
  if (!added) {
    const OwnerId known = lineage.owner_at(position);
    if (owners_.canonical(known) != canonical) {
      error = EventError::kInvalidBlockSequence;
      return false;
    }
    scratch_reoffers_.push_unique(known);
    return true;
  }
  OwnerId owner = 0;
  if (!gain_mapping(canonical, owner, error)) {
    lineage.erase_at(position);
    return false;
  }
  lineage.set_owner(position, owner);
  scratch_new_mappings_.push_back({engine_id, owner});
  return true;
}

inline bool PoolIndex::gain_mapping(std::uint64_t canonical, OwnerId& owner, EventError& error) {
  if (owners_.size() < max_live_blocks_) {
    const auto found = owners_.find_or_add(canonical);
    owner = found.id;
    if (found.added) {
      scratch_placements_.push_back(canonical);
      scratch_placement_owners_.push_back(owner);
      return true;
    }
  } else if (const auto held = owners_.find(canonical)) {
    owner = *held;
  } else {
    error = EventError::kPoolFull;
    return false;
  }
  if (owners_.mappings(owner) == std::numeric_limits<std::uint32_t>::max()) {
    error = EventError::kOwnershipDegreeOverflow;
    return false;
  }
  owners_.add_mapping(owner);
  // A capacity omission gaining a mapping is placed again, once per event.
  if (!owners_.resident(owner) && scratch_requeued_.push_unique(owner)) {
    scratch_placements_.push_back(canonical);
    scratch_placement_owners_.push_back(owner);
  }
  return true;
}

void PoolIndex::undo_new_mappings(SourceKey source, LineageTable& lineage) {
  for (auto mapping = scratch_new_mappings_.rbegin(); mapping != scratch_new_mappings_.rend(); ++mapping) {
    lineage.erase_at(lineage.find(mapping->engine_id));
    // An owner held before the event keeps at least its earlier mappings: one with a single
    // mapping left was added by the event.
    if (owners_.mappings(mapping->owner) == 1) {
      owners_.erase(mapping->owner);
    } else {
      owners_.drop_mapping(mapping->owner);
    }
  }
  if (lineage.empty()) lineage_.erase(source);
}

bool PoolIndex::breaks_sequence(SourceKey source, std::span<const StoredBlockRef> blocks) const {
  const auto lineage = lineage_.find(source);
  absl::flat_hash_map<std::uint64_t, std::uint64_t> mapped_in_event;  // engine id -> canonical
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::uint64_t canonical = scratch_canonicals_[b];
    if (lineage != lineage_.end()) {
      if (const std::size_t at = lineage->second.find(blocks[b].engine_id); at != LineageTable::kNotFound) {
        if (owners_.canonical(lineage->second.owner_at(at)) != canonical) return true;
        continue;
      }
    }
    const auto [mapped, added] = mapped_in_event.try_emplace(blocks[b].engine_id, canonical);
    if (!added && mapped->second != canonical) return true;
  }
  return false;
}

std::optional<EventError> PoolIndex::place_and_reoffer() {
  std::optional<EventError> first_error;
  const auto& owners = scratch_placement_owners_;
  filter_.insert_each(scratch_placements_, filter_.max_kicks(), scratch_writes_,
                      [&](std::size_t i, ckf::InsertOutcome outcome, const std::vector<ckf::BucketWrite>& writes) {
                        if (outcome == ckf::InsertOutcome::kInserted) return placed(owners[i], writes);
                        ++capacity_failures_;
                        if (!first_error) first_error = EventError::kCapacityExhausted;
                      });
  // The only retry path for a capacity-omitted block: direct placement, silent on failure. A
  // block gaining a mapping in the same event was a placement, not a re-offer.
  bool gained_listed = false;  // listed only when a re-offer needs it: most events have none
  for (const std::uint64_t id : scratch_reoffers_.values()) {
    const auto owner = static_cast<OwnerId>(id);
    if (owners_.resident(owner)) continue;
    if (!gained_listed) {
      scratch_gained_.clear();
      for (const NewMapping& mapping : scratch_new_mappings_) scratch_gained_.push_unique(mapping.owner);
      gained_listed = true;
    }
    if (scratch_gained_.contains(owner)) continue;
    if (filter_.insert_with_kicks(owners_.canonical(owner), 0, scratch_writes_) == ckf::InsertOutcome::kInserted) {
      placed(owner, scratch_writes_);
    }
  }
  return first_error;
}

bool PoolIndex::remove_one(SourceKey source, LineageTable& lineage, std::size_t position) {
  const OwnerId id = lineage.owner_at(position);
  if (owners_.mappings(id) == 1) {
    if (owners_.resident(id)) {
      const auto write = filter_.remove(owners_.canonical(id));
      if (!write) return false;  // entry left unchanged
      window_.mark(*write);
      --resident_blocks_;
    }
    owners_.erase(id);
  } else {
    owners_.drop_mapping(id);
  }
  lineage.erase_at(position);
  if (lineage.empty()) lineage_.erase(source);
  return true;
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
    if (!remove_one(source, entries, at)) {
      first_error = EventError::kIndexerInvariantViolation;
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
    if (!remove_one(source, entries, position)) {
      return EventError::kIndexerInvariantViolation;  // as upstream: the clear stops at the first violation
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

std::vector<std::uint64_t> PoolIndex::published_words() const {
  const std::span<const std::uint64_t> current = filter_.words();
  std::vector<std::uint64_t> words(current.begin(), current.end());
  for (const ckf::BucketWrite& touch : window_.first_touches()) words[touch.bucket] = touch.before;
  return words;
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

std::size_t PoolIndex::table_rebuilds() const {
  std::size_t rebuilds = owners_.rebuilds();
  for (const auto& [source, lineage] : lineage_) rebuilds += lineage.rebuilds();
  return rebuilds;
}

}  // namespace kvrelay
