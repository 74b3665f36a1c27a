#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/blake3.hpp"
#include "tests/skip.hpp"
#include "tests/unit/vectors.hpp"

using namespace kvrelay;

namespace {

// tests/data/blake3_vectors.json: the official BLAKE3 test vectors
// (BLAKE3-team/BLAKE3, test_vectors/test_vectors.json).
const nlohmann::json& official() {
  static const nlohmann::json parsed = [] {
    std::ifstream in(std::string(KVRELAY_TEST_DATA_DIR) + "/blake3_vectors.json");
    if (!in) throw std::runtime_error("cannot open tests/data/blake3_vectors.json");
    return nlohmann::json::parse(in);
  }();
  return parsed;
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> bytes(hex.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return bytes;
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const std::uint8_t b : bytes) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

// The official input: byte i is i % 251.
std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> input(n);
  for (std::size_t i = 0; i < n; ++i) input[i] = static_cast<std::uint8_t>(i % 251);
  return input;
}

blake3::Key official_key() {
  const auto text = official()["key"].get<std::string>();
  REQUIRE(text.size() == blake3::kKeyLen);
  blake3::Key key{};
  std::copy(text.begin(), text.end(), key.begin());
  return key;
}

std::string official_context() { return official()["context_string"].get<std::string>(); }

enum class Mode { kHash, kKeyed, kDeriveKey };

blake3::Hasher make_hasher(Mode mode) {
  switch (mode) {
    case Mode::kHash:
      return blake3::Hasher();
    case Mode::kKeyed:
      return blake3::Hasher::keyed(official_key());
    case Mode::kDeriveKey:
      return blake3::Hasher::derive_key(official_context());
  }
  throw std::logic_error("unreachable");
}

const char* field(Mode mode) {
  switch (mode) {
    case Mode::kHash:
      return "hash";
    case Mode::kKeyed:
      return "keyed_hash";
    case Mode::kDeriveKey:
      return "derive_key";
  }
  return "";
}

std::string xof_hex(const blake3::Hasher& hasher, std::size_t len) {
  std::vector<std::uint8_t> out(len);
  hasher.finalize(out);
  return to_hex(out);
}

// Feeds `input` in pieces whose sizes cycle through `pieces`, starting at pieces[first].
void feed(blake3::Hasher& hasher, std::span<const std::uint8_t> input, std::span<const std::size_t> pieces,
          std::size_t first = 0) {
  std::size_t next = first;
  while (!input.empty()) {
    const std::size_t take = std::min(pieces[next++ % pieces.size()], input.size());
    hasher.update(input.first(take));
    input = input.subspan(take);
  }
}

// tests/data/blake3_lengths.txt (scripts/gen-blake3-lengths.sh, from the reference b3sum):
// length -> 64-hex hash of pattern(length). '#' lines are comments.
const std::map<std::size_t, std::string>& reference_lengths() {
  static const std::map<std::size_t, std::string> parsed = [] {
    std::ifstream in(std::string(KVRELAY_TEST_DATA_DIR) + "/blake3_lengths.txt");
    if (!in) throw std::runtime_error("cannot open tests/data/blake3_lengths.txt");
    std::map<std::size_t, std::string> digests;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line.front() == '#') continue;
      std::istringstream fields(line);
      std::size_t length = 0;
      std::string digest;
      if (!(fields >> length >> digest) || digest.size() != 64 || !digests.emplace(length, digest).second) {
        throw std::runtime_error("bad line in tests/data/blake3_lengths.txt: " + line);
      }
    }
    return digests;
  }();
  return parsed;
}

constexpr std::size_t kLargeLengths[] = {8191, 8192, 8193, 65536, 1048576 + 1, 3 * 1048576 + 7};

// The reference CLI, when installed: the tests that use it skip (with a warning) without it.
bool have_b3sum() { return std::system("command -v b3sum >/dev/null 2>&1") == 0; }

// b3sum's hash of `input`, through a temporary file.
std::string b3sum_hex(std::span<const std::uint8_t> input) {
  const auto file = std::filesystem::temp_directory_path() / ("kvrelay-blake3-" + std::to_string(::getpid()));
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size()));
    REQUIRE(out.good());
  }
  std::string output;
  if (FILE* pipe = ::popen(("b3sum --no-names '" + file.string() + "'").c_str(), "r")) {
    std::array<char, 256> buffer{};
    while (std::fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
    ::pclose(pipe);
  }
  std::filesystem::remove(file);
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  return output;
}

}  // namespace

TEST_CASE("blake3 vector file holds the expected official cases", "[blake3]") {
  const auto& cases = test::vector_cases(official(), "cases");
  std::vector<std::size_t> lengths;
  for (const auto& c : cases) lengths.push_back(c["input_len"].get<std::size_t>());
  for (const std::size_t required : {0u, 1u, 1023u, 1024u, 1025u, 2048u, 2049u, 8192u, 8193u, 31744u, 102400u}) {
    CAPTURE(required);
    CHECK(std::ranges::find(lengths, required) != lengths.end());
  }
  for (const auto& c : cases) {
    for (const char* name : {"hash", "keyed_hash", "derive_key"}) {
      CHECK(c[name].get<std::string>().size() == 2 * 131);
    }
  }
}

TEST_CASE("blake3 reproduces the official vectors in all three modes", "[blake3]") {
  for (const Mode mode : {Mode::kHash, Mode::kKeyed, Mode::kDeriveKey}) {
    for (const auto& c : test::vector_cases(official(), "cases")) {
      const auto len = c["input_len"].get<std::size_t>();
      const std::string expected = c[field(mode)].get<std::string>();
      const auto input = pattern(len);
      CAPTURE(field(mode), len);

      blake3::Hasher hasher = make_hasher(mode);
      hasher.update(input);
      // Full extended output (131 bytes) and the default-length prefix.
      CHECK(xof_hex(hasher, expected.size() / 2) == expected);
      CHECK(to_hex(hasher.finalize()) == expected.substr(0, 64));

      // The one-shot helpers agree.
      blake3::Digest one_shot{};
      switch (mode) {
        case Mode::kHash:
          one_shot = blake3::hash(input);
          break;
        case Mode::kKeyed:
          one_shot = blake3::keyed_hash(official_key(), input);
          break;
        case Mode::kDeriveKey:
          one_shot = blake3::derive_key(official_context(), input);
          break;
      }
      CHECK(to_hex(one_shot) == expected.substr(0, 64));
    }
  }
}

TEST_CASE("blake3 incremental updates at awkward boundaries match the official vectors", "[blake3]") {
  const std::vector<std::vector<std::size_t>> schedules = {
      {1}, {63}, {64}, {65}, {1023}, {1024}, {1025}, {1, 63, 64, 65, 1023, 1024, 1025}, {1025, 1, 1023, 65, 63}};
  for (const auto& c : test::vector_cases(official(), "cases")) {
    const auto len = c["input_len"].get<std::size_t>();
    const auto input = pattern(len);
    for (const auto& schedule : schedules) {
      for (const Mode mode : {Mode::kHash, Mode::kKeyed, Mode::kDeriveKey}) {
        // Byte-at-a-time over 100 KiB in every mode is slow under sanitizers; hash mode
        // covers it, the keyed modes use the larger pieces there.
        if (schedule.size() == 1 && schedule[0] == 1 && mode != Mode::kHash && len > 8193) continue;
        CAPTURE(field(mode), len, schedule);
        const std::string expected = c[field(mode)].get<std::string>();
        blake3::Hasher hasher = make_hasher(mode);
        feed(hasher, input, schedule);
        CHECK(xof_hex(hasher, expected.size() / 2) == expected);
      }
    }
  }
}

TEST_CASE("blake3 extended output of any length is a prefix of the longer output", "[blake3]") {
  const auto& c = official()["cases"][3];  // one full chunk
  REQUIRE(c["input_len"].get<std::size_t>() == 1024);
  const auto expected = from_hex(c["hash"].get<std::string>());
  blake3::Hasher hasher;
  hasher.update(pattern(1024));

  for (const std::size_t n : {0u, 1u, 31u, 32u, 33u, 63u, 64u, 65u, 127u, 128u, 129u, 131u}) {
    CAPTURE(n);
    std::vector<std::uint8_t> out(n, 0xAA);
    hasher.finalize(out);
    CHECK(std::equal(out.begin(), out.end(), expected.begin()));
  }

  // Beyond the official 131 bytes: still a consistent prefix, and not repeating blocks.
  std::vector<std::uint8_t> long_out(1000);
  hasher.finalize(long_out);
  CHECK(std::equal(expected.begin(), expected.end(), long_out.begin()));
  std::vector<std::uint8_t> longer(1500);
  hasher.finalize(longer);
  CHECK(std::equal(long_out.begin(), long_out.end(), longer.begin()));
  CHECK(!std::equal(long_out.begin(), long_out.begin() + 64, long_out.begin() + 64));
}

TEST_CASE("blake3 finalize does not consume the hasher, reset keeps the mode", "[blake3]") {
  const auto& cases = test::vector_cases(official(), "cases");
  const auto& empty = cases[0];
  const auto& one_chunk_plus = cases[4];
  REQUIRE(empty["input_len"].get<std::size_t>() == 0);
  REQUIRE(one_chunk_plus["input_len"].get<std::size_t>() == 1025);
  const auto input = pattern(1025);

  blake3::Hasher hasher = blake3::Hasher::keyed(official_key());
  CHECK(to_hex(hasher.finalize()) == empty["keyed_hash"].get<std::string>().substr(0, 64));
  hasher.update(std::span(input).first(1000));
  const auto midway = hasher.finalize();
  CHECK(hasher.finalize() == midway);  // repeatable
  hasher.update(std::span(input).subspan(1000));
  CHECK(to_hex(hasher.finalize()) == one_chunk_plus["keyed_hash"].get<std::string>().substr(0, 64));

  hasher.reset();
  CHECK(to_hex(hasher.finalize()) == empty["keyed_hash"].get<std::string>().substr(0, 64));
  hasher.update(input);
  CHECK(to_hex(hasher.finalize()) == one_chunk_plus["keyed_hash"].get<std::string>().substr(0, 64));
}

TEST_CASE("blake3 string_view input and empty updates", "[blake3]") {
  const std::string text = "the quick brown fox";
  const std::vector<std::uint8_t> bytes(text.begin(), text.end());
  CHECK(blake3::hash(std::string_view(text)) == blake3::hash(bytes));

  blake3::Hasher split;
  split.update(std::string_view("the quick"))
      .update(std::span<const std::uint8_t>{})
      .update(std::string_view(" brown fox"));
  CHECK(split.finalize() == blake3::hash(bytes));

  // Different inputs give different digests; the empty input is the official empty hash.
  CHECK(blake3::hash(std::string_view("the quick brown fix")) != blake3::hash(bytes));
  CHECK(to_hex(blake3::hash(std::string_view())) == official()["cases"][0]["hash"].get<std::string>().substr(0, 64));
}

TEST_CASE("blake3 length file holds every length 0..4096 and the large ones", "[blake3]") {
  const auto& digests = reference_lengths();
  for (std::size_t length = 0; length <= 4096; ++length) {
    CAPTURE(length);
    CHECK(digests.contains(length));
  }
  for (const std::size_t length : kLargeLengths) {
    CAPTURE(length);
    CHECK(digests.contains(length));
  }
  CHECK(digests.size() == 4097 + std::size(kLargeLengths));
  // Anchored to the official vectors where they overlap.
  for (const auto& c : test::vector_cases(official(), "cases")) {
    const auto length = c["input_len"].get<std::size_t>();
    if (!digests.contains(length)) continue;
    CAPTURE(length);
    CHECK(digests.at(length) == c["hash"].get<std::string>().substr(0, 64));
  }
}

TEST_CASE("blake3 matches the reference CLI for every length, one-shot and in awkward pieces", "[blake3]") {
  const auto& digests = reference_lengths();
  REQUIRE(!digests.empty());
  const auto input = pattern(digests.rbegin()->first);  // every shorter input is a prefix
  const std::vector<std::size_t> pieces{1, 63, 64, 65, 1023, 1024, 1025};
  for (const auto& [length, expected] : digests) {
    const auto prefix = std::span(input).first(length);
    CAPTURE(length);
    CHECK(to_hex(blake3::hash(prefix)) == expected);
    // Each length starts the cycle at another piece, so the split points move with it.
    blake3::Hasher hasher;
    feed(hasher, prefix, pieces, length % pieces.size());
    CHECK(to_hex(hasher.finalize()) == expected);
  }
}

TEST_CASE("blake3 agrees with a live b3sum on random lengths", "[blake3]") {
  if (!have_b3sum()) KVRELAY_SKIP("b3sum is not on PATH (apt-get install b3sum)");
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> small(0, 4096);
  std::uniform_int_distribution<std::size_t> large(4097, 2 * 1048576);
  std::vector<std::uint8_t> input;
  for (int i = 0; i < 6; ++i) {
    input.resize(i % 2 == 0 ? small(rng) : large(rng));
    for (auto& byte : input) byte = static_cast<std::uint8_t>(rng());  // not the pattern: any bytes
    CAPTURE(input.size());
    CHECK(to_hex(blake3::hash(input)) == b3sum_hex(input));
  }
}
