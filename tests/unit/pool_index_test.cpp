#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "core/cbi1.hpp"
#include "core/pool_index.hpp"
#include "core/token_hashing.hpp"
#include "tests/unit/vectors.hpp"

using namespace kvrelay;

namespace {

std::vector<BucketImage> sorted(std::vector<BucketImage> images) {
  std::sort(images.begin(), images.end(), [](auto& a, auto& b) { return a.bucket < b.bucket; });
  return images;
}

std::optional<EventError> apply_reference_event(PoolIndex& index, const nlohmann::json& event) {
  const SourceKey source{event["member"][0].get<std::uint64_t>(), event["member"][1].get<std::uint32_t>()};
  const auto& args = event["args"];
  if (event["op"] == "store") {
    std::vector<StoredBlockRef> blocks;
    for (const auto& b : args["blocks"]) blocks.push_back({test::u64(b[0]), test::u64(b[1])});
    std::optional<std::uint64_t> parent;
    if (args.contains("parent")) parent = test::u64(args["parent"]);
    return index.store(source, parent, std::nullopt, blocks);
  }
  if (event["op"] == "remove") return index.remove(source, test::u64_list(args["externals"]));
  return index.clear(source);
}

}  // namespace

TEST_CASE("the producer example reproduces owners, deltas and CBI1 bytes", "[pool]") {
  const auto& v = test::vectors().at("producer_example");
  const auto& config = v["config"];
  const std::uint64_t bucket_count = *ckf::bucket_count_for(config["expected_blocks"].get<std::uint64_t>());
  REQUIRE(bucket_count == config["bucket_count"].get<std::uint64_t>());
  PoolIndex index({bucket_count, test::u64(config["seed"]), config["max_kicks"].get<std::uint32_t>()});
  const auto format = *cbi1::FilterFormat::make(test::u64(config["seed"]), bucket_count);
  const std::uint64_t dc_id = config["dc_id"].get<std::uint64_t>();

  // Canonical hashes of the token prefix equal the query-side sequence hashes.
  hashing::BlockHashOptions options;
  options.kv_block_size = v["kv_block_size"].get<std::uint32_t>();
  const auto local = hashing::block_hashes(v["tokens"].get<std::vector<std::uint32_t>>(), options);
  CHECK(local == test::u64_list(v["local_hashes"]));
  CHECK(hashing::sequence_hashes(local) == test::u64_list(v["canonical_hashes"]));

  const auto& initial = v["initial_snapshot"];
  std::uint64_t sequence = initial["sequence"].get<std::uint64_t>();
  const auto chunks = cbi1::encode_snapshot(format, dc_id, sequence, index.filter().words());
  REQUIRE(chunks.has_value());
  CHECK(test::to_hex(chunks->front()) == initial["chunks_hex"][0].get<std::string>());

  for (const auto& event : test::vector_cases(v, "events")) {
    INFO(event.dump());
    const auto error = apply_reference_event(index, event);
    CHECK((error ? std::string(to_string(*error)) : "null") ==
          (event["error"].is_null() ? "null" : event["error"].get<std::string>()));
    for (const auto& [hash, count] : event["owners_after"].items()) {
      CHECK(index.owner_count(test::u64(hash)) == count.get<std::uint32_t>());
    }
    CHECK(index.unique_blocks() == event["owners_after"].size());

    const auto images = index.drain_publication();
    if (!event.contains("delta")) {
      CHECK(images.empty());
      continue;
    }
    const auto& delta = event["delta"];
    std::vector<BucketImage> expected;
    for (const auto& image : delta["images"]) expected.push_back({image[0].get<std::uint64_t>(), test::u64(image[1])});
    // Image order inside a clear follows upstream hash-map iteration: any order is valid.
    CHECK(sorted(images) == sorted(expected));
    REQUIRE(delta["base_sequence"].get<std::uint64_t>() == sequence);
    // The frame's bytes, for the reference's order of the same images; the index's own frame
    // decodes to those images in its order.
    const auto frame = cbi1::encode_delta(format, dc_id, sequence, sequence + 1, expected);
    REQUIRE(frame.has_value());
    CHECK(test::to_hex(*frame) == delta["cbi1_hex"].get<std::string>());
    const auto own = cbi1::encode_delta(format, dc_id, sequence, sequence + 1, images);
    REQUIRE(own.has_value());
    const auto decoded = cbi1::decode(*own, format);
    REQUIRE(decoded.has_value());
    REQUIRE(std::holds_alternative<cbi1::DecodedDelta>(*decoded));
    CHECK(std::get<cbi1::DecodedDelta>(*decoded).images == images);
    ++sequence;
  }
  CHECK(std::all_of(index.filter().words().begin(), index.filter().words().end(),
                    [](std::uint64_t w) { return w == 0; }));
}

TEST_CASE("lineage errors reject the whole event and change nothing", "[pool]") {
  PoolIndex index({64});
  const SourceKey a{1, 0};
  const std::vector<StoredBlockRef> chain{{100, 0xA}, {101, 0xB}};
  REQUIRE_FALSE(index.store(a, std::nullopt, std::nullopt, chain));
  index.drain_publication();

  SECTION("unknown parent") {
    const std::vector<StoredBlockRef> child{{102, 0xC}};
    CHECK(index.store(a, 999, std::nullopt, child) == EventError::kParentBlockNotFound);
  }
  SECTION("non-zero start position without a parent") {
    const std::vector<StoredBlockRef> block{{103, 0xD}};
    CHECK(index.store(a, std::nullopt, 4, block) == EventError::kInvalidBlockSequence);
  }
  SECTION("an engine id remapped to another hash, even after valid blocks") {
    const std::vector<StoredBlockRef> remap{{200, 0xE}, {100, 0xF}};
    CHECK(index.store(a, std::nullopt, std::nullopt, remap) == EventError::kInvalidBlockSequence);
    CHECK(index.lineage_entries(a) == 2);
  }
  SECTION("one engine id twice in one event with different hashes") {
    const std::vector<StoredBlockRef> twice{{300, 0x1}, {300, 0x2}};
    CHECK(index.store(a, std::nullopt, std::nullopt, twice) == EventError::kInvalidBlockSequence);
  }
  SECTION("a new source's event, rejected after it mapped a held block and a new one") {
    const SourceKey b{2, 0};
    const std::vector<StoredBlockRef> late_remap{{400, 0xA}, {401, 0x77}, {401, 0x78}};
    CHECK(index.store(b, std::nullopt, std::nullopt, late_remap) == EventError::kInvalidBlockSequence);
    CHECK(index.lineage_entries(b) == 0);
    CHECK(index.owner_count(0xA) == 1);
  }
  CHECK(index.unique_blocks() == 2);
  CHECK(index.lineage_entries(a) == 2);
  CHECK_FALSE(index.publication_pending());
}

TEST_CASE("an empty store naming an unknown parent is a no-op, not an error", "[pool]") {
  PoolIndex index({64});
  REQUIRE_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, std::vector<StoredBlockRef>{{7, 0x77}}));
  index.drain_publication();
  CHECK_FALSE(index.store({1, 0}, 12345, std::nullopt, {}));
  CHECK(index.unique_blocks() == 1);
  CHECK(index.lineage_entries({1, 0}) == 1);
  CHECK_FALSE(index.publication_pending());
}

TEST_CASE("owners keep one fingerprint, the last owner removes it", "[pool]") {
  PoolIndex index({64});
  const std::vector<StoredBlockRef> root{{7, 0x77}};
  REQUIRE_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, root));
  REQUIRE_FALSE(index.store({2, 0}, std::nullopt, std::nullopt, root));
  CHECK(index.owner_count(0x77) == 2);
  CHECK(index.filter().occupied_slots() == 1);
  const std::vector<std::uint64_t> ids{7};
  REQUIRE_FALSE(index.remove({1, 0}, ids));
  CHECK(index.filter().contains(0x77));
  REQUIRE_FALSE(index.remove({2, 0}, ids));
  CHECK_FALSE(index.filter().contains(0x77));
  CHECK(index.unique_blocks() == 0);
  REQUIRE_FALSE(index.remove({2, 0}, ids));  // unknown now: counted, harmless
  CHECK(index.unknown_removals() == 1);
}

TEST_CASE("a store past the pool's live-block limit is rejected whole as PoolFull", "[pool]") {
  PoolIndex index({64, ckf::kDefaultSeed, ckf::kDefaultMaxKicks, 20});
  auto roots = [](std::uint64_t first, std::uint64_t count) {
    std::vector<StoredBlockRef> blocks;
    for (std::uint64_t id = first; id < first + count; ++id) blocks.push_back({id, 0x1000 + id});
    return blocks;
  };
  REQUIRE_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, roots(0, 16)));
  const std::vector<std::uint64_t> words(index.filter().words().begin(), index.filter().words().end());
  const std::size_t touched = index.touched_buckets();
  CHECK(index.store({1, 0}, std::nullopt, std::nullopt, roots(16, 8)) == EventError::kPoolFull);
  CHECK(index.unique_blocks() == 16);
  CHECK(index.lineage_entries({1, 0}) == 16);
  CHECK(std::ranges::equal(index.filter().words(), words));
  CHECK(index.touched_buckets() == touched);
  // Blocks the pool already holds count once: another source may map them, and the limit is
  // reached exactly.
  CHECK_FALSE(index.store({2, 0}, std::nullopt, std::nullopt, roots(0, 16)));
  CHECK_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, roots(16, 4)));
  CHECK(index.unique_blocks() == 20);
  CHECK(index.store({2, 0}, std::nullopt, std::nullopt, roots(100, 1)) == EventError::kPoolFull);
  // An engine id mapped to two hashes is reported first, wherever it is in the event.
  auto full_then_remapped = roots(100, 1);
  full_then_remapped.push_back({100, 0x2000});
  CHECK(index.store({2, 0}, std::nullopt, std::nullopt, full_then_remapped) == EventError::kInvalidBlockSequence);
  CHECK(index.unique_blocks() == 20);
  CHECK(index.lineage_entries({2, 0}) == 16);
  // Removing a block's last owner makes room again.
  const std::vector<std::uint64_t> gone{19};
  REQUIRE_FALSE(index.remove({1, 0}, gone));
  CHECK_FALSE(index.store({2, 0}, std::nullopt, std::nullopt, roots(100, 1)));
  CHECK(index.unique_blocks() == 20);
}

TEST_CASE("a rejected event leaves nothing later events can see, the owner ids it took included", "[pool]") {
  // A re-layout places owners in id order, so two indexes whose owners took different ids lay
  // their filters out differently.
  auto chain = [](std::uint64_t first, std::uint64_t count) {
    std::vector<StoredBlockRef> blocks;
    for (std::uint64_t id = first; id < first + count; ++id) blocks.push_back({id, id * 0x9E3779B97F4A7C15ULL});
    return blocks;
  };
  auto rejected = chain(1000, 40);
  rejected.push_back({1000, 1});  // its first engine id again, now with another hash
  PoolIndex with_rejection({64});
  PoolIndex without({64});
  for (PoolIndex* index : {&with_rejection, &without}) {
    REQUIRE_FALSE(index->store({1, 0}, std::nullopt, std::nullopt, chain(0, 100)));
    REQUIRE_FALSE(index->remove({1, 0}, std::vector<std::uint64_t>{10, 20, 30}));  // freed ids to reuse
    if (index == &with_rejection) {
      REQUIRE(index->store({2, 0}, std::nullopt, std::nullopt, rejected) == EventError::kInvalidBlockSequence);
    }
    REQUIRE_FALSE(index->store({1, 0}, std::nullopt, std::nullopt, chain(2000, 100)));
    index->relayout(64);
  }
  CHECK(with_rejection.unique_blocks() == 197);
  CHECK(with_rejection.lineage_entries({2, 0}) == 0);
  CHECK(std::ranges::equal(with_rejection.filter().words(), without.filter().words()));
}

TEST_CASE("a re-offered block retries a capacity omission without relocation", "[pool]") {
  // Two buckets of four slots hold eight fingerprints at most.
  PoolIndex index({2, ckf::kDefaultSeed, 4});
  std::vector<StoredBlockRef> blocks;
  for (std::uint64_t i = 1; i <= 12; ++i) blocks.push_back({i, i * 0x1000193});
  const SourceKey source{1, 0};
  for (const auto& block : blocks) index.store(source, std::nullopt, std::nullopt, std::span(&block, 1));
  CHECK(index.capacity_failures() == 4);
  CHECK(index.unique_blocks() == 12);
  const auto omitted =
      std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) { return !index.is_resident(b.local_hash); });
  REQUIRE(omitted != blocks.end());
  // Free a slot, then re-offer the omitted block under its known engine id.
  const auto resident =
      std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) { return index.is_resident(b.local_hash); });
  const std::vector<std::uint64_t> removed{resident->engine_id};
  REQUIRE_FALSE(index.remove(source, removed));
  REQUIRE_FALSE(index.store(source, std::nullopt, std::nullopt, std::span(&*omitted, 1)));
  CHECK(index.is_resident(omitted->local_hash));
  CHECK(index.owner_count(omitted->local_hash) == 1);  // a re-offer adds no owner
}

TEST_CASE("net-reverted buckets are not published", "[pool]") {
  PoolIndex index({64});
  const std::vector<StoredBlockRef> block{{5, 0x55}};
  REQUIRE_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, block));
  REQUIRE_FALSE(index.clear({1, 0}));
  CHECK(index.drain_publication().empty());
}

TEST_CASE("a re-layout places every live block, omitted ones included, and keeps the lineage", "[pool][relayout]") {
  PoolIndex index({2, ckf::kDefaultSeed, 4});  // eight slots
  const SourceKey source{1, 0};
  std::vector<StoredBlockRef> blocks;
  for (std::uint64_t i = 1; i <= 40; ++i) blocks.push_back({i, i * 0x1000193});
  for (const auto& block : blocks) index.store(source, std::nullopt, std::nullopt, std::span(&block, 1));
  REQUIRE(index.omitted_blocks() == 32);
  index.drain_publication();

  CHECK(index.relayout(64) == 0);
  CHECK(index.filter().bucket_count() == 64);
  CHECK(index.omitted_blocks() == 0);
  CHECK(index.unique_blocks() == 40);
  CHECK(index.filter().occupied_slots() == 40);
  CHECK_FALSE(index.publication_pending());  // the new layout goes out as a snapshot
  for (const auto& block : blocks) CHECK(index.filter().contains(block.local_hash));
  CHECK(index.lineage_entries(source) == 40);

  // Lineage still resolves engine ids: removing one clears its fingerprint from the new layout.
  const std::vector<std::uint64_t> first{blocks[0].engine_id};
  REQUIRE_FALSE(index.remove(source, first));
  CHECK_FALSE(index.is_resident(blocks[0].local_hash));
  CHECK(index.filter().occupied_slots() == 39);
  CHECK(index.publication_pending());
}

TEST_CASE("a re-layout too small for the live blocks counts what it could not place", "[pool][relayout]") {
  PoolIndex index({64});
  const SourceKey source{1, 0};
  for (std::uint64_t i = 1; i <= 20; ++i) {
    const StoredBlockRef block{i, i * 0x9E3779B97F4A7C15ULL};
    REQUIRE_FALSE(index.store(source, std::nullopt, std::nullopt, std::span(&block, 1)));
  }
  CHECK(index.relayout(2) == 12);
  CHECK(index.omitted_blocks() == 12);
  CHECK(index.capacity_failures() == 12);
  CHECK(index.filter().occupied_slots() == 8);
}

TEST_CASE("a long event resolves its blocks as a short one does, past the scratch lists' scan limit", "[pool]") {
  PoolIndex index({1024});
  const SourceKey a{1, 0};
  std::vector<StoredBlockRef> chain;
  for (std::uint64_t i = 0; i < 3 * IndexedList::kScanLimit; ++i) chain.push_back({1000 + i, 0x100 + i});

  SECTION("an engine id repeated late, with another hash, rejects the whole event") {
    auto repeated = chain;
    repeated.back().engine_id = chain[5].engine_id;
    CHECK(index.store(a, std::nullopt, std::nullopt, repeated) == EventError::kInvalidBlockSequence);
    CHECK(index.unique_blocks() == 0);
    CHECK(index.lineage_entries(a) == 0);
  }
  SECTION("stored, then offered again: every block once") {
    REQUIRE_FALSE(index.store(a, std::nullopt, std::nullopt, chain));
    CHECK(index.unique_blocks() == chain.size());
    CHECK(index.lineage_entries(a) == chain.size());
    REQUIRE_FALSE(index.store(a, std::nullopt, std::nullopt, chain));
    CHECK(index.unique_blocks() == chain.size());
    CHECK(index.lineage_entries(a) == chain.size());
  }
}

TEST_CASE("a pool expecting its capacity makes room once and holds the same as one that grows", "[pool][tables]") {
  constexpr std::uint64_t kBlocks = 20'000;
  const std::uint64_t buckets = *ckf::bucket_count_for(kBlocks);
  PoolIndex growing(PoolIndexConfig{buckets});
  PoolIndexConfig expecting_config{buckets};
  expecting_config.expected = {kBlocks, {{{1, 0}, kBlocks}, {{2, 0}, kBlocks}}};
  PoolIndex expecting(expecting_config);
  CHECK(growing.table_rebuilds() == 0);
  CHECK(expecting.table_rebuilds() == 1);  // the owner index, made room for at once
  CHECK(expecting.table_bytes() >= growing.table_bytes() + kBlocks * 5);
  // A source whose first event is rejected takes no room: one engine id for two blocks.
  const std::size_t made_room = expecting.table_bytes();
  const std::vector<StoredBlockRef> rejected{{5, 1}, {5, 2}};
  REQUIRE(expecting.store({2, 0}, std::nullopt, std::nullopt, rejected) == EventError::kInvalidBlockSequence);
  CHECK(expecting.table_bytes() < made_room + 4096);  // the slab page its owners took, no lineage
  CHECK(expecting.table_rebuilds() == 1);

  std::size_t after_first_store = 0;
  for (std::uint64_t event = 0; event < kBlocks / 16; ++event) {
    std::vector<StoredBlockRef> blocks;
    for (std::uint64_t b = 0; b < 16; ++b) {
      const std::uint64_t id = event * 16 + b + 1;
      blocks.push_back({id * 0x9E3779B97F4A7C15ULL, id});
    }
    REQUIRE_FALSE(growing.store({1, 0}, std::nullopt, std::nullopt, blocks).has_value());
    REQUIRE_FALSE(expecting.store({1, 0}, std::nullopt, std::nullopt, blocks).has_value());
    if (event == 0) after_first_store = expecting.table_rebuilds();  // and the source's lineage
  }
  CHECK(expecting.table_rebuilds() == after_first_store);  // no table grew on the way
  CHECK(growing.table_rebuilds() > 20);
  CHECK(expecting.unique_blocks() == kBlocks);
  CHECK(expecting.unique_blocks() == growing.unique_blocks());
  expecting.drain_publication();
  growing.drain_publication();
  CHECK(expecting.published_digest() == growing.published_digest());
  // No more memory than the grown tables at this size, give or take where growth left them.
  CHECK(expecting.table_bytes() <= growing.table_bytes() * 5 / 4);
}
