#include "client/lib/query.hpp"

#include <array>

namespace kvrelay::client {

QuerySemantics semantics_of(const v1::KvPoolDescriptor& descriptor, const Binding& binding) {
  const auto& semantics = descriptor.query_semantics();
  // The catalog plane admits only STANDARD and EAGLE_V1 pools (docs/consumer.md): no other
  // format reaches a query.
  const auto format = semantics.hash_format() == v1::KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1
                          ? hashing::HashFormat::kEagle
                          : hashing::HashFormat::kStandard;
  return {semantics.kv_block_size(), format, binding.adapter.value_or("")};
}

std::span<const std::uint64_t> PromptHashes::sequence_hashes(const QuerySemantics& semantics) {
  auto [it, inserted] = by_semantics_.try_emplace(semantics);
  if (inserted) {
    hashing::BlockHashOptions options;
    options.kv_block_size = semantics.block_size;
    options.format = semantics.format;
    options.seed = hashing::block_hash_seed(semantics.lora, cache_namespace_);
    it->second = hashing::sequence_hashes(hashing::block_hashes(tokens_, options));
  }
  return it->second;
}

std::size_t prefix_depth(std::span<const std::uint64_t> words, const ckf::Addressing& addressing,
                         std::span<const std::uint64_t> sequence_hashes) {
  constexpr std::size_t kBatch = 64;
  std::array<ckf::Probe, kBatch> probes;
  std::size_t depth = 0;
  while (depth < sequence_hashes.size()) {
    const std::size_t batch = std::min(kBatch, sequence_hashes.size() - depth);
    for (std::size_t i = 0; i < batch; ++i) {
      probes[i] = addressing.probe(sequence_hashes[depth + i]);
      __builtin_prefetch(&words[probes[i].bucket_a]);
      __builtin_prefetch(&words[probes[i].bucket_b]);
    }
    for (std::size_t i = 0; i < batch; ++i) {
      if (!ckf::contains(words, probes[i])) return depth + i;
    }
    depth += batch;
  }
  return depth;
}

}  // namespace kvrelay::client
