// CBI1 frames as a consumer decodes them (core/cbi1.hpp, docs/protocol/cbi1-ckf.md#cbi1): each
// record is one frame, decoded against the filter format the first frame names (or a small
// default), also decoded standalone, assembled into a snapshot and followed by deltas the way a
// replica applies them. Accepted frames must re-encode to the very same bytes.
//
// Input: byte 0, then records. Byte 0 bit 0 set: each frame's body checksum is recomputed before
// decoding, so mutations get past the checksum to the checks behind it.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/cbi1.hpp"
#include "core/xxh3.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;

namespace {

// A consumer holds a whole lane; this keeps one small enough for thousands of inputs a second.
constexpr std::uint64_t kMaxBuckets = std::uint64_t{1} << 16;
constexpr cbi1::FilterFormat kDefaultFormat{0x5eed, 8};

const std::uint8_t* bytes_of(const std::string& frame) { return reinterpret_cast<const std::uint8_t*>(frame.data()); }

cbi1::FilterFormat format_named_by(const std::string& frame) {
  if (frame.size() < cbi1::kHeaderBytes) return kDefaultFormat;
  const auto format = cbi1::FilterFormat::make(load_le64(bytes_of(frame) + 12), load_le64(bytes_of(frame) + 20));
  if (!format || format->bucket_count > kMaxBuckets) return kDefaultFormat;
  return *format;
}

void patch_checksum(std::string& frame) {
  if (frame.size() < cbi1::kHeaderBytes) return;
  auto* bytes = reinterpret_cast<std::uint8_t*>(frame.data());
  const std::uint64_t digest = xxh3(bytes + cbi1::kHeaderBytes, frame.size() - cbi1::kHeaderBytes, 0);
  store_le32(bytes + 44, static_cast<std::uint32_t>(digest));
}

// The decoder is strict (exact lengths, every header field checked), so what it accepts is the
// one encoding of what it returns.
void check_round_trip(const cbi1::FilterFormat& format, const cbi1::Decoded& decoded, const std::string& frame) {
  if (const auto* delta = std::get_if<cbi1::DecodedDelta>(&decoded)) {
    for (const auto& image : delta->images) require(image.bucket < format.bucket_count, "delta image inside the lane");
    const auto encoded =
        cbi1::encode_delta(format, delta->header.dc_id, delta->base_epoch, delta->header.epoch, delta->images);
    require(encoded.has_value() && *encoded == frame, "an accepted delta re-encodes to its own bytes");
    return;
  }
  const auto& chunk = std::get<cbi1::DecodedChunk>(decoded);
  require(chunk.chunk_index < chunk.chunk_count, "chunk index below chunk count");
  require(chunk.bucket_offset <= format.bucket_count && chunk.words.size() <= format.bucket_count - chunk.bucket_offset,
          "chunk words inside the lane");
  // Only the encoder's own chunking can round-trip: one chunk covering the whole lane here.
  if (chunk.chunk_count != 1 || chunk.bucket_offset != 0 || chunk.words.size() != format.bucket_count) return;
  const auto encoded = cbi1::encode_snapshot_chunk(format, chunk.header.dc_id, chunk.header.epoch, 0, chunk.words);
  require(encoded.has_value() && *encoded == frame, "an accepted chunk re-encodes to its own bytes");
}

// What a replica does with decoded frames: assemble, then apply contiguous deltas.
class Consumer {
 public:
  explicit Consumer(const cbi1::FilterFormat& format) : format_(format), assembly_(format.bucket_count) {}

  void take(const cbi1::Decoded& decoded) {
    const auto* delta = std::get_if<cbi1::DecodedDelta>(&decoded);
    if (lane_.empty() || delta == nullptr) return assemble(decoded);
    if (delta->base_epoch != epoch_) return;
    for (const auto& image : delta->images) {
      require(image.bucket < lane_.size(), "delta image inside the installed lane");
      lane_[image.bucket] = image.word;
    }
    epoch_ = delta->header.epoch;
  }

 private:
  void assemble(const cbi1::Decoded& decoded) {
    auto outcome = assembly_.absorb(decoded);
    if (!outcome || !*outcome) return;
    require((*outcome)->words.size() == format_.bucket_count, "an assembled snapshot covers the whole lane");
    lane_ = std::move((*outcome)->words);
    epoch_ = (*outcome)->epoch;
  }

  cbi1::FilterFormat format_;
  cbi1::SnapshotAssembly assembly_;
  RandomAccessWords lane_;
  std::uint64_t epoch_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool fix_checksums = (data[0] & 1) != 0;
  std::vector<std::string> frames;
  for (const auto record : fuzz::records_of(fuzz::as_text(data + 1, size - 1))) {
    frames.emplace_back(record);
    if (fix_checksums) patch_checksum(frames.back());
  }
  const cbi1::FilterFormat format = format_named_by(frames.front());
  Consumer consumer(format);
  for (const std::string& frame : frames) {
    const std::span<const std::uint8_t> bytes{bytes_of(frame), frame.size()};
    const auto decoded = cbi1::decode(bytes, format);
    const auto standalone = cbi1::decode_standalone(bytes);
    if (!decoded) continue;
    require(standalone.has_value(), "a frame valid for its consumer's format is valid standalone");
    check_round_trip(format, *decoded, frame);
    consumer.take(*decoded);
  }
  return 0;
}
