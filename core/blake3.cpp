#include "core/blake3.hpp"

#include <algorithm>
#include <bit>

namespace kvrelay::blake3 {
namespace {

using Words = std::array<std::uint32_t, 8>;
using Block = std::array<std::uint32_t, 16>;

// Domain-separation flags.
constexpr std::uint32_t kChunkStart = 1U << 0;
constexpr std::uint32_t kChunkEnd = 1U << 1;
constexpr std::uint32_t kParent = 1U << 2;
constexpr std::uint32_t kRoot = 1U << 3;
constexpr std::uint32_t kKeyedHash = 1U << 4;
constexpr std::uint32_t kDeriveKeyContext = 1U << 5;
constexpr std::uint32_t kDeriveKeyMaterial = 1U << 6;

// Same constants as the SHA-256 initial hash value.
constexpr Words kIv = {0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19};

// Message word permutation applied between rounds.
constexpr std::array<std::size_t, 16> kPermutation = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};

std::uint32_t load_le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

void store_le32(std::uint8_t* p, std::uint32_t w) {
  p[0] = static_cast<std::uint8_t>(w);
  p[1] = static_cast<std::uint8_t>(w >> 8);
  p[2] = static_cast<std::uint8_t>(w >> 16);
  p[3] = static_cast<std::uint8_t>(w >> 24);
}

Block load_block(const std::array<std::uint8_t, kBlockLen>& bytes) {
  Block words{};
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = load_le32(bytes.data() + 4 * i);
  return words;
}

Words load_key(std::span<const std::uint8_t, kKeyLen> key) {
  Words words{};
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = load_le32(key.data() + 4 * i);
  return words;
}

void g(Block& s, std::size_t a, std::size_t b, std::size_t c, std::size_t d, std::uint32_t mx, std::uint32_t my) {
  s[a] = s[a] + s[b] + mx;
  s[d] = std::rotr(s[d] ^ s[a], 16);
  s[c] = s[c] + s[d];
  s[b] = std::rotr(s[b] ^ s[c], 12);
  s[a] = s[a] + s[b] + my;
  s[d] = std::rotr(s[d] ^ s[a], 8);
  s[c] = s[c] + s[d];
  s[b] = std::rotr(s[b] ^ s[c], 7);
}

void mix_round(Block& s, const Block& m) {
  // Columns.
  g(s, 0, 4, 8, 12, m[0], m[1]);
  g(s, 1, 5, 9, 13, m[2], m[3]);
  g(s, 2, 6, 10, 14, m[4], m[5]);
  g(s, 3, 7, 11, 15, m[6], m[7]);
  // Diagonals.
  g(s, 0, 5, 10, 15, m[8], m[9]);
  g(s, 1, 6, 11, 12, m[10], m[11]);
  g(s, 2, 7, 8, 13, m[12], m[13]);
  g(s, 3, 4, 9, 14, m[14], m[15]);
}

// The compression function: all 16 output words (the first 8 are the chaining value).
Block compress(const Words& cv, const Block& block, std::uint64_t counter, std::uint32_t block_len,
               std::uint32_t flags) {
  Block s = {cv[0],
             cv[1],
             cv[2],
             cv[3],
             cv[4],
             cv[5],
             cv[6],
             cv[7],
             kIv[0],
             kIv[1],
             kIv[2],
             kIv[3],
             static_cast<std::uint32_t>(counter),
             static_cast<std::uint32_t>(counter >> 32),
             block_len,
             flags};
  Block m = block;
  for (int r = 0; r < 7; ++r) {
    mix_round(s, m);
    if (r == 6) break;
    Block permuted{};
    for (std::size_t i = 0; i < permuted.size(); ++i) permuted[i] = m[kPermutation[i]];
    m = permuted;
  }
  for (std::size_t i = 0; i < 8; ++i) {
    s[i] ^= s[i + 8];
    s[i + 8] ^= cv[i];
  }
  return s;
}

Words first_eight(const Block& words) {
  Words out{};
  std::copy_n(words.begin(), out.size(), out.begin());
  return out;
}

// The inputs of a node's final compression, kept unevaluated: the caller either takes its
// chaining value (non-root node) or squeezes it with the ROOT flag (the root node).
struct Output {
  Words input_cv{};
  Block block{};
  std::uint64_t counter = 0;
  std::uint32_t block_len = 0;
  std::uint32_t flags = 0;

  Words chaining_value() const { return first_eight(compress(input_cv, block, counter, block_len, flags)); }

  void root_bytes(std::span<std::uint8_t> out) const {
    std::uint64_t output_block = 0;
    std::size_t pos = 0;
    while (pos < out.size()) {
      const Block words = compress(input_cv, block, output_block, block_len, flags | kRoot);
      std::array<std::uint8_t, 64> bytes{};
      for (std::size_t i = 0; i < words.size(); ++i) store_le32(bytes.data() + 4 * i, words[i]);
      const std::size_t take = std::min(bytes.size(), out.size() - pos);
      std::copy_n(bytes.begin(), take, out.begin() + static_cast<std::ptrdiff_t>(pos));
      pos += take;
      ++output_block;
    }
  }
};

Output parent_output(const Words& left, const Words& right, const Words& key, std::uint32_t flags) {
  Output out;
  out.input_cv = key;
  std::copy(left.begin(), left.end(), out.block.begin());
  std::copy(right.begin(), right.end(), out.block.begin() + 8);
  out.counter = 0;
  out.block_len = kBlockLen;
  out.flags = flags | kParent;
  return out;
}

}  // namespace

Hasher::Hasher() : Hasher(kIv, 0) {}

Hasher::Hasher(const Words& key, std::uint32_t flags) : key_(key), flags_(flags) { reset_chunk(0); }

Hasher Hasher::keyed(std::span<const std::uint8_t, kKeyLen> key) { return Hasher(load_key(key), kKeyedHash); }

Hasher Hasher::derive_key(std::string_view context) {
  Hasher context_hasher(kIv, kDeriveKeyContext);
  context_hasher.update(context);
  const Digest context_key = context_hasher.finalize();
  return Hasher(load_key(context_key), kDeriveKeyMaterial);
}

void Hasher::reset_chunk(std::uint64_t counter) {
  chunk_ = ChunkState{};
  chunk_.cv = key_;
  chunk_.counter = counter;
  chunk_.flags = flags_;
}

void Hasher::reset() {
  reset_chunk(0);
  stack_len_ = 0;
}

void Hasher::update_chunk(std::span<const std::uint8_t> input) {
  while (!input.empty()) {
    // A full block is compressed only once more input arrives: the chunk's last block must
    // be kept for the CHUNK_END (and possibly ROOT) compression.
    if (chunk_.block_len == kBlockLen) {
      const std::uint32_t start = chunk_.blocks_compressed == 0 ? kChunkStart : 0;
      chunk_.cv =
          first_eight(compress(chunk_.cv, load_block(chunk_.block), chunk_.counter, kBlockLen, chunk_.flags | start));
      ++chunk_.blocks_compressed;
      chunk_.block = {};
      chunk_.block_len = 0;
    }
    const std::size_t take = std::min(kBlockLen - chunk_.block_len, input.size());
    std::copy_n(input.begin(), take, chunk_.block.begin() + chunk_.block_len);
    chunk_.block_len = static_cast<std::uint8_t>(chunk_.block_len + take);
    input = input.subspan(take);
  }
}

namespace {

Output chunk_output(const Words& cv, const std::array<std::uint8_t, kBlockLen>& block, std::uint8_t block_len,
                    std::uint8_t blocks_compressed, std::uint64_t counter, std::uint32_t flags) {
  Output out;
  out.input_cv = cv;
  out.block = load_block(block);  // unused tail bytes are zero
  out.counter = counter;
  out.block_len = block_len;
  out.flags = flags | kChunkEnd | (blocks_compressed == 0 ? kChunkStart : 0);
  return out;
}

}  // namespace

void Hasher::push_chunk_cv(Words cv, std::uint64_t total_chunks) {
  // Each trailing zero bit of the chunk count closes one complete subtree: merge it with the
  // left sibling on top of the stack. Only then is the new subtree root pushed.
  while ((total_chunks & 1) == 0) {
    --stack_len_;
    cv = parent_output(stack_[stack_len_], cv, key_, flags_).chaining_value();
    total_chunks >>= 1;
  }
  stack_[stack_len_++] = cv;
}

Hasher& Hasher::update(std::span<const std::uint8_t> input) {
  while (!input.empty()) {
    // A full chunk is finalized only once more input arrives, since the last chunk may be
    // the root.
    if (chunk_.len() == kChunkLen) {
      const Words cv = chunk_output(chunk_.cv, chunk_.block, chunk_.block_len, chunk_.blocks_compressed, chunk_.counter,
                                    chunk_.flags)
                           .chaining_value();
      const std::uint64_t total_chunks = chunk_.counter + 1;
      push_chunk_cv(cv, total_chunks);
      reset_chunk(total_chunks);
    }
    const std::size_t take = std::min(kChunkLen - chunk_.len(), input.size());
    update_chunk(input.first(take));
    input = input.subspan(take);
  }
  return *this;
}

Hasher& Hasher::update(std::string_view input) {
  return update(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(input.data()), input.size()));
}

void Hasher::finalize(std::span<std::uint8_t> out) const {
  Output output =
      chunk_output(chunk_.cv, chunk_.block, chunk_.block_len, chunk_.blocks_compressed, chunk_.counter, chunk_.flags);
  // Fold the pending subtrees, right to left, into the root.
  for (std::size_t i = stack_len_; i > 0; --i) {
    output = parent_output(stack_[i - 1], output.chaining_value(), key_, flags_);
  }
  output.root_bytes(out);
}

Digest Hasher::finalize() const {
  Digest out{};
  finalize(out);
  return out;
}

Digest hash(std::span<const std::uint8_t> input) { return Hasher().update(input).finalize(); }

Digest hash(std::string_view input) { return Hasher().update(input).finalize(); }

Digest keyed_hash(std::span<const std::uint8_t, kKeyLen> key, std::span<const std::uint8_t> input) {
  return Hasher::keyed(key).update(input).finalize();
}

Digest derive_key(std::string_view context, std::span<const std::uint8_t> key_material) {
  return Hasher::derive_key(context).update(key_material).finalize();
}

}  // namespace kvrelay::blake3
