#pragma once
// BLAKE3 (hash, keyed_hash and derive_key modes, extendable output), written from the
// BLAKE3 specification: a portable, single-threaded implementation without SIMD.
// Input is split into 1024-byte chunks of 64-byte blocks; chunk chaining values are merged
// into a binary tree of parent nodes through a chaining-value stack, and the root node can
// be squeezed for any number of output bytes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvrelay::blake3 {

inline constexpr std::size_t kOutLen = 32;      // default output length in bytes
inline constexpr std::size_t kKeyLen = 32;      // keyed_hash key length in bytes
inline constexpr std::size_t kBlockLen = 64;    // compression block
inline constexpr std::size_t kChunkLen = 1024;  // leaf chunk

using Digest = std::array<std::uint8_t, kOutLen>;
using Key = std::array<std::uint8_t, kKeyLen>;

// Incremental hasher. update() may be called any number of times with pieces of any size;
// finalize() does not consume the state, so it can be called repeatedly and more input can
// still be added afterwards (the output then covers all input so far).
class Hasher {
 public:
  // Default hash mode.
  Hasher();
  // keyed_hash mode with a 32-byte key.
  static Hasher keyed(std::span<const std::uint8_t, kKeyLen> key);
  // derive_key mode: the context string (a hard-coded, application-unique constant) is
  // hashed first; the key material is then fed through update().
  static Hasher derive_key(std::string_view context);

  Hasher& update(std::span<const std::uint8_t> input);
  Hasher& update(std::string_view input);

  // Fills `out` with the first out.size() bytes of the extendable output (any length,
  // including 0 and more than 32 bytes). The first 32 bytes are the default-length hash.
  void finalize(std::span<std::uint8_t> out) const;
  Digest finalize() const;

  // Back to the empty input, keeping the mode and key.
  void reset();

 private:
  using Words = std::array<std::uint32_t, 8>;

  struct ChunkState {
    Words cv{};
    std::uint64_t counter = 0;
    std::array<std::uint8_t, kBlockLen> block{};
    std::uint8_t block_len = 0;
    std::uint8_t blocks_compressed = 0;
    std::uint32_t flags = 0;

    std::size_t len() const { return kBlockLen * blocks_compressed + block_len; }
  };

  Hasher(const Words& key, std::uint32_t flags);
  void reset_chunk(std::uint64_t counter);
  void update_chunk(std::span<const std::uint8_t> input);
  void push_chunk_cv(Words cv, std::uint64_t total_chunks);

  Words key_{};
  std::uint32_t flags_ = 0;
  ChunkState chunk_{};
  // Chaining values of complete subtrees awaiting a sibling; at most 54 are ever needed
  // (2^54 chunks = 2^64 bytes).
  std::array<Words, 54> stack_{};
  std::uint8_t stack_len_ = 0;
};

Digest hash(std::span<const std::uint8_t> input);
Digest hash(std::string_view input);
Digest keyed_hash(std::span<const std::uint8_t, kKeyLen> key, std::span<const std::uint8_t> input);
Digest derive_key(std::string_view context, std::span<const std::uint8_t> key_material);

}  // namespace kvrelay::blake3
