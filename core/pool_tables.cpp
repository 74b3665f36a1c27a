#include "core/pool_tables.hpp"

namespace kvrelay {

void OwnerTable::add_page() {
  // Every field is written before it is read: a page's ids are handed out in order.
  pages_.push_back(std::make_unique_for_overwrite<Page>());
  std::fill(std::begin(pages_.back()->resident), std::end(pages_.back()->resident), 0);
}

OwnerTable::Id OwnerTable::add(std::uint64_t canonical, std::uint32_t mappings) {
  const Id id = allocate();
  slot(id).canonical = canonical;
  slot(id).mappings = 0;  // not live yet: a rebuild below must not index it twice
  set_resident(id, false);
  // A rebuilt index is filled from the slab, in id order, and never reads its own slots.
  index_.insert(mix_key(canonical), id, [this](auto emit) {
    for_each([&](Id live, std::uint64_t live_canonical) { emit(mix_key(live_canonical), live); });
  });
  slot(id).mappings = mappings;
  return id;
}

void OwnerTable::erase(Id id) {
  // The index holds each id once: the id itself is the match, with no slab read.
  index_.erase_at(index_.find(mix_key(slot(id).canonical), [id](Id held) { return held == id; }));
  slot(id).mappings = 0;
  slot(id).canonical = free_head_;
  free_head_ = id;
}

void LineageTable::insert(std::uint64_t engine_id, OwnerTable::Id owner) {
  const Entry entry{static_cast<std::uint32_t>(engine_id), static_cast<std::uint32_t>(engine_id >> 32), owner};
  table_.insert(mix_key(engine_id), entry, [this](auto emit) {
    table_.for_each([&](std::size_t, const Entry& live) { emit(mix_key(live.engine_id()), live); });
  });
}

}  // namespace kvrelay
