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

namespace {

void append_unique(std::vector<std::uint64_t>& list, std::uint64_t value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

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
  auto& new_mappings = scratch_new_mappings_;
  auto& candidates = scratch_candidates_;
  auto& reoffers = scratch_reoffers_;
  new_mappings.clear();
  candidates.clear();
  reoffers.clear();
  for (const StoredBlockRef& block : blocks) {
    const std::uint64_t canonical =
        previous ? hashing::next_sequence_hash(*previous, block.local_hash) : block.local_hash;
    previous = canonical;
    std::optional<std::uint64_t> known = mapped(block.engine_id);
    if (!known) {
      for (const auto& [engine_id, mapped_canonical] : new_mappings) {
        if (engine_id == block.engine_id) known = mapped_canonical;
      }
    }
    if (known && *known != canonical) return EventError::kInvalidBlockSequence;
    if (known) {
      append_unique(reoffers, canonical);
    } else {
      new_mappings.emplace_back(block.engine_id, canonical);
      append_unique(candidates, canonical);
    }
  }
  std::erase_if(reoffers, [&](std::uint64_t c) {
    return std::find(candidates.begin(), candidates.end(), c) != candidates.end();
  });
  for (const auto& [engine_id, canonical] : new_mappings) {
    const auto it = owners_.find(canonical);
    const std::uint64_t existing = it == owners_.end() ? 0 : it->second.mappings;
    if (existing + new_mappings.size() <= std::numeric_limits<std::uint32_t>::max()) continue;
    const auto added =
        std::count_if(new_mappings.begin(), new_mappings.end(), [&](const auto& m) { return m.second == canonical; });
    if (existing + static_cast<std::uint64_t>(added) > std::numeric_limits<std::uint32_t>::max()) {
      return EventError::kOwnershipDegreeOverflow;
    }
  }

  // Commit lineage and owner counts, then admit.
  if (!new_mappings.empty()) {
    Lineage& target = lineage_[source];
    for (const auto& [engine_id, canonical] : new_mappings) {
      target.emplace(engine_id, canonical);
      ++owners_[canonical].mappings;
    }
  }
  std::optional<EventError> first_error;
  std::erase_if(candidates, [&](std::uint64_t canonical) { return owners_[canonical].resident; });
  filter_.insert_each(candidates, filter_.max_kicks(), scratch_writes_,
                      [&](std::size_t i, ckf::InsertOutcome outcome, const std::vector<ckf::BucketWrite>& writes) {
                        if (outcome == ckf::InsertOutcome::kInserted) return placed(candidates[i], writes);
                        ++capacity_failures_;
                        if (!first_error) first_error = EventError::kCapacityExhausted;
                      });
  // The only retry path for a capacity-omitted block: direct placement, silent on failure.
  for (std::uint64_t canonical : reoffers) {
    if (owners_[canonical].resident) continue;
    if (filter_.insert_with_kicks(canonical, 0, scratch_writes_) == ckf::InsertOutcome::kInserted) {
      placed(canonical, scratch_writes_);
    }
  }
  return first_error;
}

std::optional<EventError> PoolIndex::remove_one(SourceKey source, Lineage& lineage, std::uint64_t engine_id) {
  const auto entry = lineage.find(engine_id);
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
  std::optional<EventError> first_error;
  for (std::uint64_t engine_id : engine_ids) {
    const auto lineage = lineage_.find(source);
    if (lineage == lineage_.end() || !lineage->second.contains(engine_id)) {
      ++unknown_removals_;
      continue;
    }
    const auto error = remove_one(source, lineage->second, engine_id);
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
    if (const auto error = remove_one(source, entries, engine_id)) {
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
