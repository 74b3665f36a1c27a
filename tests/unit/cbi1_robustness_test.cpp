// Random, truncated and mutated CBI1 frames: decode either fails with a typed error or
// returns exactly what the bytes say (checked by re-serializing). Runs under ASan too.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "core/cbi1.hpp"
#include "core/xxh3.hpp"

using namespace kvrelay;

namespace {

// An independent serializer of decoded frames: decode(frame) must round-trip to frame.
std::string reserialize(const cbi1::Decoded& decoded) {
  const cbi1::Header& h = std::visit([](const auto& d) -> const cbi1::Header& { return d.header; }, decoded);
  std::string out(48, '\0');
  auto* p = reinterpret_cast<std::uint8_t*>(out.data());
  std::memcpy(p, "CBI1", 4);
  store_le16(p + 4, h.wire_version);
  store_le16(p + 6, h.flags);
  p[8] = h.fingerprint_bits;
  p[9] = h.slots_per_bucket;
  store_le16(p + 10, h.format_version);
  store_le64(p + 12, h.seed);
  store_le64(p + 20, h.bucket_count);
  store_le64(p + 28, h.dc_id);
  store_le64(p + 36, h.epoch);
  store_le32(p + 44, h.body_checksum);
  auto append = [&out](const auto& value) { out.append(reinterpret_cast<const char*>(&value), sizeof value); };
  if (const auto* delta = std::get_if<cbi1::DecodedDelta>(&decoded)) {
    append(delta->base_epoch);
    append(static_cast<std::uint32_t>(delta->images.size()));
    for (const auto& image : delta->images) {
      append(static_cast<std::uint32_t>(image.bucket));
      append(image.word);
    }
  } else {
    const auto& chunk = std::get<cbi1::DecodedChunk>(decoded);
    append(chunk.chunk_index);
    append(chunk.chunk_count);
    append(chunk.bucket_offset);
    for (std::uint64_t word : chunk.words) append(word);
  }
  return out;
}

void check_decode_is_faithful(const std::string& frame, const cbi1::FilterFormat& format) {
  const auto decoded = cbi1::decode(frame, format);
  if (decoded) REQUIRE(reserialize(*decoded) == frame);
}

// Re-computes the body checksum so a mutation reaches the checks behind it.
void reseal(std::string& frame) {
  if (frame.size() < 48) return;
  const auto digest = static_cast<std::uint32_t>(xxh3(frame.data() + 48, frame.size() - 48, 0));
  store_le32(reinterpret_cast<std::uint8_t*>(frame.data()) + 44, digest);
}

}  // namespace

TEST_CASE("mutated, truncated and random frames never crash or misread", "[cbi1][robustness]") {
  const auto format = *cbi1::FilterFormat::make(0xFEED, 64);
  std::mt19937_64 rng(2024);
  std::vector<std::uint64_t> words(64);
  for (auto& word : words) word = rng() & 0xFFFF0000FFFF0000;
  std::vector<BucketImage> images;
  for (std::uint64_t b = 0; b < 64; b += 5) images.push_back({b, rng()});
  const std::vector<std::string> seeds{
      cbi1::encode_snapshot(format, 3, 9, words)->front(),
      *cbi1::encode_delta(format, 3, 9, 10, images),
      *cbi1::encode_delta(format, 3, 0, 1, {}),
  };

  std::size_t accepted = 0;
  for (int round = 0; round < 30000; ++round) {
    std::string frame = seeds[rng() % seeds.size()];
    switch (rng() % 5) {
      case 0:
        frame.resize(rng() % (frame.size() + 1));
        break;  // truncate
      case 1:
        frame[rng() % frame.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 2:  // corrupt a length-bearing field, then reseal so the body checks run
        frame[48 + rng() % std::min<std::size_t>(16, frame.size() - 48)] = static_cast<char>(rng());
        reseal(frame);
        break;
      case 3:  // append garbage and reseal
        frame.append(rng() % 40, static_cast<char>(rng()));
        reseal(frame);
        break;
      default: {  // random bytes with a valid header prefix
        std::string noise(rng() % 200, '\0');
        for (auto& c : noise) c = static_cast<char>(rng());
        frame = frame.substr(0, 48) + noise;
        if (rng() % 2 == 0) reseal(frame);
      }
    }
    check_decode_is_faithful(frame, format);
    accepted += cbi1::decode(frame, format).has_value();
  }
  // Some mutations stay valid (for example header fields outside the checksum).
  CHECK(accepted > 0);
}

TEST_CASE("every truncation of a valid frame is rejected", "[cbi1][robustness]") {
  const auto format = *cbi1::FilterFormat::make(0xFEED, 16);
  const std::vector<BucketImage> images{{1, 2}, {3, 4}};
  const std::string delta = *cbi1::encode_delta(format, 1, 1, 2, images);
  const std::string chunk = cbi1::encode_snapshot(format, 1, 2, std::vector<std::uint64_t>(16, 7))->front();
  for (const std::string& frame : {delta, chunk}) {
    for (std::size_t size = 0; size < frame.size(); ++size) {
      CHECK_FALSE(cbi1::decode(frame.substr(0, size), format).has_value());
    }
  }
}
