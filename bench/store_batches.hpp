#pragma once
// The benchmark programs' push batches: stored events of fresh random blocks.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::bench {

// `count` batches of one worker's rank 0, numbered from `first_sequence`, each of `events`
// stored events with `blocks` fresh blocks: one block store per block. The same seed makes the
// same blocks.
inline std::vector<::kvrelay::ingest::v1::KvEventBatch> store_batches(
    std::size_t count, int events, int blocks, std::uint64_t seed, const ::kvrelay::ingest::v1::EndpointRef& endpoint,
    std::uint64_t worker_id = 1, std::uint64_t first_sequence = 0) {
  std::mt19937_64 rng(seed);
  std::vector<::kvrelay::ingest::v1::KvEventBatch> batches(count);
  for (std::size_t i = 0; i < count; ++i) {
    auto& batch = batches[i];
    *batch.mutable_endpoint() = endpoint;
    batch.set_worker_id(worker_id);
    batch.set_sequence(first_sequence + i);
    for (int e = 0; e < events; ++e) {
      auto* stored = batch.add_events()->mutable_stored();
      for (int b = 0; b < blocks; ++b) {
        auto* block = stored->add_blocks();
        block->set_block_hash(rng());
        block->set_tokens_hash(rng());
      }
    }
  }
  return batches;
}

}  // namespace kvrelay::bench
