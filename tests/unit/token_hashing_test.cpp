#include <catch2/catch.hpp>

#include "core/token_hashing.hpp"
#include "core/xxh3.hpp"
#include "tests/unit/vectors.hpp"

using namespace kvrelay;

TEST_CASE("salt seeds reproduce the reference vectors", "[hashing]") {
  for (const auto& v : test::vector_cases("salt_seeds")) {
    const std::string lora = v["lora_name"].is_null() ? "" : v["lora_name"].get<std::string>();
    const std::string ns = v["cache_namespace"].is_null() ? "" : v["cache_namespace"].get<std::string>();
    CHECK(hashing::block_hash_seed(lora, ns) == test::u64(v["seed"]));
  }
}

TEST_CASE("token block hashes and sequence hashes reproduce the reference vectors", "[hashing]") {
  for (const auto& v : test::vector_cases("token_block_hashes")) {
    const auto tokens = v["tokens"].get<std::vector<std::uint32_t>>();
    std::vector<std::optional<std::vector<std::uint64_t>>> multimodal;
    if (v.contains("mm_hashes")) {
      for (const auto& entry : v["mm_hashes"]) {
        if (entry.is_null())
          multimodal.emplace_back();
        else
          multimodal.emplace_back(entry.get<std::vector<std::uint64_t>>());
      }
    }
    const std::string lora = v.value("lora_name", std::string{});
    const std::string ns = v.value("cache_namespace", std::string{});
    const std::uint64_t seed = hashing::block_hash_seed(lora, ns);
    REQUIRE(seed == test::u64(v["seed"]));
    hashing::BlockHashOptions options;
    options.kv_block_size = v["kv_block_size"].get<std::uint32_t>();
    options.format = v.value("eagle", false) ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard;
    options.seed = seed;
    options.multimodal = multimodal;
    const auto local = hashing::block_hashes(tokens, options);
    CHECK(local == test::u64_list(v["block_hashes"]));
    CHECK(hashing::sequence_hashes(local) == test::u64_list(v["sequence_hashes"]));
  }
}

TEST_CASE("sequence chains reproduce the reference vectors", "[hashing]") {
  for (const auto& v : test::vector_cases("sequence_chains")) {
    CHECK(hashing::sequence_hashes(test::u64_list(v["local"])) == test::u64_list(v["sequence"]));
  }
}

TEST_CASE("upstream literals: block hash of 'test data' and the pinned chain", "[hashing]") {
  const std::string data = "test data";
  CHECK(xxh3(data.data(), data.size(), 1337) == 13226331709069118873ULL);
  const std::vector<std::uint64_t> local{0x0123456789ABCDEF, 0x1111222233334444, 0xDEADBEEFCAFEBABE};
  CHECK(hashing::sequence_hashes(local) ==
        std::vector<std::uint64_t>{0x0123456789ABCDEF, 0x98E7E55F299CF592, 0x65D53B99C5252D19});
}
