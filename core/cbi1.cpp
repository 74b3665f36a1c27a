#include "core/cbi1.hpp"

#include <fmt/format.h>
#include <bit>
#include <cstring>

#include "core/ckf.hpp"
#include "core/xxh3.hpp"

namespace kvrelay::cbi1 {

namespace {

constexpr std::uint8_t kMagic[4] = {'C', 'B', 'I', '1'};

std::unexpected<Error> fail(ErrorKind kind, std::string detail = {}) {
  return std::unexpected(Error{kind, std::move(detail)});
}

std::uint8_t* bytes_of(std::string& frame) { return reinterpret_cast<std::uint8_t*>(frame.data()); }

// Allocates a frame of `size` bytes (contents unspecified) and writes the header with a zero
// checksum; seal() patches the checksum once the body is written.
std::string begin_frame(std::size_t size, Flags flags, const FilterFormat& format, std::uint64_t dc_id,
                        std::uint64_t epoch) {
  std::string frame;
  frame.resize_and_overwrite(size, [size](char*, std::size_t) { return size; });
  std::uint8_t* out = bytes_of(frame);
  std::memcpy(out, kMagic, 4);
  store_le16(out + 4, kWireVersion);
  store_le16(out + 6, static_cast<std::uint16_t>(flags));
  out[8] = ckf::kFingerprintBits;
  out[9] = ckf::kSlotsPerBucket;
  store_le16(out + 10, ckf::kFormatVersion);
  store_le64(out + 12, format.seed);
  store_le64(out + 20, format.bucket_count);
  store_le64(out + 28, dc_id);
  store_le64(out + 36, epoch);
  store_le32(out + 44, 0);
  return frame;
}

void seal(std::string& frame) {
  std::uint8_t* out = bytes_of(frame);
  const std::uint64_t digest = xxh3(out + kHeaderBytes, frame.size() - kHeaderBytes, 0);
  store_le32(out + 44, static_cast<std::uint32_t>(digest));
}

Header parse_header(const std::uint8_t* in) {
  Header h;
  h.wire_version = load_le16(in + 4);
  h.flags = load_le16(in + 6);
  h.fingerprint_bits = in[8];
  h.slots_per_bucket = in[9];
  h.format_version = load_le16(in + 10);
  h.seed = load_le64(in + 12);
  h.bucket_count = load_le64(in + 20);
  h.dc_id = load_le64(in + 28);
  h.epoch = load_le64(in + 36);
  h.body_checksum = load_le32(in + 44);
  return h;
}

Result<Decoded> decode_delta(const Header& header, std::span<const std::uint8_t> body) {
  if (body.size() < kDeltaHeaderBytes) return fail(ErrorKind::kMalformed, "delta body shorter than 12 bytes");
  DecodedDelta delta{header, load_le64(body.data()), {}};
  const std::uint32_t count = load_le32(body.data() + 8);
  if (count > kMaxDeltaImages) {
    return fail(ErrorKind::kDeltaImageCount, fmt::format("{} images > {}", count, kMaxDeltaImages));
  }
  if (body.size() != kDeltaHeaderBytes + kImageBytes * std::size_t{count}) {
    return fail(ErrorKind::kMalformed, fmt::format("delta body of {} bytes for {} images", body.size(), count));
  }
  delta.images.reserve(count);
  const std::uint8_t* in = body.data() + kDeltaHeaderBytes;
  for (std::uint32_t i = 0; i < count; ++i, in += kImageBytes) {
    const std::uint32_t bucket = load_le32(in);
    if (bucket >= header.bucket_count) {
      return fail(ErrorKind::kMalformed, fmt::format("image bucket {} >= {}", bucket, header.bucket_count));
    }
    delta.images.push_back({bucket, load_le64(in + 4)});
  }
  return delta;
}

Result<Decoded> decode_chunk(const Header& header, std::span<const std::uint8_t> body) {
  if (body.size() < kChunkHeaderBytes) return fail(ErrorKind::kMalformed, "chunk body shorter than 16 bytes");
  DecodedChunk chunk{header, load_le32(body.data()), load_le32(body.data() + 4), load_le64(body.data() + 8), {}};
  if (chunk.chunk_count == 0 || chunk.chunk_index >= chunk.chunk_count) {
    return fail(ErrorKind::kMalformed, fmt::format("chunk {} of {}", chunk.chunk_index, chunk.chunk_count));
  }
  const std::size_t word_bytes = body.size() - kChunkHeaderBytes;
  if (word_bytes % 8 != 0) return fail(ErrorKind::kMalformed, "chunk words are not whole u64s");
  const std::uint64_t word_count = word_bytes / 8;
  if (word_count > kChunkBuckets) {
    return fail(ErrorKind::kSnapshotChunkWordCount, fmt::format("{} words > {}", word_count, kChunkBuckets));
  }
  if (chunk.bucket_offset > header.bucket_count || word_count > header.bucket_count - chunk.bucket_offset) {
    return fail(ErrorKind::kMalformed,
                fmt::format("words [{}, +{}) beyond {} buckets", chunk.bucket_offset, word_count, header.bucket_count));
  }
  chunk.words.resize(word_count);
  // A chunk of no words leaves data() null, which memcpy must not be given even for 0 bytes.
  if (word_count != 0) std::memcpy(chunk.words.data(), body.data() + kChunkHeaderBytes, word_bytes);
  return chunk;
}

}  // namespace

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kTruncated:
      return "Truncated";
    case ErrorKind::kFrameTooLarge:
      return "FrameTooLarge";
    case ErrorKind::kMagic:
      return "Magic";
    case ErrorKind::kWireVersion:
      return "WireVersion";
    case ErrorKind::kChecksum:
      return "Checksum";
    case ErrorKind::kFormatVersion:
      return "Format.Version";
    case ErrorKind::kFormatFingerprintBits:
      return "Format.FingerprintBits";
    case ErrorKind::kFormatSlotsPerBucket:
      return "Format.SlotsPerBucket";
    case ErrorKind::kFormatMismatch:
      return "Format.Mismatch";
    case ErrorKind::kFormatBucketCount:
      return "Format.BucketCount";
    case ErrorKind::kFlags:
      return "Flags";
    case ErrorKind::kMalformed:
      return "Malformed";
    case ErrorKind::kDeltaImageCount:
      return "DeltaImageCount";
    case ErrorKind::kSnapshotChunkWordCount:
      return "SnapshotChunkWordCount";
    case ErrorKind::kBucketIndex:
      return "BucketIndex";
    case ErrorKind::kSnapshotBucketCount:
      return "SnapshotBucketCount";
    case ErrorKind::kChunkSequence:
      return "ChunkSequence";
    case ErrorKind::kIncompleteCoverage:
      return "IncompleteCoverage";
  }
  return "Unknown";
}

Result<FilterFormat> FilterFormat::make(std::uint64_t seed, std::uint64_t bucket_count) {
  if (bucket_count < 2 || bucket_count > ckf::kMaxBucketCount || !std::has_single_bit(bucket_count)) {
    return fail(ErrorKind::kFormatBucketCount,
                fmt::format("bucket count {} is not a power of two in [2, 2^24]", bucket_count));
  }
  return FilterFormat{seed, bucket_count};
}

Result<std::string> encode_delta(const FilterFormat& format, std::uint64_t dc_id, std::uint64_t base_sequence,
                                 std::uint64_t sequence, std::span<const BucketImage> images) {
  if (images.size() > kMaxDeltaImages) {
    return fail(ErrorKind::kDeltaImageCount, fmt::format("{} images > {}", images.size(), kMaxDeltaImages));
  }
  for (const BucketImage& image : images) {
    if (image.bucket >= format.bucket_count) {
      return fail(ErrorKind::kBucketIndex, fmt::format("bucket {} >= {}", image.bucket, format.bucket_count));
    }
  }
  const std::size_t size = delta_frame_bytes(images.size());
  std::string frame = begin_frame(size, Flags::kDelta, format, dc_id, sequence);
  std::uint8_t* out = bytes_of(frame) + kHeaderBytes;
  store_le64(out, base_sequence);
  store_le32(out + 8, static_cast<std::uint32_t>(images.size()));
  out += kDeltaHeaderBytes;
  for (const BucketImage& image : images) {
    store_le32(out, static_cast<std::uint32_t>(image.bucket));
    store_le64(out + 4, image.word);
    out += kImageBytes;
  }
  seal(frame);
  return frame;
}

Result<std::string> encode_snapshot_chunk(const FilterFormat& format, std::uint64_t dc_id, std::uint64_t sequence,
                                          std::uint32_t chunk_index, std::span<const std::uint64_t> words) {
  if (words.size() != format.bucket_count) {
    return fail(ErrorKind::kSnapshotBucketCount,
                fmt::format("{} words for {} buckets", words.size(), format.bucket_count));
  }
  const std::uint64_t chunk_count = chunk_count_for(format.bucket_count);
  if (chunk_index >= chunk_count) {
    return fail(ErrorKind::kMalformed, fmt::format("chunk {} of {}", chunk_index, chunk_count));
  }
  const std::uint64_t offset = std::uint64_t{chunk_index} * kChunkBuckets;
  const std::uint64_t count = std::min<std::uint64_t>(kChunkBuckets, format.bucket_count - offset);
  std::string frame =
      begin_frame(kHeaderBytes + kChunkHeaderBytes + 8 * count, Flags::kSnapshotChunk, format, dc_id, sequence);
  std::uint8_t* out = bytes_of(frame) + kHeaderBytes;
  store_le32(out, chunk_index);
  store_le32(out + 4, static_cast<std::uint32_t>(chunk_count));
  store_le64(out + 8, offset);
  std::memcpy(out + kChunkHeaderBytes, words.data() + offset, 8 * count);
  seal(frame);
  return frame;
}

Result<std::vector<std::string>> encode_snapshot(const FilterFormat& format, std::uint64_t dc_id,
                                                 std::uint64_t sequence, std::span<const std::uint64_t> words) {
  std::vector<std::string> chunks;
  const std::uint64_t chunk_count = chunk_count_for(format.bucket_count);
  for (std::uint32_t i = 0; i < chunk_count; ++i) {
    auto chunk = encode_snapshot_chunk(format, dc_id, sequence, i, words);
    if (!chunk) return std::unexpected(std::move(chunk.error()));
    chunks.push_back(std::move(*chunk));
  }
  return chunks;
}

Result<Decoded> decode(std::span<const std::uint8_t> frame, const FilterFormat& expected) {
  if (frame.size() < kHeaderBytes) return fail(ErrorKind::kTruncated, fmt::format("{} bytes", frame.size()));
  if (frame.size() > kMaxFrameBytes) {
    return fail(ErrorKind::kFrameTooLarge, fmt::format("{} bytes > {}", frame.size(), kMaxFrameBytes));
  }
  if (std::memcmp(frame.data(), kMagic, 4) != 0) return fail(ErrorKind::kMagic);
  const Header header = parse_header(frame.data());
  if (header.wire_version != kWireVersion) {
    return fail(ErrorKind::kWireVersion, fmt::format("wire version {}", header.wire_version));
  }
  const std::span<const std::uint8_t> body = frame.subspan(kHeaderBytes);
  const auto checksum = static_cast<std::uint32_t>(xxh3(body.data(), body.size(), 0));
  if (checksum != header.body_checksum) {
    return fail(ErrorKind::kChecksum,
                fmt::format("body hashes to {:#010x}, header says {:#010x}", checksum, header.body_checksum));
  }
  if (header.format_version != ckf::kFormatVersion) {
    return fail(ErrorKind::kFormatVersion, fmt::format("format version {}", header.format_version));
  }
  if (header.fingerprint_bits != ckf::kFingerprintBits) {
    return fail(ErrorKind::kFormatFingerprintBits, fmt::format("{} fingerprint bits", header.fingerprint_bits));
  }
  if (header.slots_per_bucket != ckf::kSlotsPerBucket) {
    return fail(ErrorKind::kFormatSlotsPerBucket, fmt::format("{} slots per bucket", header.slots_per_bucket));
  }
  if (header.seed != expected.seed || header.bucket_count != expected.bucket_count) {
    return fail(ErrorKind::kFormatMismatch,
                fmt::format("expected seed {:#x} / {} buckets, frame has {:#x} / {}", expected.seed,
                            expected.bucket_count, header.seed, header.bucket_count));
  }
  switch (header.flags) {
    case static_cast<std::uint16_t>(Flags::kDelta):
      return decode_delta(header, body);
    case static_cast<std::uint16_t>(Flags::kSnapshotChunk):
      return decode_chunk(header, body);
    default:
      return fail(ErrorKind::kFlags, fmt::format("flags {:#x}", header.flags));
  }
}

Result<Decoded> decode_standalone(std::span<const std::uint8_t> frame) {
  if (frame.size() < kHeaderBytes) return fail(ErrorKind::kTruncated, fmt::format("{} bytes", frame.size()));
  const Header header = parse_header(frame.data());
  auto decoded = decode(frame, FilterFormat{header.seed, header.bucket_count});
  if (!decoded) return decoded;
  // No consumer format vouches for the bucket count here, so check its shape too.
  if (auto format = FilterFormat::make(header.seed, header.bucket_count); !format) {
    return std::unexpected(format.error());
  }
  return decoded;
}

void SnapshotAssembly::reset() {
  epoch_ = 0;
  chunk_count_ = 0;
  next_chunk_ = 0;
  next_bucket_ = 0;
  words_ = {};
}

Result<std::optional<AssembledSnapshot>> SnapshotAssembly::absorb(const Decoded& frame) {
  const auto* chunk = std::get_if<DecodedChunk>(&frame);
  if (chunk == nullptr) return fail(ErrorKind::kChunkSequence, "a delta inside a snapshot");
  if (chunk->chunk_count == 0 || chunk->chunk_index >= chunk->chunk_count) {
    reset();
    return fail(ErrorKind::kChunkSequence, fmt::format("chunk {} of {}", chunk->chunk_index, chunk->chunk_count));
  }
  if (chunk->chunk_index == 0) {
    reset();
    epoch_ = chunk->header.epoch;
    chunk_count_ = chunk->chunk_count;
    words_.reserve(bucket_count_);
  }
  if (chunk->chunk_index != next_chunk_ || chunk->chunk_count != chunk_count_ || chunk->header.epoch != epoch_ ||
      chunk->header.bucket_count != bucket_count_ || chunk->bucket_offset != next_bucket_) {
    const std::uint32_t expected_chunk = next_chunk_;
    reset();
    return fail(ErrorKind::kChunkSequence,
                fmt::format("chunk {} where chunk {} was expected", chunk->chunk_index, expected_chunk));
  }
  words_.insert(words_.end(), chunk->words.begin(), chunk->words.end());
  next_bucket_ += chunk->words.size();
  ++next_chunk_;
  if (next_chunk_ < chunk_count_) return std::nullopt;
  if (next_bucket_ != bucket_count_) {
    const std::uint64_t covered = next_bucket_;
    reset();
    return fail(ErrorKind::kIncompleteCoverage, fmt::format("{} of {} buckets", covered, bucket_count_));
  }
  AssembledSnapshot snapshot{epoch_, std::move(words_)};
  reset();
  return snapshot;
}

}  // namespace kvrelay::cbi1
