#pragma once
// The open-addressing table under a pool's lineage and owner index
// (docs/protocol/pools.md#index-layout): small fixed-size slots, one control byte per slot
// holding 7 bits of the hash, linear probing scanned 16 control bytes at a time, tombstones for
// removals. A key's home is one of the first capacity - 15 slots, so that the group read at any
// home lies inside the table and no position within a group wraps; a probe that runs to the last
// group starts again at slot 0. It is rebuilt at 7/8 used (live + tombstones) to 7/10 live, so
// it grows by 1.25x rather than doubling and keeps 1.14-1.43 slots per entry, small tables
// included (the memory budget charges every block the same). The caller owns the keys: it
// supplies each lookup's hash and a predicate, and enumerates the live entries when the table is
// rebuilt (the owner index rebuilds from its slab without reading its own slots).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/huge_pages.hpp"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace kvrelay {

// Spreads a key over the word: the fold brings its high bits down, the multiply by an odd
// constant (Fibonacci hashing) carries every low bit into the high bits a home slot is taken
// from. Engine ids and test hashes may be small consecutive integers, which it spaces evenly.
inline std::uint64_t mix_key(std::uint64_t key) { return (key ^ (key >> 32)) * 0x9E3779B97F4A7C15ULL; }

namespace probe_detail {

inline constexpr std::size_t kGroup = 16;
inline constexpr std::int8_t kEmpty = -128;
inline constexpr std::int8_t kDeleted = -2;  // full slots hold 0..127

// Sixteen consecutive control bytes; each mask has bit i for byte i.
class Group {
 public:
  explicit Group(const std::int8_t* control) {
#ifdef __SSE2__
    bytes_ = _mm_loadu_si128(reinterpret_cast<const __m128i*>(control));
#else
    for (std::size_t i = 0; i < kGroup; ++i) bytes_[i] = control[i];
#endif
  }
  std::uint32_t match(std::int8_t tag) const {
#ifdef __SSE2__
    return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes_, _mm_set1_epi8(tag))));
#else
    std::uint32_t mask = 0;
    for (std::size_t i = 0; i < kGroup; ++i) mask |= std::uint32_t{bytes_[i] == tag} << i;
    return mask;
#endif
  }
  std::uint32_t match_empty() const { return match(kEmpty); }
  // Full slots hold 0..127, every other control value is negative: the sign bits say which.
  std::uint32_t match_full() const {
#ifdef __SSE2__
    return ~static_cast<std::uint32_t>(_mm_movemask_epi8(bytes_)) & 0xFFFF;
#else
    std::uint32_t mask = 0;
    for (std::size_t i = 0; i < kGroup; ++i) mask |= std::uint32_t{bytes_[i] >= 0} << i;
    return mask;
#endif
  }
  // Empty or deleted: the only control values below -1.
  std::uint32_t match_free() const {
#ifdef __SSE2__
    return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpgt_epi8(_mm_set1_epi8(-1), bytes_)));
#else
    std::uint32_t mask = 0;
    for (std::size_t i = 0; i < kGroup; ++i) mask |= std::uint32_t{bytes_[i] < -1} << i;
    return mask;
#endif
  }

 private:
#ifdef __SSE2__
  __m128i bytes_;
#else
  std::int8_t bytes_[kGroup];
#endif
};

}  // namespace probe_detail

template <typename Slot>
class ProbeTable {
  static_assert(std::is_trivially_copyable_v<Slot>);

 public:
  static constexpr std::size_t kNotFound = ~std::size_t{0};

  ProbeTable() = default;
  ProbeTable(ProbeTable&& other) noexcept { *this = std::move(other); }
  ProbeTable& operator=(ProbeTable&& other) noexcept {
    control_ = std::move(other.control_);
    slots_ = std::move(other.slots_);
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
    deleted_ = std::exchange(other.deleted_, 0);
    rebuilds_ = std::exchange(other.rebuilds_, 0);
    return *this;
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::size_t capacity() const { return capacity_; }
  std::size_t rebuilds() const { return rebuilds_; }  // allocations of a new array, the first included
  std::size_t memory_bytes() const { return capacity_ == 0 ? 0 : capacity_ * sizeof(Slot) + control_bytes(capacity_); }

  const Slot& at(std::size_t position) const { return slots_[position]; }
  Slot& at(std::size_t position) { return slots_[position]; }

  // Requests the home group of `hash` (its control bytes and first slots) ahead of a lookup.
  void prefetch(std::uint64_t hash) const {
    if (capacity_ == 0) return;
    const std::size_t position = home(hash);
    __builtin_prefetch(control(position));
    __builtin_prefetch(slots_.get() + position);
  }

  // The position of the live slot for which matches(slot) holds, or kNotFound. `hash` is the
  // key's, as given when the slot was inserted.
  template <typename Matches>
  std::size_t find(std::uint64_t hash, Matches&& matches) const {
    if (size_ == 0) return kNotFound;
    const std::int8_t tag = tag_of(hash);
    for (std::size_t group = home(hash);; group = next_group(group)) {
      const probe_detail::Group bytes(control(group));
      for (std::uint32_t hits = bytes.match(tag); hits != 0; hits &= hits - 1) {
        const std::size_t position = group + static_cast<std::size_t>(std::countr_zero(hits));
        if (matches(slots_[position])) return position;
      }
      // Rebuilding at 7/8 used leaves an empty slot to end every probe.
      if (bytes.match_empty() != 0) return kNotFound;
    }
  }

  // The position of the live slot for which matches(slot) holds, and false; or else the slot
  // make_slot() returns takes the first free place of the key's probe sequence: its position,
  // and true. One probe serves the lookup and the insert. When the table must be rebuilt (it
  // is, before the lookup, whenever an insert would pass 7/8 used), for_each_live(emit) is
  // called and must call emit(hash, slot) for every live slot; positions held before the call
  // are then stale.
  template <typename Matches, typename MakeSlot, typename ForEachLive>
  std::pair<std::size_t, bool> find_or_insert(std::uint64_t hash, Matches&& matches, MakeSlot&& make_slot,
                                              ForEachLive&& for_each_live) {
    if ((size_ + deleted_ + 1) * 8 > capacity_ * 7) rebuild(target_capacity(size_ + 1), for_each_live);
    const std::int8_t tag = tag_of(hash);
    std::size_t free_at = kNotFound;
    for (std::size_t group = home(hash);; group = next_group(group)) {
      const probe_detail::Group bytes(control(group));
      for (std::uint32_t hits = bytes.match(tag); hits != 0; hits &= hits - 1) {
        const std::size_t position = group + static_cast<std::size_t>(std::countr_zero(hits));
        if (matches(slots_[position])) return {position, false};
      }
      if (free_at == kNotFound) {
        if (const std::uint32_t free = bytes.match_free(); free != 0) {
          free_at = group + static_cast<std::size_t>(std::countr_zero(free));
        }
      }
      // Rebuilding at 7/8 used leaves an empty slot to end every probe.
      if (bytes.match_empty() != 0) break;
    }
    if (*control(free_at) == probe_detail::kDeleted) --deleted_;
    *control(free_at) = tag;
    slots_[free_at] = make_slot();
    ++size_;
    return {free_at, true};
  }

  // Makes room for `entries` live entries without a rebuild on the way (for_each_live as for
  // find_or_insert): a table that will hold them soon grows once instead of a dozen times,
  // each entry moved once instead of about four times. Never shrinks.
  template <typename ForEachLive>
  void reserve(std::size_t entries, ForEachLive&& for_each_live) {
    if (entries == 0) return;
    const std::size_t wanted = (entries * 8 + 6) / 7;  // all of them in, at most 7/8 used
    if (wanted > capacity_) rebuild(std::max(wanted, kMinCapacity), for_each_live);
  }

  // A slot no probe has passed becomes empty again; otherwise a tombstone keeps later keys of
  // its run reachable. A probe passes a slot only through a group of 16 non-empty control
  // bytes, and such a run never becomes empty afterwards, so a run shorter than 16 around the
  // slot proves no key lies beyond it. The sentinels around the table count as empty: no
  // group reaches past either end.
  void erase_at(std::size_t position) {
    --size_;
    const std::uint32_t empty_before = probe_detail::Group(control(position) - probe_detail::kGroup).match_empty();
    const std::uint32_t empty_after = probe_detail::Group(control(position)).match_empty();
    const int run = std::countl_zero(empty_before << 16 | 0x8000) + std::countr_zero(empty_after | 0x10000);
    if (run < static_cast<int>(probe_detail::kGroup)) {
      *control(position) = probe_detail::kEmpty;
      return;
    }
    *control(position) = probe_detail::kDeleted;
    ++deleted_;
  }

  // visit(position, slot) for each live slot, in position order.
  template <typename Visit>
  void for_each(Visit&& visit) const {
    for (std::size_t group = 0; group < capacity_; group += probe_detail::kGroup) {
      for (std::uint32_t full = probe_detail::Group(control(group)).match_full(); full != 0; full &= full - 1) {
        const std::size_t position = group + static_cast<std::size_t>(std::countr_zero(full));
        visit(position, slots_[position]);
      }
    }
  }

 private:
  static constexpr std::size_t kMinCapacity = probe_detail::kGroup;

  // Seven bits from the hash's middle: the home takes its top bits, and a multiplicative hash's
  // lowest bits depend only on the key's lowest ones (the same for ids 128 apart).
  static std::int8_t tag_of(std::uint64_t hash) { return static_cast<std::int8_t>((hash >> 32) & 0x7f); }
  // Sentinels before the first slot and after the last let a group be read at any position.
  static std::size_t control_bytes(std::size_t capacity) {
    return probe_detail::kGroup + capacity + probe_detail::kGroup - 1;
  }
  const std::int8_t* control(std::size_t position) const { return control_.get() + probe_detail::kGroup + position; }
  std::int8_t* control(std::size_t position) { return control_.get() + probe_detail::kGroup + position; }
  // The last group lies flush with the table's end.
  std::size_t last_group() const { return capacity_ - probe_detail::kGroup; }
  // The table's capacity need not be a power of two: the home slot is the hash scaled into the
  // group starts.
  std::size_t home(std::uint64_t hash) const {
    return static_cast<std::size_t>((static_cast<unsigned __int128>(hash) * (last_group() + 1)) >> 64);
  }
  // The groups of a probe: on by 16, the last one flush with the end (it may overlap the one
  // before), then from slot 0, so that every probe meets every slot.
  std::size_t next_group(std::size_t group) const {
    return group == last_group() ? 0 : std::min(group + probe_detail::kGroup, last_group());
  }
  static std::size_t target_capacity(std::size_t entries) {
    const std::size_t wanted = (entries * 10 + 6) / 7;
    return wanted < kMinCapacity ? kMinCapacity : wanted;
  }

  // The first free slot of the key's probe sequence takes it, in a table being rebuilt: no
  // tombstones, no key held twice, size_ already counted.
  void place(std::uint64_t hash, const Slot& slot) {
    for (std::size_t group = home(hash);; group = next_group(group)) {
      const std::uint32_t free = probe_detail::Group(control(group)).match_free();
      if (free == 0) continue;
      const std::size_t position = group + static_cast<std::size_t>(std::countr_zero(free));
      *control(position) = tag_of(hash);
      slots_[position] = slot;
      return;
    }
  }

  // Out of line: inlined, its registers and loop made every insert's fast path pay a heavy
  // prologue (callgrind).
  template <typename ForEachLive>
  [[gnu::noinline]] void rebuild(std::size_t capacity, ForEachLive& for_each_live) {
    ProbeTable fresh;
    fresh.capacity_ = capacity;
    fresh.control_ = make_random_access_array<std::int8_t>(control_bytes(capacity));
    std::fill_n(fresh.control_.get(), control_bytes(capacity), probe_detail::kEmpty);
    fresh.slots_ = make_random_access_array<Slot>(capacity);
    fresh.size_ = size_;
    fresh.rebuilds_ = rebuilds_ + 1;
    for_each_live([&fresh](std::uint64_t hash, const Slot& slot) { fresh.place(hash, slot); });
    *this = std::move(fresh);
  }

  RandomAccessArray<std::int8_t> control_;  // control_bytes(capacity_): sentinel, slots, sentinel
  RandomAccessArray<Slot> slots_;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
  std::size_t deleted_ = 0;  // tombstones: probes pass them, inserts reuse them
  std::size_t rebuilds_ = 0;
};

}  // namespace kvrelay
