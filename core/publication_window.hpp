#pragma once
// Buckets touched since the last publication, each with its word at first touch, so that a
// publication carries only net changes: a bucket written back to its old value is dropped.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "core/bucket_image.hpp"
#include "core/ckf.hpp"

namespace kvrelay {

class PublicationWindow {
 public:
  explicit PublicationWindow(std::uint64_t bucket_count) : touched_bits_((bucket_count + 63) / 64, 0) {}

  void mark(std::span<const ckf::BucketWrite> writes) {
    for (const ckf::BucketWrite& write : writes) mark(write);
  }
  void mark(const ckf::BucketWrite& write) {
    std::uint64_t& bits = touched_bits_[write.bucket / 64];
    const std::uint64_t bit = std::uint64_t{1} << (write.bucket % 64);
    if ((bits & bit) != 0) return;
    bits |= bit;
    first_touch_.push_back(write);
  }

  bool empty() const { return first_touch_.empty(); }
  // Buckets touched since the last drain: an upper bound on the next publication's images.
  std::size_t touched() const { return first_touch_.size(); }
  // Each touched bucket with its word at first touch, i.e. as last published.
  std::span<const ckf::BucketWrite> first_touches() const { return first_touch_; }

  std::vector<BucketImage> drain(std::span<const std::uint64_t> words) {
    std::vector<BucketImage> images;
    images.reserve(
        first_touch_.size());  // one allocation, where growing copied a large window's images again and again
    for (const ckf::BucketWrite& touch : first_touch_) {
      touched_bits_[touch.bucket / 64] = 0;
      if (words[touch.bucket] != touch.before) images.push_back({touch.bucket, words[touch.bucket]});
    }
    empty_list(first_touch_.size());
    return images;
  }
  // Bytes the list of first touches holds, filled or not.
  std::size_t list_bytes() const { return first_touch_.capacity() * sizeof(ckf::BucketWrite); }
  // Bytes the window holds: its bitmap of touched buckets and its list.
  std::size_t memory_bytes() const { return touched_bits_.capacity() * sizeof(std::uint64_t) + list_bytes(); }
  // The list's storage: the same while the list keeps its room.
  const void* list_storage() const { return first_touch_.data(); }

  // Windows drained between two looks at the list's room.
  static constexpr unsigned kRoomReviewWindows = 16;
  // The least room the list keeps (16 KiB): small windows never reallocate.
  static constexpr std::size_t kKeptTouches = 1024;

 private:
  // Empties the list. Every kRoomReviewWindows windows, a list with more than twice the room the
  // largest of them needed (in powers of two, as it grows) gives the rest back: a burst's list,
  // which holds one entry per bucket touched (up to `16 · bucket_count` bytes), is not kept by
  // the pool for good, and alternating large and small windows, as a busy pool's early and timed
  // publications are, never reallocate.
  void empty_list(std::size_t drained) {
    first_touch_.clear();
    recent_largest_ = std::max(recent_largest_, drained);
    if (++windows_since_review_ < kRoomReviewWindows) return;
    const std::size_t room = std::bit_ceil(std::max(recent_largest_, kKeptTouches));
    if (first_touch_.capacity() > 2 * room) {
      std::vector<ckf::BucketWrite>().swap(first_touch_);
      first_touch_.reserve(room);
    }
    recent_largest_ = 0;
    windows_since_review_ = 0;
  }

  std::vector<std::uint64_t> touched_bits_;
  std::vector<ckf::BucketWrite> first_touch_;
  std::size_t recent_largest_ = 0;  // the largest window drained since the last review
  unsigned windows_since_review_ = 0;
};

}  // namespace kvrelay
