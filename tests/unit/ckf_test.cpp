#include <catch2/catch.hpp>

#include <optional>
#include <random>
#include <set>

#include "core/ckf.hpp"
#include "tests/unit/vectors.hpp"

using namespace kvrelay;

TEST_CASE("bucket counts follow the 80 % sizing rule", "[ckf]") {
  for (const auto& v : test::vector_cases("bucket_counts")) {
    const auto count = ckf::bucket_count_for(v["expected_blocks"].get<std::uint64_t>());
    REQUIRE(count.has_value());
    CHECK(*count == v["bucket_count"].get<std::uint64_t>());
  }
  CHECK(ckf::bucket_count_for(0).error() == ckf::ConfigError::kExpectedCapacityZero);
  // One more block would need 2^25 buckets, which CBI1 cannot carry.
  CHECK(ckf::bucket_count_for(ckf::kMaxExpectedBlocks + 1).error() == ckf::ConfigError::kCapacityOverflow);
}

TEST_CASE("addressing reproduces the reference probes", "[ckf]") {
  for (const auto& v : test::vector_cases("addressing")) {
    const ckf::Addressing addressing(test::u64(v["seed"]), v["bucket_count"].get<std::uint64_t>());
    const ckf::Probe probe = addressing.probe(test::u64(v["hash"]));
    CHECK(probe.fingerprint == v["fingerprint"].get<std::uint16_t>());
    CHECK(probe.bucket_a == v["bucket_a"].get<std::uint64_t>());
    CHECK(probe.bucket_b == v["bucket_b"].get<std::uint64_t>());
    // alternate() is an involution and never returns its input.
    CHECK(addressing.alternate(probe.bucket_b, probe.fingerprint) == probe.bucket_a);
    CHECK(probe.bucket_a != probe.bucket_b);
  }
}

TEST_CASE("bucket word layout matches the protocol README", "[ckf]") {
  const std::uint64_t word = 0x0001ABCD00001234;
  CHECK(ckf::slot(word, 0) == 0x1234);
  CHECK(ckf::slot(word, 1) == 0);
  CHECK(ckf::slot(word, 2) == 0xABCD);
  CHECK(ckf::slot(word, 3) == 1);
  CHECK(ckf::first_slot(word, 0) == 1);
  CHECK(ckf::with_slot(word, 1, 0x7777) == 0x0001ABCD77771234);
}

TEST_CASE("SWAR membership agrees with the scalar slot loop", "[ckf]") {
  ckf::SplitMix64 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t word = rng.next();
    if (i % 3 == 0) word &= 0xFFFF0000FFFF0000;  // empty slots too
    const auto fingerprint = static_cast<std::uint16_t>(i % 7 == 0 ? ckf::slot(word, i % 4) : rng.next());
    if (fingerprint == 0) continue;
    CHECK(ckf::bucket_holds(word, fingerprint) == (ckf::first_slot(word, fingerprint) >= 0));
  }
}

TEST_CASE("the relocation RNG reproduces its reference stream", "[ckf]") {
  const auto& v = test::vectors().at("rng");
  const std::uint64_t initial = ckf::lane_rng_seed(test::u64(v["seed"]), 0);
  CHECK(initial == test::u64(v["lane0_initial_state"]));
  ckf::SplitMix64 rng(initial);
  for (const auto& expected : test::vector_cases(v, "first_outputs")) CHECK(rng.next() == test::u64(expected));
}

TEST_CASE("the tiny-table trace: placement, relocation, rollback, removal", "[ckf]") {
  const auto& v = test::vectors().at("cuckoo_tiny_table");
  ckf::Filter filter(v["bucket_count"].get<std::uint64_t>(), test::u64(v["seed"]), v["max_kicks"].get<std::uint32_t>());
  REQUIRE(filter.rng_state() == test::u64(v["initial_rng_state"]));
  for (const auto& [hash, probe] : test::vector_cases(v, "probes").items()) {
    const ckf::Probe p = filter.addressing().probe(std::stoull(hash));
    CHECK(std::vector<std::uint64_t>{p.fingerprint, p.bucket_a, p.bucket_b} == probe.get<std::vector<std::uint64_t>>());
  }
  std::vector<ckf::BucketWrite> writes;
  std::set<std::uint64_t> attempted;
  for (const auto& step : test::vector_cases(v, "steps")) {
    const std::uint64_t hash = step["hash"].get<std::uint64_t>();
    INFO(step["op"].get<std::string>() << " " << hash);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> touched;
    bool ok = false;
    if (step["op"] == "remove") {
      const auto write = filter.remove(hash);
      ok = write.has_value();
      if (write) touched.emplace_back(write->bucket, write->before);
    } else {
      // The trace retries an already attempted hash without relocation (max_kicks 0).
      const bool retry = !attempted.insert(hash).second;
      const auto outcome = retry ? filter.insert_with_kicks(hash, 0, writes) : filter.insert(hash, writes);
      ok = outcome == ckf::InsertOutcome::kInserted;
      for (const auto& w : writes) touched.emplace_back(w.bucket, w.before);
    }
    CHECK(ok == step["ok"].get<bool>());
    if (ok) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> expected;
      for (const auto& t : step["touched"]) expected.emplace_back(t[0].get<std::uint64_t>(), test::u64(t[1]));
      CHECK(touched == expected);
    }
    CHECK(filter.rng_state() == test::u64(step["rng_state_after"]));
    CHECK(std::vector<std::uint64_t>(filter.words().begin(), filter.words().end()) ==
          test::u64_list(step["words_after"]));
  }
  for (const auto& [hash, present] : test::vector_cases(v, "contains_after").items()) {
    CHECK(filter.contains(std::stoull(hash)) == present.get<bool>());
  }
}

TEST_CASE("prefix hits count leading resident hashes only", "[ckf]") {
  ckf::Filter filter(1024);
  std::vector<ckf::BucketWrite> writes;
  const std::vector<std::uint64_t> prompt{11, 22, 33, 44, 55};
  for (std::uint64_t h : {11, 22, 33, 55}) REQUIRE(filter.insert(h, writes) == ckf::InsertOutcome::kInserted);
  CHECK(filter.prefix_hits(prompt) == 3);
  CHECK(filter.prefix_hits(std::span(prompt).subspan(4)) == 1);
  CHECK(filter.prefix_hits({}) == 0);
  REQUIRE(filter.remove(11).has_value());
  CHECK(filter.prefix_hits(prompt) == 0);
}

TEST_CASE("occupied_in counts the non-empty 16-bit slots of a bucket word", "[ckf]") {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 10000; ++i) {
    std::uint64_t word = rng();
    for (unsigned s = 0; s < ckf::kSlotsPerBucket; ++s) {
      if (rng() % 2)
        word = ckf::with_slot(word, s, static_cast<std::uint16_t>(rng() % 3 == 0 ? 1u << (rng() % 16) : 0));
    }
    unsigned expected = 0;
    for (unsigned s = 0; s < ckf::kSlotsPerBucket; ++s) expected += ckf::slot(word, s) != 0;
    REQUIRE(ckf::occupied_in(word) == expected);
  }
}

namespace {

// The alternate bucket as the format defines it, hashed afresh (docs/protocol/cbi1-ckf.md#addressing).
std::uint64_t alternate_by_formula(std::uint64_t seed, std::uint64_t bucket_count, std::uint64_t bucket,
                                   std::uint16_t fingerprint) {
  std::uint8_t bytes[2];
  store_le16(bytes, fingerprint);
  std::uint64_t delta = xxh3(bytes, sizeof bytes, seed ^ ckf::kGolden) & (bucket_count - 1);
  if (delta == 0) delta = 1;
  return bucket ^ delta;
}

}  // namespace

TEST_CASE("the precomputed alternate offsets equal the formula for every fingerprint", "[ckf][addressing]") {
  for (std::uint64_t bucket_count : {std::uint64_t{2}, std::uint64_t{1} << 10, ckf::kMaxBucketCount}) {
    const ckf::Addressing addressing(ckf::kDefaultSeed, bucket_count);
    // One check per size, naming the first fingerprint that disagrees: 65 535 CHECKs would
    // dominate the run.
    std::optional<std::uint32_t> disagreeing;
    for (std::uint32_t fingerprint = 1; fingerprint <= 0xFFFF && !disagreeing; ++fingerprint) {
      const auto fp = static_cast<std::uint16_t>(fingerprint);
      const std::uint64_t bucket = (fingerprint * 0x9E3779B9u) & (bucket_count - 1);
      if (addressing.alternate(bucket, fp) != alternate_by_formula(ckf::kDefaultSeed, bucket_count, bucket, fp)) {
        disagreeing = fingerprint;
      }
    }
    INFO(bucket_count << " buckets");
    CHECK(disagreeing.value_or(0) == 0u);  // else the first fingerprint that disagrees
  }
}

TEST_CASE("alternate offsets: random seeds and sizes agree with the formula, tables are shared per seed",
          "[ckf][addressing]") {
  std::mt19937_64 rng(27);
  for (int round = 0; round < 40; ++round) {  // more seeds than the table cache keeps
    const std::uint64_t seed = rng();
    const std::uint64_t bucket_count = std::uint64_t{1} << (1 + rng() % 24);
    const ckf::Addressing addressing(seed, bucket_count);
    for (int i = 0; i < 2000; ++i) {
      const auto fp = static_cast<std::uint16_t>(rng() | 1);
      const std::uint64_t bucket = rng() & (bucket_count - 1);
      REQUIRE(addressing.alternate(bucket, fp) == alternate_by_formula(seed, bucket_count, bucket, fp));
    }
  }
  CHECK(ckf::alternate_offsets(ckf::kDefaultSeed) == ckf::alternate_offsets(ckf::kDefaultSeed));
}
