#pragma once
// KV occupancy read from an inference engine's metrics page (docs/protocol/decisions.md#d26):
// kv_used_blocks per data-parallel rank, from the gauges vLLM and SGLang export.
//
// vLLM:   round(vllm:kv_cache_usage_perc × num_gpu_blocks), the usage a fraction in [0, 1]
//         (vllm:gpu_cache_usage_perc, its older name, when the page has no series of the new
//         one), num_gpu_blocks a label of the vllm:cache_config_info gauge, the `engine` label
//         the dp rank.
// SGLang: ceil(sglang:num_used_tokens / block_size), the `dp_rank` label the dp rank.
//
// A series without a rank label (or with an empty one, which Prometheus treats the same) is
// the worker's first rank.
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "core/prometheus_text.hpp"

namespace kvrelay::engine_load {

enum class EngineKind : std::uint8_t { kVllm, kSglang };

struct OccupancyQuery {
  EngineKind kind = EngineKind::kVllm;
  std::uint32_t default_rank = 0;  // the worker's data_parallel_start_rank: rank of a series without a rank label
  std::uint32_t block_size = 0;    // the card's kv_cache_block_size (tokens per block), for engines that report tokens
};

struct RankOccupancy {
  std::uint32_t dp_rank = 0;
  std::uint64_t kv_used_blocks = 0;
  friend bool operator==(const RankOccupancy&, const RankOccupancy&) = default;
};

// One entry per rank found on the page, ascending by rank; or why the page gives no occupancy
// (the caller counts it as a failed scrape).
using OccupancyRead = std::expected<std::vector<RankOccupancy>, std::string>;

OccupancyRead read_occupancy(const prometheus_text::Page& page, const OccupancyQuery& query);

// The same from the page's text, keeping only the samples of the families `query`'s engine is
// read from (the rest are checked, not kept): what one scrape makes of a page. A page too large
// for the memory available is an error too.
OccupancyRead read_page(std::string_view text, const OccupancyQuery& query);

}  // namespace kvrelay::engine_load
