#pragma once
// The producer state of one pool (docs/protocol/pools.md#lineage): per-source lineage (engine block
// id -> canonical sequence hash), owner counts so that a canonical hash holds exactly one
// fingerprint while it has owners, and the publication window of touched buckets. The tables'
// layout is docs/protocol/pools.md#index-layout.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "core/ckf.hpp"
#include "core/indexed_list.hpp"
#include "core/pool_sources.hpp"
#include "core/pool_tables.hpp"
#include "core/publication_window.hpp"

namespace kvrelay {

// A stored block as the engine reports it: its own id and Dynamo's local block hash.
struct StoredBlockRef {
  std::uint64_t engine_id;
  std::uint64_t local_hash;
};

enum class EventError {
  kParentBlockNotFound,
  kInvalidBlockSequence,
  kCapacityExhausted,
  kOwnershipDegreeOverflow,
  kIndexerInvariantViolation,
  kPoolFull,  // the event's new blocks would pass the pool's live-block limit
};
std::string_view to_string(EventError error);

struct PoolIndexConfig {
  std::uint64_t bucket_count = 0;
  std::uint64_t seed = ckf::kDefaultSeed;
  std::uint32_t max_kicks = ckf::kDefaultMaxKicks;
  // Distinct live blocks the pool holds at most: its owner ids are 28 bits, four times what
  // the largest filter can place (docs/protocol/pools.md#lineage). Lower only in tests.
  std::uint64_t max_live_blocks = OwnerTable::kMaxOwners;
  // What the pool is expected to hold: its declared KV capacity, or nothing when unknown.
  ExpectedBlocks expected = {};
};

class PoolIndex {
 public:
  explicit PoolIndex(const PoolIndexConfig& config);

  // Applied whole or not at all: a lineage error leaves the index as it was, its owner ids included.
  std::optional<EventError> store(SourceKey source, std::optional<std::uint64_t> parent_engine_id,
                                  std::optional<std::uint32_t> start_position, std::span<const StoredBlockRef> blocks);
  // Each engine id independently; unknown ids are counted, never deleted by fingerprint.
  std::optional<EventError> remove(SourceKey source, std::span<const std::uint64_t> engine_ids);
  // Drops every block of one source (a Cleared event, or a cold reset of the source).
  std::optional<EventError> clear(SourceKey source);
  // Rebuilds the filter with `bucket_count` buckets and places every live block again,
  // resident or omitted, keeping lineage and owner counts (docs/protocol/capacity.md#relayout).
  // The publication window starts empty: the new layout is published as a snapshot.
  // Returns how many live blocks the new layout could not place.
  std::uint64_t relayout(std::uint64_t bucket_count);

  // The net-changed bucket images since the last drain, in first-touch order.
  std::vector<BucketImage> drain_publication() { return window_.drain(filter_.words()); }
  bool publication_pending() const { return !window_.empty(); }
  std::size_t touched_buckets() const { return window_.touched(); }
  // XXH3-64 (seed 0) of the bucket words as of the last drain: what a replica that applied
  // every publication holds, whatever has changed since. Reads the whole lane.
  std::uint64_t published_digest() const;
  // A copy of the bucket words as of the last drain: a snapshot at the published sequence,
  // taken without publishing what is pending.
  std::vector<std::uint64_t> published_words() const;

  const ckf::Filter& filter() const { return filter_; }
  std::uint64_t unique_blocks() const { return owners_.size(); }
  // Live blocks without their fingerprint in the filter: capacity omissions still in force.
  std::uint64_t omitted_blocks() const { return owners_.size() - resident_blocks_; }
  std::uint64_t capacity_failures() const { return capacity_failures_; }
  std::uint64_t unknown_removals() const { return unknown_removals_; }
  std::size_t lineage_entries(SourceKey source) const;
  std::uint32_t owner_count(std::uint64_t canonical) const;
  bool is_resident(std::uint64_t canonical) const;
  // Bytes held by the owner and lineage tables (not the filter, not the scratch lists).
  std::size_t table_bytes() const;
  // Bytes held by the publication window: its bitmap and its list of touched buckets.
  std::size_t publication_bytes() const { return window_.memory_bytes(); }
  // Arrays the owner index and the live sources' lineages have been given so far, each
  // table's first included: how often the tables grew.
  std::size_t table_rebuilds() const;

  // Test hook: removes a resident block's fingerprint from the filter behind the index's
  // back, so that removing the block later finds the index inconsistent.
  void evict_fingerprint_for_test(std::uint64_t canonical) { filter_.remove(canonical); }

 private:
  using OwnerId = OwnerTable::Id;

  // An event's new mapping, kept until the event is applied so that a rejection can undo it.
  struct NewMapping {
    std::uint64_t engine_id;
    OwnerId owner;
  };

  // The owner `id` took its slot with these writes.
  void placed(OwnerId id, std::span<const ckf::BucketWrite> writes);
  // Drops the lineage entry at `position` of `lineage` (the source's) and its owner's mapping;
  // false on an index invariant violation, which leaves both in place. (A bool, as map_block's.)
  bool remove_one(SourceKey source, LineageTable& lineage, std::size_t position);
  // One block of a stored event against the source's lineage: a re-offer or a new mapping (and
  // its owner's count), and true; or false, with the error that rejects the event in `error`.
  // Per block, these two are inlined into the store loop and return a bool: an optional error
  // came back through the stack, and reading it waited on every pending table write (a failed
  // store forwarding, a sixth of a fill's time: docs/benchmarks.md#instructions-per-store).
  [[gnu::always_inline]] bool map_block(LineageTable& lineage, std::uint64_t engine_id, std::uint64_t canonical,
                                        EventError& error);
  // A new mapping to `canonical`: true, with its owner (found or added) in `owner`; or false,
  // with a limit's error in `error`.
  [[gnu::always_inline]] bool gain_mapping(std::uint64_t canonical, OwnerId& owner, EventError& error);
  // Undoes the event's new mappings, newest first, so that freed owner ids are reused in the
  // order they would have been; drops the source's lineage if that leaves it empty.
  void undo_new_mappings(SourceKey source, LineageTable& lineage);
  // Whether an event stopped by a limit also maps an engine id to two canonical hashes, the
  // error reported first (docs/protocol/pools.md#lineage).
  bool breaks_sequence(SourceKey source, std::span<const StoredBlockRef> blocks) const;
  // The applied event's placements, then its re-offers.
  std::optional<EventError> place_and_reoffer();

  ckf::Filter filter_;
  PublicationWindow window_;
  // Reused by every event, so applying one allocates nothing in the steady state.
  std::vector<ckf::BucketWrite> scratch_writes_;
  std::vector<std::uint64_t> scratch_canonicals_;  // the event's canonical hashes, in block order
  std::vector<NewMapping> scratch_new_mappings_;   // in block order
  std::vector<std::uint64_t> scratch_placements_;  // canonical hashes gaining a mapping, not resident,
  std::vector<OwnerId> scratch_placement_owners_;  // and their owners
  IndexedList scratch_requeued_;                   // owners held before the event among them
  IndexedList scratch_reoffers_;                   // owners of re-stored blocks
  IndexedList scratch_gained_;                     // owners gaining a mapping, when re-offers need them
  std::vector<OwnerId> scratch_removed_owners_;    // a removal's known owners, in its order
  absl::flat_hash_map<SourceKey, LineageTable> lineage_;
  OwnerTable owners_;
  std::uint64_t max_live_blocks_;
  std::map<SourceKey, std::uint64_t> expected_source_blocks_;  // each time a source's lineage is made
  std::uint64_t resident_blocks_ = 0;                          // owners with their resident bit set
  std::uint64_t capacity_failures_ = 0;
  std::uint64_t unknown_removals_ = 0;
};

}  // namespace kvrelay
