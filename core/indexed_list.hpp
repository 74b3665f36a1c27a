#pragma once
// Distinct 64-bit values in first-seen order, for the scratch lists of one KV event. Few
// values (most events hold a handful of blocks) are searched by a scan; past kScanLimit a hash
// index takes over, so an event of the largest size the ingest limits allow costs time linear
// in its blocks, never quadratic. A 256-bit mask of the values held answers most searches for
// an absent value (the common case: an event's blocks are distinct) without either.
#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kvrelay {

class IndexedList {
 public:
  static constexpr std::size_t kScanLimit = 32;

  // The position of `value`, if held.
  std::optional<std::size_t> find(std::uint64_t value) const {
    if (!maybe_held(value)) return std::nullopt;
    if (indexed_) return find_indexed(value);
    const auto it = std::find(values_.begin(), values_.end(), value);
    return it == values_.end() ? std::nullopt : std::optional<std::size_t>(it - values_.begin());
  }
  bool contains(std::uint64_t value) const { return find(value).has_value(); }

  // Appends `value` unless it is held; whether it was appended.
  bool push_unique(std::uint64_t value) {
    if (contains(value)) return false;
    push_new(value);
    return true;
  }
  // Appends `value`, which the caller has just found not held.
  void push_new(std::uint64_t value) {
    values_.push_back(value);
    mark_held(value);
    if (indexed_ || values_.size() > kScanLimit) index_last();
  }

  void clear() {
    values_.clear();
    held_mask_ = {};
    if (indexed_) drop_index();
  }

  std::span<const std::uint64_t> values() const { return values_; }
  std::size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }

 private:
  // The mask's bit for a value: its top 8 bits once multiplied by an odd constant, so that
  // consecutive values (engine ids often are) fall on different bits.
  static unsigned mask_bit(std::uint64_t value) { return static_cast<unsigned>((value * 0x9E3779B97F4A7C15ULL) >> 56); }
  bool maybe_held(std::uint64_t value) const {
    const unsigned bit = mask_bit(value);
    return (held_mask_[bit / 64] >> (bit % 64)) & 1;
  }
  void mark_held(std::uint64_t value) {
    const unsigned bit = mask_bit(value);
    held_mask_[bit / 64] |= std::uint64_t{1} << (bit % 64);
  }
  std::optional<std::size_t> find_indexed(std::uint64_t value) const {
    const auto it = positions_.find(value);
    return it == positions_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  }
  void index_last() {
    if (indexed_) {
      positions_.emplace(values_.back(), values_.size() - 1);
    } else {
      reindex();
    }
  }
  [[gnu::cold]] void reindex() {
    positions_.clear();
    positions_.reserve(values_.size() * 2);
    for (std::size_t i = 0; i < values_.size(); ++i) positions_.emplace(values_[i], i);
    indexed_ = true;
  }
  void drop_index() {
    positions_.clear();
    indexed_ = false;
  }

  std::vector<std::uint64_t> values_;
  std::array<std::uint64_t, 4> held_mask_{};                   // mask_bit of every value held
  absl::flat_hash_map<std::uint64_t, std::size_t> positions_;  // used once indexed_
  bool indexed_ = false;
};

}  // namespace kvrelay
