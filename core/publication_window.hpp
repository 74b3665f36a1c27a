#pragma once
// Buckets touched since the last publication, each with its word at first touch, so that a
// publication carries only net changes: a bucket written back to its old value is dropped.
#include <algorithm>
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
    for (const ckf::BucketWrite& touch : first_touch_) {
      touched_bits_[touch.bucket / 64] = 0;
      if (words[touch.bucket] != touch.before) images.push_back({touch.bucket, words[touch.bucket]});
    }
    keep_room_for(first_touch_.size());
    return images;
  }
  // Bytes the list of first touches holds, filled or not.
  std::size_t list_bytes() const { return first_touch_.capacity() * sizeof(ckf::BucketWrite); }

 private:
  // What the list keeps between publications whatever their size: small windows never reallocate.
  static constexpr std::size_t kKeptTouches = 1024;

  // Empties the list, keeping room for a window like the one just drained rather than for the
  // largest there has been: a burst's window (up to half a CBI1 frame of buckets, 4 MiB of list)
  // is given back at the next ordinary publication instead of held by the pool for good.
  void keep_room_for(std::size_t drained) {
    if (first_touch_.capacity() <= 2 * drained + kKeptTouches) {
      first_touch_.clear();
      return;
    }
    std::vector<ckf::BucketWrite> room;
    room.reserve(std::max(drained, kKeptTouches));
    first_touch_.swap(room);
  }

  std::vector<std::uint64_t> touched_bits_;
  std::vector<ckf::BucketWrite> first_touch_;
};

}  // namespace kvrelay
