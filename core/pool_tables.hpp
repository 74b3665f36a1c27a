#pragma once
// The two tables of a pool index (docs/protocol/pools.md#index-layout). Owners live in a slab
// at stable 28-bit ids {canonical hash, mapping count, resident bit}, found by canonical hash
// through an index of ids, each beside 4 more bits of its hash; each source's lineage maps an
// engine block id to its owner's id.
// 31-36 bytes per live block in all, where two Swiss maps of 64-bit pairs took 39-78.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "core/probe_table.hpp"

namespace kvrelay {

class OwnerTable {
 public:
  using Id = std::uint32_t;
  // An index slot holds an id in 28 bits and 4 more bits of the hash: with the control byte's
  // 7, a lookup reads the slab (a cache miss of its own) for 1 stranger in 2 048, not 1 in 128.
  // 2^28 live blocks are 4 times what the largest filter (2^24 buckets of 4) can hold.
  static constexpr unsigned kIdBits = 28;
  static constexpr std::uint64_t kMaxOwners = std::uint64_t{1} << kIdBits;

  std::size_t size() const { return index_.size(); }
  std::size_t memory_bytes() const {
    return pages_.size() * sizeof(Page) + index_.memory_bytes() +
           many_mappings_.capacity() * (sizeof(decltype(many_mappings_)::slot_type) + 1);
  }
  std::size_t rebuilds() const { return index_.rebuilds(); }

  std::optional<Id> find(std::uint64_t canonical) const {
    const std::uint64_t hash = mix_key(canonical);
    const std::size_t position = index_.find(hash, [&](IndexEntry entry) { return holds(entry, hash, canonical); });
    if (position == Index::kNotFound) return std::nullopt;
    return id_of(index_.at(position));
  }
  void prefetch(std::uint64_t canonical) const { index_.prefetch(mix_key(canonical)); }
  void prefetch_owner(Id id) const {
    const Page& page = *pages_[id >> kPageBits];
    __builtin_prefetch(&page.canonical[id & kPageMask]);
    __builtin_prefetch(&page.state[id & kPageMask]);
  }

  // The owner of `canonical`, and false; or else a new one (fewer than kMaxOwners held) with
  // one mapping, not resident, and true.
  struct Found {
    Id id;
    bool added;
  };
  Found find_or_add(std::uint64_t canonical);
  // Frees the id with its owner's last mapping.
  void erase(Id id);
  // Room for `owners` owners without growing the index on the way (ProbeTable::reserve).
  void reserve(std::size_t owners);

  std::uint64_t canonical(Id id) const { return canonical_of(id); }
  std::uint32_t mappings(Id id) const {
    const std::uint16_t count = state_of(id) & kCountMask;
    return count == kManyMappings ? many_mappings_.at(id) : count;
  }
  // One more mapping; the caller checks that the count stays below 2^32.
  void add_mapping(Id id) {
    std::uint16_t& state = state_of(id);
    const std::uint16_t count = state & kCountMask;
    if (count == kManyMappings) {
      ++many_mappings_[id];
    } else if (count + 1 == kManyMappings) {
      state |= kManyMappings;
      many_mappings_[id] = kManyMappings;
    } else {
      ++state;
    }
  }
  // One fewer; the owner keeps at least one (a last mapping goes with erase).
  void drop_mapping(Id id);
  bool resident(Id id) const { return (state_of(id) & kResidentBit) != 0; }
  void set_resident(Id id, bool resident) {
    std::uint16_t& state = state_of(id);
    state = resident ? state | kResidentBit : state & ~kResidentBit;
  }

  // visit(id, canonical hash) for every owner, in id order (the slab's, page by page).
  template <typename Visit>
  void for_each(Visit&& visit) const {
    for (Id first = 0; first < next_unused_; first += kPageSize) {
      const Page& page = *pages_[first >> kPageBits];
      const Id count = std::min(kPageSize, next_unused_ - first);
      for (Id i = 0; i < count; ++i) {
        if ((page.state[i] & kCountMask) != 0) visit(first + i, page.canonical[i]);
      }
    }
  }

 private:
  // Small pages, so that a pool of a few blocks holds little more than their share.
  static constexpr unsigned kPageBits = 6;
  static constexpr Id kPageSize = Id{1} << kPageBits;
  static constexpr Id kPageMask = kPageSize - 1;
  static constexpr Id kNoId = 0xFFFF'FFFF;  // ends the free list: no id reaches it (ids are below kMaxOwners)
  // An owner's state: its resident bit above a 15-bit mapping count. A count of kManyMappings
  // or more (2^15 - 1 sources, or engine ids, mapping one block) is held in many_mappings_
  // instead. So an id takes 10 bytes, and a page of 64 fills one of tcmalloc's size classes
  // (640 bytes) exactly, where 12-byte entries and a resident word (776 bytes) were rounded
  // up to 896.
  static constexpr std::uint16_t kResidentBit = 0x8000;
  static constexpr std::uint16_t kCountMask = 0x7FFF;
  static constexpr std::uint16_t kManyMappings = kCountMask;
  // A free id has no mappings and holds the next free id in place of its canonical hash.
  struct Page {
    std::uint64_t canonical[kPageSize];
    std::uint16_t state[kPageSize];
  };
  static_assert(sizeof(Page) == 640);
  // An owner index slot: the id in the low kIdBits, hash bits 28..31 above it (the control
  // byte holds bits 32..38, the home the top bits). A type of its own, so that an entry is
  // never taken for an id.
  struct IndexEntry {
    std::uint32_t bits;
  };
  using Index = ProbeTable<IndexEntry>;
  static constexpr std::uint32_t kIdMask = (std::uint32_t{1} << kIdBits) - 1;
  static std::uint32_t check_bits(std::uint64_t hash) { return static_cast<std::uint32_t>(hash) & ~kIdMask; }
  static IndexEntry entry_of(Id id, std::uint64_t hash) { return {id | check_bits(hash)}; }
  static Id id_of(IndexEntry entry) { return entry.bits & kIdMask; }
  bool holds(IndexEntry entry, std::uint64_t hash, std::uint64_t canonical) const {
    return (entry.bits & ~kIdMask) == check_bits(hash) && canonical_of(id_of(entry)) == canonical;
  }

  Page& page(Id id) { return *pages_[id >> kPageBits]; }
  const Page& page(Id id) const { return *pages_[id >> kPageBits]; }
  std::uint64_t& canonical_of(Id id) { return page(id).canonical[id & kPageMask]; }
  std::uint64_t canonical_of(Id id) const { return page(id).canonical[id & kPageMask]; }
  std::uint16_t& state_of(Id id) { return page(id).state[id & kPageMask]; }
  std::uint16_t state_of(Id id) const { return page(id).state[id & kPageMask]; }
  Id allocate() {
    if (free_head_ != kNoId) {
      const Id id = free_head_;
      free_head_ = static_cast<Id>(canonical_of(id));
      return id;
    }
    if ((next_unused_ >> kPageBits) == pages_.size()) add_page();
    return next_unused_++;
  }
  void add_page();
  // What a rebuilt index is filled with: every owner's entry, from the slab in id order (the
  // index never reads its own slots).
  auto index_entries() const;

  std::vector<std::unique_ptr<Page>> pages_;
  Id next_unused_ = 0;  // ids at and past it were never handed out
  Id free_head_ = kNoId;
  Index index_;
  absl::flat_hash_map<Id, std::uint32_t> many_mappings_;  // counts of kManyMappings and more
};

// One source's lineage: engine block id -> owner id, 12-byte slots.
class LineageTable {
 public:
  static constexpr std::size_t kNotFound = ProbeTable<int>::kNotFound;

  std::size_t size() const { return table_.size(); }
  bool empty() const { return table_.empty(); }
  std::size_t memory_bytes() const { return table_.memory_bytes(); }
  std::size_t rebuilds() const { return table_.rebuilds(); }

  // A position stays valid until the next insert.
  std::size_t find(std::uint64_t engine_id) const {
    return table_.find(mix_key(engine_id), [&](const Entry& entry) { return entry.engine_id() == engine_id; });
  }
  OwnerTable::Id owner_at(std::size_t position) const { return table_.at(position).owner; }
  void prefetch(std::uint64_t engine_id) const { table_.prefetch(mix_key(engine_id)); }

  // The position of `engine_id`'s entry, and false; or else of a new entry for it, and true: a
  // new entry has no owner until set_owner, which must come before the next call.
  std::pair<std::size_t, bool> find_or_add(std::uint64_t engine_id);
  void set_owner(std::size_t position, OwnerTable::Id owner) { table_.at(position).owner = owner; }
  void erase_at(std::size_t position) { table_.erase_at(position); }
  // Room for `entries` entries without growing on the way (ProbeTable::reserve).
  void reserve(std::size_t count);

  // visit(position, owner id) for every entry.
  template <typename Visit>
  void for_each(Visit&& visit) const {
    table_.for_each([&](std::size_t position, const Entry& entry) { visit(position, entry.owner); });
  }

 private:
  // The engine id in two halves keeps the slot at 12 bytes, 4-aligned.
  struct Entry {
    std::uint32_t id_low;
    std::uint32_t id_high;
    OwnerTable::Id owner;
    std::uint64_t engine_id() const { return std::uint64_t{id_high} << 32 | id_low; }
  };
  static_assert(sizeof(Entry) == 12);
  // What a rebuilt table is filled with: its own entries, in position order.
  auto entries() const;

  ProbeTable<Entry> table_;
};

}  // namespace kvrelay
