#pragma once
// One bucket's word as a publication or a replica sees it (docs/protocol/cbi1-ckf.md#cbi1).
#include <cstdint>

namespace kvrelay {

// An absolute bucket image: "bucket now holds word". A bucket emptied by removals is an image of 0.
struct BucketImage {
  std::uint64_t bucket;
  std::uint64_t word;
  friend bool operator==(const BucketImage&, const BucketImage&) = default;
};

}  // namespace kvrelay
