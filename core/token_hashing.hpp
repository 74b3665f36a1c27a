#pragma once
// Token-block hashing and the rolling sequence hash (docs/protocol/cbi1-ckf.md#hashing): the query
// side of the filter. A consumer hashes a prompt with a pool's KvQuerySemantics and the
// request's LoRA / cache-namespace salt, then probes each sequence hash.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvrelay::hashing {

inline constexpr std::uint64_t kChainSeed = 1337;

enum class HashFormat : std::uint8_t { kStandard = 1, kEagle = 2 };

// The tokens one block's hash reads: its block size, and under Eagle the next block's first
// token too. Counted wide: a block size of 2^32 - 1 under Eagle is a window of 2^32, not 0.
inline std::size_t window_tokens(std::uint32_t kv_block_size, HashFormat format) {
  return std::size_t{kv_block_size} + (format == HashFormat::kEagle ? 1 : 0);
}

// Seed of every block hash: 1337 plus the salts of a non-empty LoRA name and cache namespace.
std::uint64_t block_hash_seed(std::string_view lora_name, std::string_view cache_namespace);

struct BlockHashOptions {
  std::uint32_t kv_block_size = 0;
  HashFormat format = HashFormat::kStandard;
  std::uint64_t seed = kChainSeed;
  // Per block: the multimodal object hashes of that block, or nullopt for a plain block.
  std::span<const std::optional<std::vector<std::uint64_t>>> multimodal = {};
};

// Local (per-block) hashes; a trailing partial window is never hashed.
std::vector<std::uint64_t> block_hashes(std::span<const std::uint32_t> tokens, const BlockHashOptions& options);

// One block's hash from its own window of tokens (plus optional multimodal hashes).
std::uint64_t hash_block(std::span<const std::uint32_t> window, std::uint64_t seed,
                         std::span<const std::uint64_t> multimodal_hashes = {});

// seq[i] = XXH3(le64(seq[i-1]) || le64(local[i]), 1337).
std::uint64_t next_sequence_hash(std::uint64_t parent, std::uint64_t local);

std::vector<std::uint64_t> sequence_hashes(std::span<const std::uint64_t> local_hashes);

}  // namespace kvrelay::hashing
