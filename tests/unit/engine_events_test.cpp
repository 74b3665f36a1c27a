#include <catch2/catch.hpp>

#include <concepts>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <msgpack.hpp>

#include "core/ckf.hpp"
#include "core/engine_events.hpp"
#include "core/kv_events.hpp"
#include "core/pool_index.hpp"
#include "core/token_hashing.hpp"
#include "core/xxh3.hpp"

using namespace kvrelay;
using namespace kvrelay::engine;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

// ---- msgpack values, written the way msgspec writes them ----

struct Nil {};
struct Bin {
  std::string bytes;
};
struct Value;
using Array = std::vector<Value>;
using Map = std::vector<std::pair<Value, Value>>;

struct Value {
  std::variant<Nil, std::int64_t, std::uint64_t, double, std::string, Bin, Array, Map> data;

  Value() = default;  // nil
  Value(Nil) {}
  template <std::integral T>
  Value(T value) {
    if constexpr (std::is_signed_v<T>) {
      data = static_cast<std::int64_t>(value);
    } else {
      data = static_cast<std::uint64_t>(value);
    }
  }
  Value(double value) : data(value) {}
  Value(const char* text) : data(std::string(text)) {}
  Value(std::string text) : data(std::move(text)) {}
  Value(Bin bytes) : data(std::move(bytes)) {}
  Value(Array items) : data(std::move(items)) {}
  Value(Map entries) : data(std::move(entries)) {}
};

using Packer = msgpack::packer<msgpack::sbuffer>;

void write(Packer& packer, const Value& value) {
  struct Writer {
    Packer& packer;
    void operator()(Nil) const { packer.pack_nil(); }
    // Like msgspec: the smallest int format, signed formats only for negative values.
    void operator()(std::int64_t v) const { packer.pack_int64(v); }
    void operator()(std::uint64_t v) const { packer.pack_uint64(v); }
    void operator()(double v) const { packer.pack_double(v); }
    void operator()(const std::string& text) const { packer.pack(text); }
    void operator()(const Bin& bin) const {
      packer.pack_bin(static_cast<std::uint32_t>(bin.bytes.size()));
      packer.pack_bin_body(bin.bytes.data(), static_cast<std::uint32_t>(bin.bytes.size()));
    }
    void operator()(const Array& items) const {
      packer.pack_array(static_cast<std::uint32_t>(items.size()));
      for (const Value& item : items) write(packer, item);
    }
    void operator()(const Map& entries) const {
      packer.pack_map(static_cast<std::uint32_t>(entries.size()));
      for (const auto& [key, item] : entries) {
        write(packer, key);
        write(packer, item);
      }
    }
  };
  std::visit(Writer{packer}, value.data);
}

std::string pack(const Value& value) {
  msgpack::sbuffer buffer;
  Packer packer(buffer);
  write(packer, value);
  return std::string(buffer.data(), buffer.size());
}

// ---- engine events, as vLLM (map form), older vLLM and SGLang (positional form) send them ----

constexpr std::uint32_t kBlockSize = 4;
constexpr double kTimestamp = 1767225600.25;

Array token_run(std::uint32_t first, std::size_t count) {
  Array tokens;
  for (std::size_t i = 0; i < count; ++i) tokens.emplace_back(first + static_cast<std::uint32_t>(i));
  return tokens;
}

std::vector<std::uint32_t> token_values(std::uint32_t first, std::size_t count) {
  std::vector<std::uint32_t> tokens;
  for (std::size_t i = 0; i < count; ++i) tokens.push_back(first + static_cast<std::uint32_t>(i));
  return tokens;
}

struct Stored {
  Array block_hashes = {};
  Value parent = Nil{};
  Array token_ids = {};
  Value block_size = kBlockSize;
  Value medium = "GPU";
  Value lora_name = Nil{};
  Map more = {};  // further keys of the map form (extra_keys, cache_salt, group_idx, ...)
};

Value stored_map(const Stored& e) {
  Map fields{{"type", "BlockStored"},    {"block_hashes", e.block_hashes}, {"parent_block_hash", e.parent},
             {"token_ids", e.token_ids}, {"block_size", e.block_size},     {"lora_id", Nil{}},
             {"medium", e.medium},       {"lora_name", e.lora_name}};
  fields.insert(fields.end(), e.more.begin(), e.more.end());
  return fields;
}

Value stored_array(const Stored& e, const Array& trailing = {}) {
  Array fields{"BlockStored", e.block_hashes, e.parent, e.token_ids, e.block_size, Nil{}, e.medium, e.lora_name};
  fields.insert(fields.end(), trailing.begin(), trailing.end());
  return fields;
}

Value removed_map(Array hashes, Value medium = "GPU") {
  return Map{{"type", "BlockRemoved"}, {"block_hashes", std::move(hashes)}, {"medium", std::move(medium)}};
}
Value removed_array(Array hashes, Value medium = "GPU") { return Array{"BlockRemoved", std::move(hashes), medium}; }
Value cleared_map() { return Map{{"type", "AllBlocksCleared"}}; }
Value cleared_array() { return Array{"AllBlocksCleared"}; }

std::string batch(Array events, Value rank = 0) { return pack(Array{kTimestamp, std::move(events), std::move(rank)}); }

// ---- decoding ----

std::span<const std::byte> bytes_of(const std::string& payload) {
  return std::as_bytes(std::span(payload.data(), payload.size()));
}

struct Decoded {
  DecodeResult result;
  ingest_v1::KvEventBatch out;
};

Decoded decode(EventDecoder& decoder, const std::string& payload) {
  Decoded decoded;
  decoded.result = decoder.decode(bytes_of(payload), decoded.out);
  return decoded;
}

DecoderConfig standard_config(std::uint32_t dp_rank = 0) {
  return {kBlockSize, hashing::HashFormat::kStandard, dp_rank};
}
DecoderConfig eagle_config() { return {kBlockSize, hashing::HashFormat::kEagle, 0}; }

std::vector<std::uint64_t> block_ids(const ingest_v1::BlocksStored& stored) {
  std::vector<std::uint64_t> ids;
  for (const auto& block : stored.blocks()) ids.push_back(block.block_hash());
  return ids;
}

std::vector<std::uint32_t> window_of(const ingest_v1::StoredBlock& block) {
  return {block.tokens().token_ids().begin(), block.tokens().token_ids().end()};
}

std::vector<std::uint64_t> mm_of(const ingest_v1::StoredBlock& block) {
  return {block.tokens().mm_hashes().begin(), block.tokens().mm_hashes().end()};
}

std::vector<std::uint64_t> removed_ids(const ingest_v1::KvEvent& event) {
  return {event.removed().block_hashes().begin(), event.removed().block_hashes().end()};
}

// A 64-hex multimodal digest whose first 16 hex digits are `prefix`.
std::string digest(std::string_view prefix) {
  std::string text(prefix);
  while (text.size() < 64) text += "0123456789abcdef";
  return text.substr(0, 64);
}

// The cache namespace the decoder gives a store of block 100 under `parent`.
std::string namespace_under(EventDecoder& decoder, std::uint64_t parent) {
  const auto decoded = decode(
      decoder, batch({stored_map({.block_hashes = {100}, .parent = parent, .token_ids = token_run(0, kBlockSize)})}));
  REQUIRE(decoded.out.events_size() == 1);
  return decoded.out.events(0).stored().cache_namespace();
}

}  // namespace

TEST_CASE("a vLLM map-form batch decodes into the events a push feeder sends", "[engine_events]") {
  EventDecoder decoder(standard_config());
  const auto decoded = decode(decoder, batch({stored_map({.block_hashes = {11, 12}, .token_ids = token_run(100, 8)}),
                                              removed_map({11}), cleared_map()}));

  CHECK(decoded.result.batch == DecodeResult::Batch::kDecoded);
  CHECK(decoded.result.detail.empty());
  CHECK(decoded.result.emitted == 3);
  CHECK(decoded.result.stored_blocks == 2);
  CHECK(decoded.result.ignored == 0);
  CHECK(decoded.result.truncated == 0);
  REQUIRE(decoded.out.events_size() == 3);

  const auto& stored = decoded.out.events(0);
  REQUIRE(stored.has_stored());
  CHECK(stored.tier() == ingest_v1::STORAGE_TIER_DEVICE);
  CHECK_FALSE(stored.stored().has_parent_block_hash());
  CHECK_FALSE(stored.stored().has_start_position());
  CHECK(stored.stored().lora_name().empty());
  CHECK(stored.stored().cache_namespace().empty());
  CHECK(block_ids(stored.stored()) == std::vector<std::uint64_t>{11, 12});
  CHECK(window_of(stored.stored().blocks(0)) == token_values(100, 4));
  CHECK(window_of(stored.stored().blocks(1)) == token_values(104, 4));
  CHECK(mm_of(stored.stored().blocks(0)).empty());

  REQUIRE(decoded.out.events(1).has_removed());
  CHECK(removed_ids(decoded.out.events(1)) == std::vector<std::uint64_t>{11});
  CHECK(decoded.out.events(2).has_cleared());
  CHECK(decoded.out.events(2).tier() == ingest_v1::STORAGE_TIER_DEVICE);
}

TEST_CASE("positional events decode exactly like map-form events", "[engine_events]") {
  const Stored event{.block_hashes = {21, 22}, .parent = 20, .token_ids = token_run(7, 8), .lora_name = "adapter-a"};
  EventDecoder keyed(standard_config());
  const auto from_map = decode(keyed, batch({stored_map(event), removed_map({21, 22}), cleared_map()}));
  REQUIRE(from_map.result.emitted == 3);

  SECTION("vLLM before #42892, with its producer-specific trailing fields") {
    EventDecoder positional(standard_config());
    const Array trailing{Array{Array{"not-a-salt"}, Nil{}}, 0, "full_attention", Nil{}};
    const auto from_array =
        decode(positional,
               batch({stored_array(event, trailing), Array{"BlockRemoved", Array{21, 22}, "GPU", 0}, cleared_array()}));
    CHECK(from_array.result.emitted == 3);
    CHECK(from_array.out.SerializeAsString() == from_map.out.SerializeAsString());
    // Position 8 is vLLM's extra_keys, but positions past 7 differ between producers: never read.
    CHECK(from_array.out.events(0).stored().cache_namespace().empty());
  }
  SECTION("an older producer that stops after lora_id: no medium is the device, no lora_name is none") {
    EventDecoder positional(standard_config());
    const auto from_array =
        decode(positional, batch({Array{"BlockStored", Array{21, 22}, 20, token_run(7, 8), kBlockSize, Nil{}}}));
    REQUIRE(from_array.out.events_size() == 1);
    CHECK(block_ids(from_array.out.events(0).stored()) == std::vector<std::uint64_t>{21, 22});
    CHECK(from_array.out.events(0).stored().parent_block_hash() == 20);
    CHECK(from_array.out.events(0).stored().lora_name().empty());
    CHECK(window_of(from_array.out.events(0).stored().blocks(1)) == token_values(11, 4));
  }
}

TEST_CASE("one batch may mix positional and map-form events", "[engine_events]") {
  EventDecoder decoder(standard_config());
  const auto decoded =
      decode(decoder, batch({stored_map({.block_hashes = {1}, .token_ids = token_run(0, 4)}),
                             stored_array({.block_hashes = {2}, .parent = 1, .token_ids = token_run(4, 4)}),
                             removed_array({1}), cleared_map(), cleared_array()}));
  CHECK(decoded.result.emitted == 5);
  REQUIRE(decoded.out.events_size() == 5);
  CHECK(block_ids(decoded.out.events(0).stored()) == std::vector<std::uint64_t>{1});
  CHECK(block_ids(decoded.out.events(1).stored()) == std::vector<std::uint64_t>{2});
  CHECK(decoded.out.events(1).stored().parent_block_hash() == 1);
  CHECK(removed_ids(decoded.out.events(2)) == std::vector<std::uint64_t>{1});
  CHECK(decoded.out.events(3).has_cleared());
  CHECK(decoded.out.events(4).has_cleared());
}

TEST_CASE("engine hashes: signed and unsigned ints keep their bits, bytes give their last 8 big-endian",
          "[engine_events]") {
  EventDecoder decoder(standard_config());
  std::string sha256(32, '\x5a');
  std::memcpy(sha256.data() + 24, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
  const Array hashes{std::int64_t{-2}, std::uint64_t{0xF000000000000001}, Bin{sha256}, Bin{"\x01\x02\x03"},
                     std::string("\x7f\x00\x00\x00\x00\x00\x00\x00\x09", 9)};
  const auto decoded = decode(
      decoder, batch({stored_map({.block_hashes = hashes, .parent = std::int64_t{-5}, .token_ids = token_run(0, 20)}),
                      removed_map(hashes)}));

  const std::vector<std::uint64_t> expected{0xFFFFFFFFFFFFFFFE, 0xF000000000000001, 0x0102030405060708, 0x010203,
                                            0x0000000000000009};
  REQUIRE(decoded.out.events_size() == 2);
  CHECK(block_ids(decoded.out.events(0).stored()) == expected);
  CHECK(decoded.out.events(0).stored().parent_block_hash() == 0xFFFFFFFFFFFFFFFB);
  CHECK(removed_ids(decoded.out.events(1)) == expected);

  SECTION("a bin parent maps the same way") {
    const auto child = decode(
        decoder, batch({stored_map({.block_hashes = {9}, .parent = Bin{sha256}, .token_ids = token_run(0, 4)})}));
    REQUIRE(child.out.events_size() == 1);
    CHECK(child.out.events(0).stored().parent_block_hash() == 0x0102030405060708);
  }
}

TEST_CASE("Eagle token pairs flatten into windows one token wider than the block", "[engine_events]") {
  Array pairs;
  for (std::uint32_t i = 0; i < 8; ++i) pairs.push_back(Array{100 + i, 101 + i});
  const Stored event{.block_hashes = {1, 2}, .token_ids = pairs};

  SECTION("an Eagle worker") {
    EventDecoder decoder(eagle_config());
    const auto decoded = decode(decoder, batch({stored_map(event)}));
    REQUIRE(decoded.out.events_size() == 1);
    const auto& stored = decoded.out.events(0).stored();
    CHECK(window_of(stored.blocks(0)) == token_values(100, 5));
    CHECK(window_of(stored.blocks(1)) == token_values(104, 5));
    CHECK(decoded.result.truncated == 0);
  }
  SECTION("a worker whose card is not Eagle rejects the pairs") {
    EventDecoder decoder(standard_config());
    const auto decoded = decode(decoder, batch({stored_map(event)}));
    CHECK(decoded.out.events_size() == 0);
    CHECK(decoded.result.rejections(EventRejection::kHashFormatMismatch) == 1);
    CHECK(decoded.result.detail.starts_with("events[0]: "));
  }
  SECTION("an Eagle worker rejects a flat token list, hashed for the standard format") {
    EventDecoder decoder(eagle_config());
    const auto decoded = decode(decoder, batch({stored_map({.block_hashes = {1, 2}, .token_ids = token_run(0, 9)})}));
    CHECK(decoded.out.events_size() == 0);
    CHECK(decoded.result.rejections(EventRejection::kHashFormatMismatch) == 1);
    CHECK_THAT(decoded.result.detail, Catch::Contains("flat token list"));
  }
  SECTION("pairs mixed with plain tokens are malformed") {
    EventDecoder decoder(eagle_config());
    const auto decoded =
        decode(decoder, batch({stored_map({.block_hashes = {1}, .token_ids = {Array{1, 2}, 3, 4, 5}})}));
    CHECK(decoded.out.events_size() == 0);
    CHECK(decoded.result.rejections(EventRejection::kMalformedEvent) == 1);
  }
}

TEST_CASE("lora_name salts the event and lora_id is ignored", "[engine_events]") {
  EventDecoder decoder(standard_config());
  Value event = stored_map({.block_hashes = {1}, .token_ids = token_run(0, 4), .lora_name = "adapter-a"});
  std::get<Map>(event.data)[5].second = 7;  // lora_id
  const auto decoded =
      decode(decoder, batch({event, stored_array({.block_hashes = {2}, .parent = 1, .token_ids = token_run(4, 4)})}));
  REQUIRE(decoded.out.events_size() == 2);
  CHECK(decoded.out.events(0).stored().lora_name() == "adapter-a");
  CHECK(decoded.out.events(1).stored().lora_name().empty());
}

TEST_CASE("SGLang's positional metadata map at position 7 carries the cache salt, not a LoRA name", "[engine_events]") {
  // SGLang's BlockStoredWithMetadata: its seven fields (no lora_name), then {"cache_salt": ...}.
  EventDecoder decoder(standard_config());
  const Value salted = Array{"BlockStored", Array{1}, Nil{}, token_run(0, 4),
                             kBlockSize,    Nil{},    "GPU", Map{{"cache_salt", "tenant-a"}, {"later_key", 3}}};
  const Value unsalted = Array{"BlockStored", Array{2}, 1, token_run(4, 4), kBlockSize, Nil{}, "GPU"};
  const auto decoded = decode(decoder, batch({salted, unsalted}));
  CHECK(decoded.result.emitted == 2);
  CHECK(decoded.result.rejections(EventRejection::kMalformedEvent) == 0);
  REQUIRE(decoded.out.events_size() == 2);
  CHECK(decoded.out.events(0).stored().cache_namespace() == "tenant-a");
  CHECK(decoded.out.events(0).stored().lora_name().empty());
  CHECK(decoded.out.events(1).stored().cache_namespace() == "tenant-a");  // inherited from its parent
  // A map without a salt salts nothing; position 7 of any other type is still refused.
  EventDecoder other(standard_config());
  const Value bare = Array{"BlockStored", Array{3}, Nil{}, token_run(0, 4), kBlockSize, Nil{}, "GPU", Map{}};
  const Value number = Array{"BlockStored", Array{4}, Nil{}, token_run(0, 4), kBlockSize, Nil{}, "GPU", 7};
  const auto mixed = decode(other, batch({bare, number}));
  CHECK(mixed.result.emitted == 1);
  CHECK(mixed.result.rejections(EventRejection::kMalformedEvent) == 1);
  REQUIRE(mixed.out.events_size() == 1);
  CHECK(mixed.out.events(0).stored().cache_namespace().empty());
}

TEST_CASE("a hybrid model's sliding-window and Mamba groups are ignored, their removals too", "[engine_events]") {
  EventDecoder decoder(standard_config());
  const auto in_group = [](Stored event, std::uint64_t group, const char* kind) {
    event.more = {{"group_idx", group}, {"kv_cache_spec_kind", kind}};
    return stored_map(event);
  };
  const auto removed_in = [](Array hashes, std::uint64_t group) {
    Value event = removed_map(std::move(hashes));
    std::get<Map>(event.data).emplace_back("group_idx", group);
    return event;
  };
  // vLLM publishes every group's events with the same block hashes.
  const auto stored =
      decode(decoder, batch({in_group({.block_hashes = {1, 2}, .token_ids = token_run(0, 8)}, 0, "full_attention"),
                             in_group({.block_hashes = {1, 2}, .token_ids = token_run(0, 8)}, 1, "sliding_window"),
                             in_group({.block_hashes = {2}, .token_ids = token_run(4, 4)}, 2, "mamba"),
                             in_group({.block_hashes = {7}, .token_ids = token_run(0, 4)}, 3, "mla_attention")}));
  CHECK(stored.result.emitted == 2);
  CHECK(stored.result.ignored_group == 2);
  REQUIRE(stored.out.events_size() == 2);
  CHECK(block_ids(stored.out.events(0).stored()) == std::vector<std::uint64_t>{1, 2});
  CHECK(block_ids(stored.out.events(1).stored()) == std::vector<std::uint64_t>{7});
  // The sliding window drops block 1 while the full-attention group still holds it: a removal
  // names only its group, which was seen storing as a sliding window.
  const auto removed =
      decode(decoder, batch({removed_in({1}, 1), removed_in({2}, 2), removed_in({1}, 0), removed_map({7})}));
  CHECK(removed.result.ignored_group == 2);
  CHECK(removed.result.emitted == 2);
  REQUIRE(removed.out.events_size() == 2);
  CHECK(removed_ids(removed.out.events(0)) == std::vector<std::uint64_t>{1});
  CHECK(removed_ids(removed.out.events(1)) == std::vector<std::uint64_t>{7});
  // A group index or kind of the wrong type refuses its event.
  const auto bad = decode(
      decoder,
      batch({removed_in({1}, 0), Map{{"type", "BlockRemoved"}, {"block_hashes", Array{2}}, {"group_idx", "one"}},
             stored_map({.block_hashes = {9}, .token_ids = token_run(0, 4), .more = {{"kv_cache_spec_kind", 5}}})}));
  CHECK(bad.result.emitted == 1);
  CHECK(bad.result.rejections(EventRejection::kMalformedEvent) == 2);
  // An engine restarted with another model numbers its groups otherwise: group 1 stores as full
  // attention now, and its removals are read again.
  const auto relearnt = decode(
      decoder,
      batch({in_group({.block_hashes = {8}, .token_ids = token_run(8, 4)}, 1, "full_attention"), removed_in({8}, 1)}));
  CHECK(relearnt.result.emitted == 2);
  CHECK(relearnt.result.ignored_group == 0);
}

TEST_CASE("a source remembers a bounded number of partial KV-cache groups", "[engine_events]") {
  EventDecoder decoder(standard_config());
  const auto sliding_window = [](std::uint64_t group) {
    return stored_map({.block_hashes = {group + 1},
                       .token_ids = token_run(0, 4),
                       .more = {{"group_idx", group}, {"kv_cache_spec_kind", "sliding_window"}}});
  };
  Array first;
  for (std::uint64_t group = 0; group < 1024; ++group) first.push_back(sliding_window(group));
  const auto known = decode(decoder, batch(std::move(first)));
  CHECK(known.result.ignored_group == 1024);
  CHECK(known.result.rejections(EventRejection::kMalformedEvent) == 0);
  // One more group is refused; a group already known is not, and its removals are still ignored.
  const auto removed_in = [](std::uint64_t block, std::uint64_t group) {
    Value removal = removed_map({block});
    std::get<Map>(removal.data).emplace_back("group_idx", group);
    return removal;
  };
  const auto past =
      decode(decoder, batch({sliding_window(1024), sliding_window(7), removed_in(8, 7), removed_in(1025, 1024)}));
  CHECK(past.result.rejections(EventRejection::kMalformedEvent) == 1);
  CHECK(past.result.ignored_group == 2);
  CHECK(past.result.emitted == 1);  // the refused group was never learnt partial: its removal is read
}

TEST_CASE("extra_keys: multimodal ids with and without offsets, the salt only on the first block", "[engine_events]") {
  EventDecoder decoder(standard_config());
  const std::string image_a = digest("0123456789abcdef");
  const std::string image_b = digest("FEDCBA9876543210");
  const Array extra_keys{
      Array{"adapter-a", Array{image_a, 0}, "tenant-7"},
      Array{image_b, Array{"lora-x:image-7", 3}, Bin{std::string(32, '\x01')}, 42},
      Array{"not-a-salt"},
      Nil{},
  };
  const auto decoded = decode(
      decoder, batch({stored_map({.block_hashes = {1, 2, 3, 4},
                                  .token_ids = token_run(0, 16),
                                  .lora_name = "adapter-a",
                                  .more = {{"extra_keys", extra_keys}, {"group_idx", 0}, {"locality", "local"}}})}));
  REQUIRE(decoded.out.events_size() == 1);
  const auto& stored = decoded.out.events(0).stored();
  CHECK(stored.lora_name() == "adapter-a");
  CHECK(stored.cache_namespace() == "tenant-7");
  CHECK(mm_of(stored.blocks(0)) == std::vector<std::uint64_t>{0x0123456789abcdef});
  const std::string_view other_id = "lora-x:image-7";
  CHECK(mm_of(stored.blocks(1)) ==
        std::vector<std::uint64_t>{0xFEDCBA9876543210, xxh3(other_id.data(), other_id.size())});
  CHECK(mm_of(stored.blocks(2)).empty());
  CHECK(mm_of(stored.blocks(3)).empty());

  SECTION("a plain string on a later block is never a salt") {
    const auto later = decode(decoder, batch({stored_map({.block_hashes = {5, 6},
                                                          .token_ids = token_run(0, 8),
                                                          .more = {{"extra_keys", Array{Nil{}, Array{"late"}}}}})}));
    REQUIRE(later.out.events_size() == 1);
    CHECK(later.out.events(0).stored().cache_namespace().empty());
  }
  SECTION("the LoRA name in the first block's keys is not a salt") {
    const auto lora_only = decode(decoder, batch({stored_map({.block_hashes = {5},
                                                              .token_ids = token_run(0, 4),
                                                              .lora_name = "adapter-a",
                                                              .more = {{"extra_keys", Array{Array{"adapter-a"}}}}})}));
    REQUIRE(lora_only.out.events_size() == 1);
    CHECK(lora_only.out.events(0).stored().cache_namespace().empty());
  }
  SECTION("a top-level cache_salt (TensorRT-LLM) wins over the first block's candidate") {
    const auto salted =
        decode(decoder,
               batch({stored_map({.block_hashes = {5},
                                  .token_ids = token_run(0, 4),
                                  .more = {{"extra_keys", Array{Array{"candidate"}}}, {"cache_salt", "top-level"}}})}));
    REQUIRE(salted.out.events_size() == 1);
    CHECK(salted.out.events(0).stored().cache_namespace() == "top-level");
  }
}

TEST_CASE("a namespace passes from parent to child until its block is removed, cleared or reset", "[engine_events]") {
  EventDecoder decoder(standard_config());
  const auto store_salted = [&] {
    const auto decoded =
        decode(decoder, batch({stored_map({.block_hashes = {1, 2},
                                           .token_ids = token_run(0, 8),
                                           .more = {{"extra_keys", Array{Array{"tenant"}, Nil{}}}}})}));
    REQUIRE(decoded.out.events_size() == 1);
    CHECK(decoded.out.events(0).stored().cache_namespace() == "tenant");
  };
  store_salted();
  CHECK(decoder.remembered_namespaces() == 2);

  const auto child =
      decode(decoder, batch({stored_array({.block_hashes = {3}, .parent = 2, .token_ids = token_run(8, 4)})}));
  REQUIRE(child.out.events_size() == 1);
  CHECK(child.out.events(0).stored().cache_namespace() == "tenant");
  CHECK(decoder.remembered_namespaces() == 3);
  CHECK(namespace_under(decoder, 99).empty());  // an unknown parent has no namespace

  SECTION("removal forgets the removed block only") {
    decode(decoder, batch({removed_map({3})}));
    CHECK(decoder.remembered_namespaces() == 2);
    CHECK(namespace_under(decoder, 3).empty());
    CHECK(namespace_under(decoder, 1) == "tenant");
  }
  SECTION("a removal on another tier leaves the device block's namespace alone") {
    const auto decoded = decode(decoder, batch({removed_map({3}, "CPU")}));
    CHECK(decoded.result.ignored == 1);
    CHECK(decoder.remembered_namespaces() == 3);
    CHECK(namespace_under(decoder, 3) == "tenant");
  }
  SECTION("a store on another tier remembers nothing") {
    decode(decoder, batch({stored_map({.block_hashes = {7},
                                       .token_ids = token_run(0, 4),
                                       .medium = "CPU",
                                       .more = {{"cache_salt", "offloaded"}}})}));
    CHECK(decoder.remembered_namespaces() == 3);
    CHECK(namespace_under(decoder, 7).empty());
  }
  SECTION("clearing forgets everything") {
    decode(decoder, batch({cleared_array()}));
    CHECK(decoder.remembered_namespaces() == 0);
    CHECK(namespace_under(decoder, 2).empty());
  }
  SECTION("a cold reset forgets everything") {
    decoder.reset();
    CHECK(decoder.remembered_namespaces() == 0);
    CHECK(namespace_under(decoder, 2).empty());
    store_salted();
    CHECK(namespace_under(decoder, 2) == "tenant");
  }
  SECTION("a block stored again under another namespace takes the new one") {
    decode(decoder,
           batch({stored_map({.block_hashes = {2}, .token_ids = token_run(0, 4), .more = {{"cache_salt", "b"}}})}));
    CHECK(decoder.remembered_namespaces() == 3);
    CHECK(namespace_under(decoder, 2) == "b");
    CHECK(namespace_under(decoder, 1) == "tenant");
  }
}

TEST_CASE("the envelope may be a map, and SGLang's attn_dp_rank names the rank", "[engine_events]") {
  EventDecoder decoder(standard_config(1));
  const Array events{cleared_map()};
  const auto decoded_with = [&](Map envelope) { return decode(decoder, pack(envelope)); };

  CHECK(decoded_with({{"ts", kTimestamp}, {"events", events}, {"data_parallel_rank", 1}}).result.emitted == 1);
  CHECK(decoded_with({{"events", events}, {"attn_dp_rank", 1}, {"ts", kTimestamp}}).result.emitted == 1);
  CHECK(decoded_with({{"ts", kTimestamp}, {"events", events}, {"data_parallel_rank", Nil{}}}).result.emitted == 1);
  CHECK(decoded_with({{"ts", kTimestamp}, {"events", events}, {"unknown", "x"}}).result.emitted == 1);
  CHECK(decoded_with({{"ts", kTimestamp}, {"events", events}, {"attn_dp_rank", 2}}).result.batch ==
        DecodeResult::Batch::kOtherRank);
  // Positional: the rank may be absent or nil (older SGLang, vLLM before it annotated ranks).
  CHECK(decode(decoder, pack(Array{kTimestamp, events})).result.emitted == 1);
  CHECK(decode(decoder, pack(Array{kTimestamp, events, Nil{}})).result.emitted == 1);
  CHECK(decode(decoder, pack(Array{kTimestamp, events, 1})).result.emitted == 1);
}

TEST_CASE("a batch of another dp rank appends nothing", "[engine_events]") {
  EventDecoder decoder(standard_config(0));
  ingest_v1::KvEventBatch out;
  out.set_worker_id(77);
  out.add_events()->mutable_cleared();
  const std::string payload = batch({stored_map({.block_hashes = {1}, .token_ids = token_run(0, 4)})}, 3);
  const DecodeResult result = decoder.decode(bytes_of(payload), out);
  CHECK(result.batch == DecodeResult::Batch::kOtherRank);
  CHECK(result.detail == "a batch of dp rank 3; this source feeds rank 0");
  CHECK(result.emitted == 0);
  CHECK(out.events_size() == 1);
  CHECK(out.worker_id() == 77);
}

TEST_CASE("each rejection refuses its own event and the rest of the batch goes on", "[engine_events]") {
  struct Case {
    const char* name;
    Value event;
    EventRejection reason;
  };
  const Array four = token_run(0, 4);
  Value no_type = stored_map({.block_hashes = {1}, .token_ids = four});
  std::get<Map>(no_type.data).erase(std::get<Map>(no_type.data).begin());
  const std::vector<Case> cases{
      {"an unknown map type", Map{{"type", "BlockUpdated"}, {"block_hashes", Array{1}}},
       EventRejection::kUnknownEventType},
      {"an unknown positional tag", Array{"BlocksEvicted", Array{1}}, EventRejection::kUnknownEventType},
      {"a map without type", no_type, EventRejection::kMalformedEvent},
      {"an event that is an int", 5, EventRejection::kMalformedEvent},
      {"an empty positional event", Array{}, EventRejection::kMalformedEvent},
      {"a positional tag that is not a string", Array{1, Array{1}}, EventRejection::kMalformedEvent},
      {"a positional BlockStored without block_size", Array{"BlockStored", Array{1}, Nil{}, four},
       EventRejection::kMalformedEvent},
      {"a positional BlockRemoved without hashes", Array{"BlockRemoved"}, EventRejection::kMalformedEvent},
      {"block_hashes not an array", stored_map({.block_hashes = {}, .token_ids = four, .more = {{"block_hashes", 1}}}),
       EventRejection::kMalformedEvent},
      {"a float block hash", stored_map({.block_hashes = {1.5}, .token_ids = four}), EventRejection::kMalformedEvent},
      {"a map parent", stored_map({.block_hashes = {1}, .parent = Map{}, .token_ids = four}),
       EventRejection::kMalformedEvent},
      {"a token above u32", stored_map({.block_hashes = {1}, .token_ids = {1, 2, 3, std::uint64_t{1} << 32}}),
       EventRejection::kMalformedEvent},
      {"a negative token", stored_map({.block_hashes = {1}, .token_ids = {1, 2, 3, -4}}),
       EventRejection::kMalformedEvent},
      {"pairs on a standard card, even mixed with tokens",
       stored_map({.block_hashes = {1}, .token_ids = {Array{1, 2}, 3}}), EventRejection::kHashFormatMismatch},
      {"a zero block_size", stored_map({.block_hashes = {1}, .token_ids = four, .block_size = 0}),
       EventRejection::kMalformedEvent},
      {"a string block_size", stored_map({.block_hashes = {1}, .token_ids = four, .block_size = "4"}),
       EventRejection::kMalformedEvent},
      {"another block_size", stored_map({.block_hashes = {1}, .token_ids = token_run(0, 8), .block_size = 8}),
       EventRejection::kBlockSizeMismatch},
      {"Eagle pairs on a standard card",
       stored_map({.block_hashes = {1}, .token_ids = {Array{1, 2}, Array{2, 3}, Array{3, 4}, Array{4, 5}}}),
       EventRejection::kHashFormatMismatch},
      {"a repeated block", stored_map({.block_hashes = {1, 2, 1}, .token_ids = token_run(0, 12)}),
       EventRejection::kDuplicateBlock},
      {"a block equal to its parent", stored_map({.block_hashes = {1, 2}, .parent = 2, .token_ids = token_run(0, 8)}),
       EventRejection::kDuplicateBlock},
      {"a medium that is not a string", stored_map({.block_hashes = {1}, .token_ids = four, .medium = 1}),
       EventRejection::kMalformedEvent},
      {"a lora_name that is not a string", stored_map({.block_hashes = {1}, .token_ids = four, .lora_name = 3}),
       EventRejection::kMalformedEvent},
      {"a cache_salt that is not a string",
       stored_map({.block_hashes = {1}, .token_ids = four, .more = {{"cache_salt", Array{}}}}),
       EventRejection::kMalformedEvent},
      {"extra_keys shorter than the blocks",
       stored_map({.block_hashes = {1, 2}, .token_ids = token_run(0, 8), .more = {{"extra_keys", Array{Nil{}}}}}),
       EventRejection::kMalformedEvent},
      {"an extra_keys entry that is not a list",
       stored_map({.block_hashes = {1}, .token_ids = four, .more = {{"extra_keys", Array{"salt"}}}}),
       EventRejection::kMalformedEvent},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    EventDecoder decoder(standard_config());
    const auto decoded = decode(decoder, batch({c.event, removed_map({9})}));
    CHECK(decoded.result.batch == DecodeResult::Batch::kDecoded);
    CHECK(decoded.result.rejections(c.reason) == 1);
    std::uint32_t rejected = 0;
    for (std::uint32_t count : decoded.result.rejected) rejected += count;
    CHECK(rejected == 1);
    CHECK(decoded.result.detail.starts_with("events[0]: "));
    // The next event of the batch still decodes.
    CHECK(decoded.result.emitted == 1);
    REQUIRE(decoded.out.events_size() == 1);
    CHECK(removed_ids(decoded.out.events(0)) == std::vector<std::uint64_t>{9});
  }

  SECTION("the detail names the first refused event; every refusal is counted") {
    EventDecoder decoder(standard_config());
    const auto decoded =
        decode(decoder, batch({cleared_map(), stored_map({.block_hashes = {1}, .token_ids = four, .block_size = 16}),
                               Array{"Nope"}, stored_map({.block_hashes = {1}, .token_ids = four, .block_size = 16})}));
    CHECK(decoded.result.detail == "events[1]: block_size 16, the card's is 4");
    CHECK(decoded.result.rejections(EventRejection::kBlockSizeMismatch) == 2);
    CHECK(decoded.result.rejections(EventRejection::kUnknownEventType) == 1);
    CHECK(decoded.result.emitted == 1);
  }
  SECTION("an unknown tag is shown quoted and cut short: it is the engine's text, not ours") {
    EventDecoder decoder(standard_config());
    const std::string tag = "Evil\nERROR forged log line " + std::string(100, 'x');
    const auto decoded = decode(decoder, batch({Array{tag.c_str(), Array{1}}}));
    CHECK(decoded.result.detail == "events[0]: unknown event type \"Evil\\x0aERROR forged log line xxxxxxxxxxxxx...\"");
  }
  CHECK(to_string(EventRejection::kDuplicateBlock) == "duplicate_block");
  CHECK(to_string(EventRejection::kBlockSizeMismatch) == "block_size_mismatch");
}

TEST_CASE("blocks whose token window overruns token_ids are dropped, keeping the complete prefix", "[engine_events]") {
  EventDecoder decoder(standard_config());
  SECTION("two of three blocks complete") {
    const auto decoded =
        decode(decoder, batch({stored_map({.block_hashes = {1, 2, 3}, .token_ids = token_run(0, 11)})}));
    CHECK(decoded.result.truncated == 1);
    CHECK(decoded.result.emitted == 1);
    CHECK(decoded.result.stored_blocks == 2);
    REQUIRE(decoded.out.events_size() == 1);
    CHECK(block_ids(decoded.out.events(0).stored()) == std::vector<std::uint64_t>{1, 2});
    CHECK(window_of(decoded.out.events(0).stored().blocks(1)) == token_values(4, 4));
  }
  SECTION("no complete block: nothing is emitted, it counts as truncated only") {
    const auto decoded = decode(decoder, batch({stored_map({.block_hashes = {1, 2}, .token_ids = token_run(0, 3)})}));
    CHECK(decoded.result.truncated == 1);
    CHECK(decoded.result.emitted == 0);
    CHECK(decoded.out.events_size() == 0);
    std::uint32_t rejected = 0;
    for (std::uint32_t count : decoded.result.rejected) rejected += count;
    CHECK(rejected == 0);
  }
  SECTION("no blocks at all: nothing, and no error") {
    const auto decoded = decode(decoder, batch({stored_map({.block_hashes = {}, .token_ids = {}})}));
    CHECK(decoded.out.events_size() == 0);
    CHECK(decoded.result.truncated == 0);
    CHECK(decoded.result.detail.empty());
  }
  SECTION("an Eagle window needs one token more than the block") {
    EventDecoder eagle(eagle_config());
    Array pairs;
    for (std::uint32_t i = 0; i < 11; ++i) pairs.push_back(Array{i, i + 1});  // flattens to 12 tokens
    const auto decoded = decode(eagle, batch({stored_map({.block_hashes = {1, 2, 3}, .token_ids = pairs})}));
    CHECK(decoded.result.truncated == 1);
    REQUIRE(decoded.out.events_size() == 1);
    CHECK(block_ids(decoded.out.events(0).stored()) == std::vector<std::uint64_t>{1, 2});
    CHECK(window_of(decoded.out.events(0).stored().blocks(1)) == token_values(4, 5));
  }
}

TEST_CASE("medium maps to a storage tier and only device-tier events are emitted", "[engine_events]") {
  const auto decode_with_medium = [](const Value& medium) {
    EventDecoder decoder(standard_config());
    return decode(decoder, batch({stored_map({.block_hashes = {1}, .token_ids = token_run(0, 4), .medium = medium}),
                                  removed_array({1}, medium)}));
  };
  for (const char* device : {"GPU", "gpu", "Device", "HBM"}) {
    INFO(device);
    const auto decoded = decode_with_medium(device);
    CHECK(decoded.result.emitted == 2);
    CHECK(decoded.result.ignored == 0);
    CHECK(decoded.out.events(0).tier() == ingest_v1::STORAGE_TIER_DEVICE);
  }
  CHECK(decode_with_medium(Nil{}).result.emitted == 2);
  for (const char* other : {"CPU", "cpu_pinned", "CPU_TIER1", "CPU_TIER2", "disk", "NVME", "STORAGE", "EXTERNAL",
                            "network", "Remote", "SHARED"}) {
    INFO(other);
    const auto decoded = decode_with_medium(other);
    CHECK(decoded.result.emitted == 0);
    CHECK(decoded.result.ignored == 2);
    CHECK(decoded.out.events_size() == 0);
    CHECK(decoded.result.detail.empty());
  }
  // A clear names no medium (device); one that does is filtered like the rest (decisions.md#d39).
  EventDecoder decoder(standard_config());
  const auto cleared = decode(decoder, batch({cleared_map(), Map{{"type", "AllBlocksCleared"}, {"medium", "CPU"}}}));
  CHECK(cleared.result.emitted == 1);
  CHECK(cleared.result.ignored == 1);
  REQUIRE(cleared.out.events_size() == 1);
  CHECK(cleared.out.events(0).has_cleared());
}

TEST_CASE("garbage payloads are malformed batches and append nothing", "[engine_events]") {
  ingest_v1::KvEventBatch out;
  out.add_events()->mutable_cleared();
  EventDecoder decoder(standard_config());
  const auto check_malformed = [&](const std::string& payload) {
    const DecodeResult result = decoder.decode(bytes_of(payload), out);
    CHECK(result.batch == DecodeResult::Batch::kMalformed);
    CHECK_FALSE(result.detail.empty());
    CHECK(result.emitted == 0);
    CHECK(out.events_size() == 1);
  };

  SECTION("wrong envelopes") {
    const Array events{cleared_map()};
    std::size_t index = 0;
    for (const Value& envelope : std::vector<Value>{
             5, "batch", Nil{}, Array{}, Array{kTimestamp}, Array{kTimestamp, "events"}, Array{"ts", events},
             Array{kTimestamp, events, -1}, Array{kTimestamp, events, "0"}, Map{{"ts", kTimestamp}},
             Map{{"ts", kTimestamp}, {"events", Map{}}}, Map{{"events", events}}, Bin{"\x91\xc0"}}) {
      INFO("envelope " << index++);
      check_malformed(pack(envelope));
    }
    check_malformed("");
  }
  SECTION("every truncation of a valid batch, and trailing bytes") {
    const std::string valid =
        batch({stored_map({.block_hashes = {1, 2}, .token_ids = token_run(0, 8)}), cleared_map()});
    for (std::size_t size = 0; size < valid.size(); ++size) check_malformed(valid.substr(0, size));
    check_malformed(valid + '\x00');
    check_malformed(valid + valid);
  }
  SECTION("random bytes") {
    std::mt19937_64 random(20260601);
    for (int i = 0; i < 2000; ++i) {
      std::string payload(1 + random() % 48, '\0');
      for (char& byte : payload) byte = static_cast<char>(random());
      check_malformed(payload);
    }
  }
  SECTION("forged lengths cannot make the decoder reserve memory the payload does not hold") {
    check_malformed(std::string("\xdd\xff\xff\xff\xff", 5));                           // array32 of 4 Gi elements
    check_malformed(std::string("\x92\xcb\0\0\0\0\0\0\0\0\xdf\xff\xff\xff\xff", 15));  // map32 of 4 Gi pairs
    check_malformed(std::string("\xdb\xff\xff\xff\xff", 5));                           // str32 of 4 GiB
    check_malformed(std::string(200, '\x91'));                                         // nested deeper than any batch
  }
  SECTION("a large payload declaring more elements in all than it has bytes is refused before it is unpacked") {
    // 32 nested array32 headers each declaring as many elements as the payload has bytes: each
    // within the per-array limit, together 32 times the payload.
    constexpr std::size_t kSize = 1 << 20;
    std::string forged;
    for (int level = 0; level < 32; ++level) forged += std::string("\xdd\x00\x10\x00\x00", 5);
    forged.resize(kSize, '\xc0');
    const DecodeResult result = decoder.decode(bytes_of(forged), out);
    CHECK(result.batch == DecodeResult::Batch::kMalformed);
    CHECK_THAT(result.detail, Catch::Contains("declare more elements than it has bytes"));

    // One-element array headers all the way: within the element budget, and refused at the
    // nesting limit by the scan itself (whose parser would otherwise open a frame per byte).
    const DecodeResult deep = decoder.decode(bytes_of(std::string(kSize, '\x91')), out);
    CHECK(deep.batch == DecodeResult::Batch::kMalformed);
    CHECK_THAT(deep.detail, Catch::Contains("nest deeper than 32 levels"));

    Array events;  // a genuine batch as large decodes in full
    for (std::uint64_t e = 0; e < 4096; ++e)
      events.push_back(stored_map({.block_hashes = {e}, .token_ids = token_run(0, 4)}));
    const std::string large = batch(events);
    REQUIRE(large.size() >= 64u << 10);
    const DecodeResult decoded = decoder.decode(bytes_of(large), out);
    CHECK(decoded.batch != DecodeResult::Batch::kMalformed);
    CHECK(decoded.emitted == 4096);
  }
}

TEST_CASE("mutated batches never emit more than they count", "[engine_events]") {
  const std::string valid =
      batch({stored_map({.block_hashes = {1, 2},
                         .parent = 0,
                         .token_ids = token_run(0, 8),
                         .lora_name = "a",
                         .more = {{"extra_keys", Array{Array{"s", Array{digest("ab"), 1}}, Nil{}}}}}),
             stored_array({.block_hashes = {3}, .parent = 2, .token_ids = token_run(8, 4)}), removed_map({1}),
             cleared_array()});
  std::mt19937_64 random(7);
  EventDecoder decoder(standard_config());
  std::size_t decoded_batches = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string payload = valid;
    for (int flips = 1 + static_cast<int>(random() % 3); flips > 0; --flips) {
      payload[random() % payload.size()] = static_cast<char>(random());
    }
    ingest_v1::KvEventBatch out;
    const DecodeResult result = decoder.decode(bytes_of(payload), out);
    REQUIRE(out.events_size() == static_cast<int>(result.emitted));
    if (result.batch == DecodeResult::Batch::kDecoded) ++decoded_batches;
    std::uint64_t blocks = 0;
    for (const auto& event : out.events()) blocks += event.has_stored() ? event.stored().blocks_size() : 0;
    CHECK(blocks == result.stored_blocks);
  }
  CHECK(decoded_batches > 0);  // the mutations also exercised event-level paths
}

TEST_CASE("decoded events canonicalise to the query-side sequence hashes of the same tokens", "[engine_events]") {
  // The worked example of the ingest boundary, with a LoRA, a cache salt on the first block only, a
  // multimodal block, and a second event that inherits the salt through its parent.
  const std::vector<std::uint32_t> tokens = token_values(1000, 16);
  const std::string image = digest("00000000deadbeef");

  struct Format {
    const char* name;
    DecoderConfig config;
  };
  for (const Format& format : {Format{"standard", standard_config()}, Format{"eagle", eagle_config()}}) {
    INFO(format.name);
    const bool eagle = format.config.format == hashing::HashFormat::kEagle;
    // Eagle events carry (token, next token) pairs: as many pairs as tokens, minus the one a pair adds.
    const auto encode = [&](std::size_t first, std::size_t count) {
      Array encoded;
      for (std::size_t i = first; i < first + count; ++i) {
        encoded.push_back(eagle ? Value(Array{tokens[i], tokens[i + 1]}) : Value(tokens[i]));
      }
      return encoded;
    };
    EventDecoder decoder(format.config);
    const auto first =
        decode(decoder, batch({stored_map({.block_hashes = {1, 2},
                                           .token_ids = encode(0, 8),
                                           .lora_name = "adapter-a",
                                           .more = {{"extra_keys", Array{Array{"adapter-a", "tenant-9"},
                                                                         Array{"adapter-a", Array{image, 2}}}}}})}));
    const auto second = decode(
        decoder,
        batch({stored_array({.block_hashes = {3}, .parent = 2, .token_ids = encode(8, 4), .lora_name = "adapter-a"})}));
    REQUIRE(first.out.events_size() == 1);
    REQUIRE(second.out.events_size() == 1);
    CHECK(second.out.events(0).stored().cache_namespace() == "tenant-9");

    PoolIndex index({*ckf::bucket_count_for(1024)});
    const SourceKey source{42, 0};
    KvEventApplier events({kBlockSize, format.config.format});
    for (const auto* decoded : {&first, &second}) {
      const EventResult applied = events.apply(index, source, decoded->out.events(0));
      CHECK(applied.disposition == EventDisposition::kApplied);
      CHECK_FALSE(applied.error.has_value());
    }

    const std::vector<std::optional<std::vector<std::uint64_t>>> multimodal{
        std::nullopt, std::vector<std::uint64_t>{0x00000000deadbeef}, std::nullopt};
    hashing::BlockHashOptions options;
    options.kv_block_size = kBlockSize;
    options.format = format.config.format;
    options.seed = hashing::block_hash_seed("adapter-a", "tenant-9");
    options.multimodal = multimodal;
    const std::size_t covered = 12 + (eagle ? 1 : 0);
    const auto expected = hashing::sequence_hashes(hashing::block_hashes(std::span(tokens).first(covered), options));
    REQUIRE(expected.size() == 3);
    for (std::uint64_t canonical : expected) {
      CHECK(index.is_resident(canonical));
      CHECK(index.owner_count(canonical) == 1);
    }
    CHECK(index.lineage_entries(source) == 3);
    CHECK(index.unique_blocks() == 3);
  }
}

TEST_CASE("pushed token blocks: the largest block size under Eagle wants 2^32 tokens, not 0", "[events]") {
  PoolIndex index({*ckf::bucket_count_for(1024)});
  KvEventApplier events({std::numeric_limits<std::uint32_t>::max(), hashing::HashFormat::kEagle});
  ingest_v1::KvEvent event;
  auto* block = event.mutable_stored()->add_blocks();
  block->set_block_hash(1);
  block->mutable_tokens();  // a token block of no tokens
  const EventResult result = events.apply(index, SourceKey{1, 0}, event);
  CHECK(result.disposition == EventDisposition::kRejected);
  CHECK_THAT(result.detail, Catch::Contains("windows of 4294967296"));
  CHECK(index.unique_blocks() == 0);
}
