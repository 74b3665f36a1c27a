#include <catch2/catch.hpp>

#include <algorithm>

#include "core/cbi1.hpp"
#include "tests/unit/vectors.hpp"

using namespace kvrelay;

namespace {

const nlohmann::json& cbi1_vectors() { return test::vectors().at("cbi1"); }

cbi1::FilterFormat good_format() {
  const auto& good = cbi1_vectors().at("good");
  return *cbi1::FilterFormat::make(test::u64(good["seed"]), good["bucket_count"].get<std::uint64_t>());
}

std::vector<BucketImage> images_of(const nlohmann::json& list) {
  std::vector<BucketImage> images;
  for (const auto& image : list) images.push_back({image[0].get<std::uint64_t>(), test::u64(image[1])});
  return images;
}

std::string error_name(const cbi1::Result<cbi1::Decoded>& result) {
  return result ? "ok" : std::string(cbi1::to_string(result.error().kind));
}

}  // namespace

TEST_CASE("the good delta encodes and decodes bit for bit", "[cbi1]") {
  const auto& v = cbi1_vectors().at("good");
  const auto& d = v["delta"];
  const auto images = images_of(d["images"]);
  const auto frame = cbi1::encode_delta(good_format(), v["dc_id"].get<std::uint64_t>(),
                                        d["base_epoch"].get<std::uint64_t>(), d["epoch"].get<std::uint64_t>(), images);
  REQUIRE(frame.has_value());
  CHECK(test::to_hex(*frame) == d["hex"].get<std::string>());

  const auto decoded = cbi1::decode(*frame, good_format());
  REQUIRE(decoded.has_value());
  const auto& delta = std::get<cbi1::DecodedDelta>(*decoded);
  CHECK(delta.header.dc_id == v["dc_id"].get<std::uint64_t>());
  CHECK(delta.header.epoch == d["epoch"].get<std::uint64_t>());
  CHECK(delta.header.body_checksum == test::u64(d["body_checksum"]));
  CHECK(delta.base_epoch == d["base_epoch"].get<std::uint64_t>());
  CHECK(delta.images == images);
}

TEST_CASE("the good snapshot chunk encodes and decodes bit for bit", "[cbi1]") {
  const auto& v = cbi1_vectors().at("good");
  const auto& c = v["snapshot_chunk"];
  const auto words = test::u64_list(c["words"]);
  const auto frames =
      cbi1::encode_snapshot(good_format(), v["dc_id"].get<std::uint64_t>(), c["epoch"].get<std::uint64_t>(), words);
  REQUIRE(frames.has_value());
  REQUIRE(frames->size() == 1);
  CHECK(test::to_hex(frames->front()) == c["hex"].get<std::string>());

  const auto decoded = cbi1::decode(frames->front(), good_format());
  REQUIRE(decoded.has_value());
  const auto& chunk = std::get<cbi1::DecodedChunk>(*decoded);
  CHECK(chunk.chunk_index == 0);
  CHECK(chunk.chunk_count == 1);
  CHECK(chunk.bucket_offset == 0);
  CHECK(chunk.words == words);
  CHECK(chunk.header.body_checksum == test::u64(c["body_checksum"]));
}

TEST_CASE("an empty delta is codec-valid", "[cbi1]") {
  const auto& v = cbi1_vectors().at("good");
  const auto& e = v["empty_delta"];
  const auto frame = cbi1::encode_delta(good_format(), v["dc_id"].get<std::uint64_t>(),
                                        e["base_epoch"].get<std::uint64_t>(), e["epoch"].get<std::uint64_t>(), {});
  REQUIRE(frame.has_value());
  CHECK(test::to_hex(*frame) == e["hex"].get<std::string>());
  const auto decoded = cbi1::decode(*frame, good_format());
  REQUIRE(decoded.has_value());
  CHECK(std::get<cbi1::DecodedDelta>(*decoded).images.empty());
}

TEST_CASE("every malformed frame fails with its exact error", "[cbi1]") {
  for (const auto& m : test::vector_cases(cbi1_vectors(), "malformed")) {
    INFO(m["name"].get<std::string>());
    const auto format = *cbi1::FilterFormat::make(test::u64(m["decode_with"]["seed"]),
                                                  m["decode_with"]["bucket_count"].get<std::uint64_t>());
    CHECK(error_name(cbi1::decode(test::from_hex(m["hex"].get<std::string>()), format)) ==
          m["error"].get<std::string>());
  }
}

TEST_CASE("frames at and beyond the size limit", "[cbi1]") {
  for (const auto& m : test::vector_cases(cbi1_vectors(), "length_only")) {
    INFO(m["name"].get<std::string>());
    const std::string frame(m["length"].get<std::size_t>(),
                            static_cast<char>(std::stoi(m["fill"].get<std::string>(), nullptr, 16)));
    CHECK(error_name(cbi1::decode(frame, good_format())) == m["error"].get<std::string>());
  }
}

TEST_CASE("snapshot assembly outcomes per frame", "[cbi1]") {
  for (const auto& a : test::vector_cases(cbi1_vectors(), "assembly")) {
    INFO(a["name"].get<std::string>());
    const std::uint64_t bucket_count = a["bucket_count"].get<std::uint64_t>();
    const auto format = *cbi1::FilterFormat::make(good_format().seed, bucket_count);
    cbi1::SnapshotAssembly assembly(bucket_count);
    for (std::size_t i = 0; i < a["frames_hex"].size(); ++i) {
      const auto decoded = cbi1::decode(test::from_hex(a["frames_hex"][i].get<std::string>()), format);
      REQUIRE(decoded.has_value());
      const auto outcome = assembly.absorb(*decoded);
      const auto& expected = a["outcomes"][i];
      if (expected.is_null()) {
        REQUIRE(outcome.has_value());
        CHECK_FALSE(outcome->has_value());
      } else if (expected.contains("error")) {
        REQUIRE_FALSE(outcome.has_value());
        CHECK(cbi1::to_string(outcome.error().kind) == expected["error"].get<std::string>());
      } else {
        REQUIRE(outcome.has_value());
        REQUIRE(outcome->has_value());
        CHECK((*outcome)->epoch == expected["epoch"].get<std::uint64_t>());
        RandomAccessWords expected_words(bucket_count, 0);
        for (const auto& image : images_of(expected["images"])) expected_words[image.bucket] = image.word;
        CHECK((*outcome)->words == expected_words);
      }
    }
  }
}

TEST_CASE("encoder errors and filter-format bounds", "[cbi1]") {
  const auto format = good_format();
  CHECK(cbi1::encode_delta(format, 9, 0, 1, std::vector<BucketImage>{{8, 1}}).error().kind ==
        cbi1::ErrorKind::kBucketIndex);
  const std::vector<BucketImage> too_many(cbi1::kMaxDeltaImages + 1, {0, 0});
  CHECK(cbi1::encode_delta(format, 9, 0, 1, too_many).error().kind == cbi1::ErrorKind::kDeltaImageCount);
  CHECK(cbi1::encode_snapshot(format, 9, 1, std::vector<std::uint64_t>{0}).error().kind ==
        cbi1::ErrorKind::kSnapshotBucketCount);
  for (const auto& e : test::vector_cases(cbi1_vectors(), "encoder_errors")) {
    const std::string call = e["call"].get<std::string>();
    if (call.rfind("FilterFormat(bucket_count=", 0) != 0) continue;
    INFO(call);
    const std::uint64_t count = std::stoull(call.substr(call.find('=') + 1));
    const auto made = cbi1::FilterFormat::make(format.seed, count);
    if (e["error"].is_null())
      CHECK(made.has_value());
    else
      CHECK(cbi1::to_string(made.error().kind) == e["error"].get<std::string>());
  }
}

TEST_CASE("a large lane is split into 512 Ki-bucket chunks that reassemble", "[cbi1]") {
  const std::uint64_t bucket_count = std::uint64_t{1} << 21;
  const auto format = *cbi1::FilterFormat::make(0x1234, bucket_count);
  std::vector<std::uint64_t> words(bucket_count, 0);
  for (std::uint64_t i = 0; i < bucket_count; i += 4099) words[i] = i * 0x9E3779B97F4A7C15 | 1;
  const auto frames = cbi1::encode_snapshot(format, 5, 42, words);
  REQUIRE(frames.has_value());
  REQUIRE(frames->size() == 4);
  for (const auto& frame : *frames) CHECK(frame.size() == cbi1::kMaxFrameBytes);
  cbi1::SnapshotAssembly assembly(bucket_count);
  std::optional<cbi1::AssembledSnapshot> snapshot;
  for (const auto& frame : *frames) {
    const auto decoded = cbi1::decode(frame, format);
    REQUIRE(decoded.has_value());
    auto outcome = assembly.absorb(*decoded);
    REQUIRE(outcome.has_value());
    if (*outcome) snapshot = std::move(**outcome);
  }
  REQUIRE(snapshot.has_value());
  CHECK(snapshot->epoch == 42);
  CHECK(std::ranges::equal(snapshot->words, words));
}
