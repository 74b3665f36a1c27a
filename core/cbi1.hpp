#pragma once
// CBI1 ("Cuckoo Bucket Images v1"), the payload of every FilterUpdate
// (docs/protocol/cbi1-ckf.md#cbi1): a 48-byte little-endian header, then a snapshot chunk of bucket
// words or a delta of absolute bucket images, covered by an XXH3 body checksum.
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/bucket_image.hpp"
#include "core/huge_pages.hpp"

namespace kvrelay::cbi1 {

inline constexpr std::uint16_t kWireVersion = 1;
inline constexpr std::size_t kHeaderBytes = 48;
inline constexpr std::size_t kChunkHeaderBytes = 16;
inline constexpr std::size_t kDeltaHeaderBytes = 12;
inline constexpr std::size_t kImageBytes = 12;
inline constexpr std::uint64_t kChunkBuckets = 512 * 1024;
inline constexpr std::size_t kMaxFrameBytes = kHeaderBytes + kChunkHeaderBytes + kChunkBuckets * 8;
inline constexpr std::size_t kMaxDeltaImages = (kMaxFrameBytes - kHeaderBytes - kDeltaHeaderBytes) / kImageBytes;
static_assert(kMaxFrameBytes == 4'194'368 && kMaxDeltaImages == 349'525);

enum class Flags : std::uint16_t { kSnapshotChunk = 1, kDelta = 2 };

enum class ErrorKind {
  kTruncated,
  kFrameTooLarge,
  kMagic,
  kWireVersion,
  kChecksum,
  kFormatVersion,
  kFormatFingerprintBits,
  kFormatSlotsPerBucket,
  kFormatMismatch,
  kFormatBucketCount,
  kFlags,
  kMalformed,
  kDeltaImageCount,
  kSnapshotChunkWordCount,
  kBucketIndex,
  kSnapshotBucketCount,
  kChunkSequence,
  kIncompleteCoverage,
};
// The upstream variant name, e.g. "Format.Mismatch".
std::string_view to_string(ErrorKind kind);

struct Error {
  ErrorKind kind;
  std::string detail;
};

template <typename T>
using Result = std::expected<T, Error>;

// The filter a frame belongs to; bucket_count is a power of two in [2, 2^24].
struct FilterFormat {
  std::uint64_t seed = 0;
  std::uint64_t bucket_count = 0;
  static Result<FilterFormat> make(std::uint64_t seed, std::uint64_t bucket_count);
  friend bool operator==(const FilterFormat&, const FilterFormat&) = default;
};

// The size of a delta frame of `images` bucket images: every delta is laid out the same way.
inline std::size_t delta_frame_bytes(std::size_t images) {
  return kHeaderBytes + kDeltaHeaderBytes + kImageBytes * images;
}

inline std::uint64_t chunk_count_for(std::uint64_t bucket_count) {
  return (bucket_count + kChunkBuckets - 1) / kChunkBuckets;
}

// ---- encoding (frames are std::string so they drop straight into protobuf bytes) ----

Result<std::string> encode_delta(const FilterFormat& format, std::uint64_t dc_id, std::uint64_t base_sequence,
                                 std::uint64_t sequence, std::span<const BucketImage> images);

// Chunk `chunk_index` of a snapshot of `words` (the whole lane) at `sequence`.
Result<std::string> encode_snapshot_chunk(const FilterFormat& format, std::uint64_t dc_id, std::uint64_t sequence,
                                          std::uint32_t chunk_index, std::span<const std::uint64_t> words);

Result<std::vector<std::string>> encode_snapshot(const FilterFormat& format, std::uint64_t dc_id,
                                                 std::uint64_t sequence, std::span<const std::uint64_t> words);

// ---- decoding ----

struct Header {
  std::uint16_t wire_version = 0;
  std::uint16_t flags = 0;
  std::uint8_t fingerprint_bits = 0;
  std::uint8_t slots_per_bucket = 0;
  std::uint16_t format_version = 0;
  std::uint64_t seed = 0;
  std::uint64_t bucket_count = 0;
  std::uint64_t dc_id = 0;
  std::uint64_t epoch = 0;
  std::uint32_t body_checksum = 0;
};

struct DecodedChunk {
  Header header;
  std::uint32_t chunk_index = 0;
  std::uint32_t chunk_count = 0;
  std::uint64_t bucket_offset = 0;
  std::vector<std::uint64_t> words;
};

struct DecodedDelta {
  Header header;
  std::uint64_t base_epoch = 0;
  std::vector<BucketImage> images;  // wire order
};

using Decoded = std::variant<DecodedChunk, DecodedDelta>;

// Validates in the upstream order; no input, however malformed, is read out of bounds.
Result<Decoded> decode(std::span<const std::uint8_t> frame, const FilterFormat& expected);
inline Result<Decoded> decode(std::string_view frame, const FilterFormat& expected) {
  return decode(std::span{reinterpret_cast<const std::uint8_t*>(frame.data()), frame.size()}, expected);
}

// A captured frame on its own (debugging tools): validated against the format its header names.
Result<Decoded> decode_standalone(std::span<const std::uint8_t> frame);

// ---- snapshot assembly ----

// The whole lane. Upstream hands over the non-zero bucket images for the consumer to write
// onto a zeroed lane; the dense words are the same state without that round trip.
struct AssembledSnapshot {
  std::uint64_t epoch = 0;
  RandomAccessWords words;  // bucket_count words
};

// Collects the chunks of one snapshot in order; a stray chunk 0 restarts assembly.
class SnapshotAssembly {
 public:
  explicit SnapshotAssembly(std::uint64_t bucket_count) : bucket_count_(bucket_count) {}

  // nullopt while incomplete; the snapshot once the last chunk covered every bucket.
  Result<std::optional<AssembledSnapshot>> absorb(const Decoded& frame);

 private:
  void reset();

  std::uint64_t bucket_count_;
  std::uint64_t epoch_ = 0;
  std::uint32_t chunk_count_ = 0;
  std::uint32_t next_chunk_ = 0;
  std::uint64_t next_bucket_ = 0;
  RandomAccessWords words_;
};

}  // namespace kvrelay::cbi1
