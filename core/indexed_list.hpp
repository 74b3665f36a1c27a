#pragma once
// Distinct 64-bit values in first-seen order, for the scratch lists of one KV event. Few
// values (most events hold a handful of blocks) are searched by a scan; past kScanLimit a hash
// index takes over, so an event of the largest size the ingest limits allow costs time linear
// in its blocks, never quadratic.
#include <absl/container/flat_hash_map.h>

#include <algorithm>
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
    if (indexed()) {
      const auto it = positions_.find(value);
      return it == positions_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
    }
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
    if (indexed()) {
      positions_.emplace(value, values_.size() - 1);
    } else if (values_.size() > kScanLimit) {
      reindex();
    }
  }

  template <class Predicate>
  void erase_if(Predicate predicate) {
    std::erase_if(values_, predicate);
    if (indexed_) drop_index();
    if (values_.size() > kScanLimit) reindex();
  }

  void clear() {
    values_.clear();
    if (indexed_) drop_index();
  }

  std::span<const std::uint64_t> values() const { return values_; }
  std::size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }

 private:
  bool indexed() const { return indexed_; }
  void reindex() {
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
  absl::flat_hash_map<std::uint64_t, std::size_t> positions_;  // used once indexed_
  bool indexed_ = false;
};

}  // namespace kvrelay
