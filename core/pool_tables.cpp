#include "core/pool_tables.hpp"

namespace kvrelay {

void OwnerTable::add_page() {
  // Every field is written before it is read: a page's ids are handed out in order.
  pages_.push_back(std::make_unique_for_overwrite<Page>());
}

auto OwnerTable::index_entries() const {
  return [this](auto emit) {
    for_each([&](Id live, std::uint64_t live_canonical) {
      const std::uint64_t live_hash = mix_key(live_canonical);
      emit(live_hash, entry_of(live, live_hash));
    });
  };
}

OwnerTable::Found OwnerTable::find_or_add(std::uint64_t canonical) {
  const std::uint64_t hash = mix_key(canonical);
  Id added = kNoId;
  const auto [position, inserted] = index_.find_or_insert(
      hash, [&](IndexEntry entry) { return holds(entry, hash, canonical); },
      [&] {
        added = allocate();
        canonical_of(added) = canonical;
        state_of(added) = 1;  // one mapping, not resident
        return entry_of(added, hash);
      },
      index_entries());
  return {inserted ? added : id_of(index_.at(position)), inserted};
}

void OwnerTable::reserve(std::size_t owners) {
  index_.reserve(owners, index_entries());
  pages_.reserve((owners + kPageSize - 1) / kPageSize);
}

void OwnerTable::drop_mapping(Id id) {
  std::uint16_t& state = state_of(id);
  if ((state & kCountMask) != kManyMappings) {
    --state;
    return;
  }
  const auto many = many_mappings_.find(id);
  if (--many->second < kManyMappings) {
    state = static_cast<std::uint16_t>((state & kResidentBit) | many->second);
    many_mappings_.erase(many);
  }
}

void OwnerTable::erase(Id id) {
  // The index holds each id once: the id itself is the match, with no slab read.
  index_.erase_at(index_.find(mix_key(canonical_of(id)), [id](IndexEntry held) { return id_of(held) == id; }));
  state_of(id) = 0;
  canonical_of(id) = free_head_;
  free_head_ = id;
}

auto LineageTable::entries() const {
  return [this](auto emit) {
    table_.for_each([&](std::size_t, const Entry& live) { emit(mix_key(live.engine_id()), live); });
  };
}

std::pair<std::size_t, bool> LineageTable::find_or_add(std::uint64_t engine_id) {
  return table_.find_or_insert(
      mix_key(engine_id), [&](const Entry& entry) { return entry.engine_id() == engine_id; },
      [&] {
        return Entry{static_cast<std::uint32_t>(engine_id), static_cast<std::uint32_t>(engine_id >> 32),
                     OwnerTable::Id{0}};
      },
      entries());
}

void LineageTable::reserve(std::size_t count) { table_.reserve(count, entries()); }

}  // namespace kvrelay
