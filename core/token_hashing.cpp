#include "core/token_hashing.hpp"

#include <algorithm>

#include "core/xxh3.hpp"

namespace kvrelay::hashing {

std::uint64_t block_hash_seed(std::string_view lora_name, std::string_view cache_namespace) {
  std::uint64_t seed = kChainSeed;
  // Different inner seeds keep a LoRA name and a namespace with the same text apart.
  if (!lora_name.empty()) seed += xxh3(lora_name.data(), lora_name.size(), 0);
  if (!cache_namespace.empty()) seed += xxh3(cache_namespace.data(), cache_namespace.size(), 1);
  return seed;
}

std::uint64_t hash_block(std::span<const std::uint32_t> window, std::uint64_t seed,
                         std::span<const std::uint64_t> multimodal_hashes) {
  std::vector<std::uint8_t> bytes(window.size() * 4 + multimodal_hashes.size() * 8);
  std::uint8_t* out = bytes.data();
  for (std::uint32_t token : window) {
    store_le32(out, token);
    out += 4;
  }
  std::vector<std::uint64_t> sorted(multimodal_hashes.begin(), multimodal_hashes.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::uint64_t h : sorted) {
    store_le64(out, h);
    out += 8;
  }
  return xxh3(bytes.data(), bytes.size(), seed);
}

std::vector<std::uint64_t> block_hashes(std::span<const std::uint32_t> tokens, const BlockHashOptions& options) {
  std::vector<std::uint64_t> hashes;
  const std::size_t stride = options.kv_block_size;
  if (stride == 0) return hashes;
  // Eagle windows are one token wider, so adjacent windows share a token.
  const std::size_t width = window_tokens(options.kv_block_size, options.format);
  for (std::size_t start = 0, block = 0; start + width <= tokens.size(); start += stride, ++block) {
    std::span<const std::uint64_t> mm;
    if (block < options.multimodal.size() && options.multimodal[block]) {
      mm = *options.multimodal[block];
    }
    hashes.push_back(hash_block(tokens.subspan(start, width), options.seed, mm));
  }
  return hashes;
}

std::uint64_t next_sequence_hash(std::uint64_t parent, std::uint64_t local) {
  std::uint8_t bytes[16];
  store_le64(bytes, parent);
  store_le64(bytes + 8, local);
  return xxh3(bytes, sizeof bytes, kChainSeed);
}

std::vector<std::uint64_t> sequence_hashes(std::span<const std::uint64_t> local_hashes) {
  std::vector<std::uint64_t> sequence;
  sequence.reserve(local_hashes.size());
  for (std::uint64_t local : local_hashes) {
    sequence.push_back(sequence.empty() ? local : next_sequence_hash(sequence.back(), local));
  }
  return sequence;
}

}  // namespace kvrelay::hashing
