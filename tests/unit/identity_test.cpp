#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/blake3.hpp"
#include "core/identity.hpp"

using namespace kvrelay;
using identity::IdentityError;
using identity::Material;
using identity::Source;

namespace {

// An independent encoder of the hashed material of docs/protocol/pools.md#identity-derivation,
// so the library's framing, sorting and integer widths are checked against the documented text.
struct Encoder {
  std::string bytes;
  Encoder& u16(std::uint16_t v) {
    bytes.push_back(static_cast<char>(v & 0xFF));
    bytes.push_back(static_cast<char>(v >> 8));
    return *this;
  }
  Encoder& u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  Encoder& framed(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    bytes.append(s);
    return *this;
  }
  std::string digest_hex() const {
    const auto full = blake3::hash(std::string_view(bytes));
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string hex;
    for (std::size_t i = 0; i < 16; ++i) {
      hex.push_back(kDigits[full[i] >> 4]);
      hex.push_back(kDigits[full[i] & 15]);
    }
    return hex;
  }
};

identity::Digest cache_ok(std::string_view path, const Material& material, std::uint32_t block_size,
                          hashing::HashFormat format = hashing::HashFormat::kStandard) {
  const auto digest = identity::cache_semantics(path, material, block_size, format);
  REQUIRE(digest.has_value());
  return *digest;
}

identity::Digest routing_ok(std::string_view ns, std::string_view component, std::string_view endpoint,
                            const Material& material) {
  const auto digest = identity::routing_scope(ns, component, endpoint, material);
  REQUIRE(digest.has_value());
  return *digest;
}

IdentityError cache_error(const Material& material, std::uint32_t block_size = 512) {
  const auto digest = identity::cache_semantics("meta/llama", material, block_size, hashing::HashFormat::kStandard);
  REQUIRE_FALSE(digest.has_value());
  return digest.error();
}

IdentityError dc_error(const std::string& dc) {
  const auto id = identity::stable_dc_id(dc);
  REQUIRE_FALSE(id.has_value());
  return id.error();
}

IdentityError routing_error(const Material& material) {
  const auto digest = identity::routing_scope("prod", "router", "generate", material);
  REQUIRE_FALSE(digest.has_value());
  return digest.error();
}

}  // namespace

TEST_CASE("identity golden vectors: default cache semantics and routing scope", "[identity]") {
  const auto cache = cache_ok("meta/llama", {}, 512);
  CHECK(cache.hex() == "7d31eb9019357572470605f4a8be687e");
  CHECK(cache.source == Source::kDefaultDerived);

  const auto routing = routing_ok("prod", "router", "generate", {});
  CHECK(routing.hex() == "18270d3ba03effaec8d167ba02c7752d");
  CHECK(routing.source == Source::kDefaultDerived);
}

TEST_CASE("identity source numbers match proto IdentitySource and hash format versions", "[identity]") {
  CHECK(static_cast<int>(Source::kDefaultDerived) == 1);
  CHECK(static_cast<int>(Source::kExplicit) == 2);
  CHECK(identity::hash_format_version(hashing::HashFormat::kStandard) == 1);
  CHECK(identity::hash_format_version(hashing::HashFormat::kEagle) == 2);
}

TEST_CASE("identity material encoding follows the spec byte for byte", "[identity]") {
  SECTION("default cache semantics, eagle format") {
    Encoder e;
    e.framed("dynamo/indexer-cache-semantics/default/v1").u32(1).framed("org/model-7b").u32(16).u16(2);
    CHECK(cache_ok("org/model-7b", {}, 16, hashing::HashFormat::kEagle).hex() == e.digest_hex());
  }
  SECTION("explicit cache semantics: entries sorted by unsigned byte order") {
    // Byte order: "B" (0x42) < "Z" (0x5a) < "a" (0x61) < "\xc3\xa9" (é); a signed-char
    // comparison would put "é" first.
    const Material material = {{"a", "1"}, {"\xC3\xA9", "accent"}, {"Z", "zed"}, {"B", "bee"}};
    Encoder e;
    e.framed("dynamo/indexer-cache-semantics/explicit/v1").u32(4);
    e.framed("B").framed("bee").framed("Z").framed("zed").framed("a").framed("1");
    e.framed("\xC3\xA9").framed("accent");
    e.u32(4096).u16(1);
    const auto digest = cache_ok("ignored/path", material, 4096);
    CHECK(digest.hex() == e.digest_hex());
    CHECK(digest.source == Source::kExplicit);
  }
  SECTION("explicit routing scope") {
    const Material material = {{"tenant", "acme"}, {"region", "eu-west"}};
    Encoder e;
    e.framed("dynamo/indexer-routing-scope/explicit/v1").u32(2);
    e.framed("region").framed("eu-west").framed("tenant").framed("acme");
    const auto digest = routing_ok("ns", "comp", "ep", material);
    CHECK(digest.hex() == e.digest_hex());
    CHECK(digest.source == Source::kExplicit);
  }
  SECTION("default routing scope") {
    Encoder e;
    e.framed("dynamo/indexer-routing-scope/default/v1").u32(3).framed("ns").framed("comp").framed("ep");
    CHECK(routing_ok("ns", "comp", "ep", {}).hex() == e.digest_hex());
  }
}

TEST_CASE("identity explicit and default sources give different digests", "[identity]") {
  // Explicit material that names the same source path still differs from the default.
  const auto by_default = cache_ok("meta/llama", {}, 512);
  const auto by_explicit = cache_ok("meta/llama", {{"source_path", "meta/llama"}}, 512);
  CHECK(by_explicit.source == Source::kExplicit);
  CHECK(by_default.bytes != by_explicit.bytes);
  CHECK(by_default != by_explicit);

  const auto scope_default = routing_ok("prod", "router", "generate", {});
  const auto scope_explicit = routing_ok("prod", "router", "generate",
                                         {{"namespace", "prod"}, {"component", "router"}, {"endpoint", "generate"}});
  CHECK(scope_default.bytes != scope_explicit.bytes);

  // With explicit material the default inputs no longer matter...
  CHECK(cache_ok("other/path", {{"k", "v"}}, 512) == cache_ok("meta/llama", {{"k", "v"}}, 512));
  CHECK(routing_ok("a", "b", "c", {{"k", "v"}}) == routing_ok("x", "y", "z", {{"k", "v"}}));
  // ...but block size and hash format are always part of cache semantics.
  CHECK(cache_ok("p", {{"k", "v"}}, 512).bytes != cache_ok("p", {{"k", "v"}}, 1024).bytes);
  CHECK(cache_ok("p", {{"k", "v"}}, 512, hashing::HashFormat::kStandard).bytes !=
        cache_ok("p", {{"k", "v"}}, 512, hashing::HashFormat::kEagle).bytes);
  CHECK(cache_ok("meta/llama", {}, 512, hashing::HashFormat::kStandard).bytes !=
        cache_ok("meta/llama", {}, 512, hashing::HashFormat::kEagle).bytes);
}

TEST_CASE("identity framing separates field boundaries", "[identity]") {
  CHECK(routing_ok("ab", "c", "d", {}).bytes != routing_ok("a", "bc", "d", {}).bytes);
  CHECK(cache_ok("p", {{"ab", "c"}}, 512).bytes != cache_ok("p", {{"a", "bc"}}, 512).bytes);
}

TEST_CASE("identity explicit material is independent of entry order", "[identity]") {
  Material material = {{"model", "llama-3"}, {"quant", "fp8"}, {"tp", "4"}, {"adapter", "none"}};
  std::ranges::sort(material);
  const auto first_cache = cache_ok("p", material, 64);
  const auto first_route = routing_ok("n", "c", "e", material);
  std::set<std::string> seen_cache;
  do {
    CHECK(cache_ok("p", material, 64) == first_cache);
    CHECK(routing_ok("n", "c", "e", material) == first_route);
    seen_cache.insert(cache_ok("p", material, 64).hex());
  } while (std::ranges::next_permutation(material).found);
  CHECK(seen_cache.size() == 1);

  // The std::map helper gives the same digest.
  const std::map<std::string, std::string> as_map(material.begin(), material.end());
  CHECK(cache_ok("p", identity::to_material(as_map), 64) == first_cache);

  // A changed value changes the digest.
  material[0].second += "x";
  CHECK(cache_ok("p", material, 64).bytes != first_cache.bytes);
}

TEST_CASE("identity material limits are enforced with typed errors", "[identity]") {
  const std::string key128(128, 'k');
  const std::string value1024(1024, 'v');

  SECTION("bounds themselves are accepted") {
    CHECK(identity::cache_semantics("p", {{key128, value1024}}, 512, hashing::HashFormat::kStandard).has_value());
    Material thirty_two;
    for (int i = 0; i < 32; ++i) thirty_two.emplace_back("key" + std::to_string(i), "v");
    CHECK(identity::cache_semantics("p", thirty_two, 512, hashing::HashFormat::kStandard).has_value());
    CHECK(identity::routing_scope("n", "c", "e", thirty_two).has_value());
  }
  SECTION("empty key") {
    CHECK(cache_error({{"a", "1"}, {"", "2"}}) == IdentityError::kEmptyMaterialKey);
    CHECK(routing_error({{"", "2"}}) == IdentityError::kEmptyMaterialKey);
  }
  SECTION("key longer than 128 bytes (counted in UTF-8 bytes)") {
    CHECK(cache_error({{key128 + "k", "1"}}) == IdentityError::kMaterialKeyTooLong);
    CHECK(routing_error({{key128 + "k", "1"}}) == IdentityError::kMaterialKeyTooLong);
    // 64 two-byte characters = 128 bytes: fine; 65 = 130 bytes: too long.
    std::string accents;
    for (int i = 0; i < 64; ++i) accents += "\xC3\xA9";
    CHECK(identity::cache_semantics("p", {{accents, "1"}}, 512, hashing::HashFormat::kStandard).has_value());
    CHECK(cache_error({{accents + "\xC3\xA9", "1"}}) == IdentityError::kMaterialKeyTooLong);
  }
  SECTION("empty value") {
    CHECK(cache_error({{"a", ""}}) == IdentityError::kEmptyMaterialValue);
    CHECK(routing_error({{"a", "1"}, {"b", ""}}) == IdentityError::kEmptyMaterialValue);
  }
  SECTION("value longer than 1024 bytes") {
    CHECK(cache_error({{"a", value1024 + "v"}}) == IdentityError::kMaterialValueTooLong);
    CHECK(routing_error({{"a", value1024 + "v"}}) == IdentityError::kMaterialValueTooLong);
  }
  SECTION("more than 32 entries") {
    Material thirty_three;
    for (int i = 0; i < 33; ++i) thirty_three.emplace_back("key" + std::to_string(i), "v");
    CHECK(cache_error(thirty_three) == IdentityError::kTooManyMaterialEntries);
    CHECK(routing_error(thirty_three) == IdentityError::kTooManyMaterialEntries);
  }
  SECTION("duplicate keys, even with different values and not adjacent") {
    CHECK(cache_error({{"dup", "1"}, {"other", "2"}, {"dup", "3"}}) == IdentityError::kDuplicateMaterialKey);
    CHECK(routing_error({{"dup", "1"}, {"dup", "1"}}) == IdentityError::kDuplicateMaterialKey);
  }
  SECTION("zero block size, with default or explicit material") {
    CHECK(cache_error({}, 0) == IdentityError::kZeroBlockSize);
    CHECK(cache_error({{"k", "v"}}, 0) == IdentityError::kZeroBlockSize);
  }
}

TEST_CASE("identity errors have distinct descriptions", "[identity]") {
  const std::vector<IdentityError> all = {IdentityError::kEmptyMaterialKey,
                                          IdentityError::kMaterialKeyTooLong,
                                          IdentityError::kEmptyMaterialValue,
                                          IdentityError::kMaterialValueTooLong,
                                          IdentityError::kTooManyMaterialEntries,
                                          IdentityError::kDuplicateMaterialKey,
                                          IdentityError::kZeroBlockSize,
                                          IdentityError::kInvalidDcId,
                                          IdentityError::kFieldTooLong};
  std::set<std::string_view> texts;
  for (const auto error : all) {
    CHECK_FALSE(identity::to_string(error).empty());
    texts.insert(identity::to_string(error));
  }
  CHECK(texts.size() == all.size());
}

TEST_CASE("identity stable dc_id", "[identity]") {
  SECTION("spec example") {
    const auto id = identity::stable_dc_id("dc-a");
    REQUIRE(id.has_value());
    CHECK(*id == 0x04f110c98b1bfc48ULL);
  }
  SECTION("unframed tag, framed id, first 8 bytes little-endian") {
    for (const std::string_view dc : {"dc-a", "us-east-1", "dc a", "r\xC3\xA9gion"}) {
      CAPTURE(dc);
      Encoder e;
      e.bytes = "dynamo/indexer-dc/v1";
      e.framed(dc);
      const auto full = blake3::hash(std::string_view(e.bytes));
      std::uint64_t expected = 0;
      for (int i = 7; i >= 0; --i) expected = (expected << 8) | full[static_cast<std::size_t>(i)];
      const auto id = identity::stable_dc_id(dc);
      REQUIRE(id.has_value());
      CHECK(*id == expected);
    }
    CHECK(identity::stable_dc_id("dc-a") != identity::stable_dc_id("dc-b"));
  }
  SECTION("empty or surrounding whitespace is rejected") {
    const std::vector<std::string> whitespace = {" ",
                                                 "\t",
                                                 "\n",
                                                 "\v",
                                                 "\f",
                                                 "\r",
                                                 "\xC2\x85",
                                                 "\xC2\xA0",
                                                 "\xE1\x9A\x80",
                                                 "\xE2\x80\x80",
                                                 "\xE2\x80\x81",
                                                 "\xE2\x80\x85",
                                                 "\xE2\x80\x8A",
                                                 "\xE2\x80\xA8",
                                                 "\xE2\x80\xA9",
                                                 "\xE2\x80\xAF",
                                                 "\xE2\x81\x9F",
                                                 "\xE3\x80\x80"};
    CHECK(dc_error("") == IdentityError::kInvalidDcId);
    for (const auto& ws : whitespace) {
      CAPTURE(ws);
      CHECK(dc_error(ws + "dc-a") == IdentityError::kInvalidDcId);
      CHECK(dc_error("dc-a" + ws) == IdentityError::kInvalidDcId);
      CHECK(dc_error(ws) == IdentityError::kInvalidDcId);
      // Inside the id, whitespace is just content.
      CHECK(identity::stable_dc_id("dc" + ws + "a").has_value());
    }
    CHECK(dc_error("dc-\xFF") == IdentityError::kInvalidDcId);  // not UTF-8, as upstream's String cannot be
  }
  SECTION("non-whitespace non-ASCII at the ends is accepted") {
    CHECK(identity::stable_dc_id("\xC3\xA9t\xC3\xA9").has_value());  // été
    CHECK(identity::stable_dc_id("dc-\xE2\x80\x90").has_value());    // U+2010 hyphen
  }
}
