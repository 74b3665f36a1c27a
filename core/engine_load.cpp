#include "core/engine_load.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <new>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "core/quoted_text.hpp"

namespace kvrelay::engine_load {

namespace {

using prometheus_text::Page;
using prometheus_text::Sample;
using Failure = std::unexpected<std::string>;
using Series = std::vector<const Sample*>;

constexpr std::string_view kVllmUsage = "vllm:kv_cache_usage_perc";
constexpr std::string_view kVllmLegacyUsage = "vllm:gpu_cache_usage_perc";  // the name before vLLM 0.9
constexpr std::string_view kVllmCacheConfig = "vllm:cache_config_info";
constexpr std::string_view kVllmBlocksLabel = "num_gpu_blocks";
constexpr std::string_view kVllmRankLabel = "engine";
constexpr std::string_view kSglangUsedTokens = "sglang:num_used_tokens";
constexpr std::string_view kSglangRankLabel = "dp_rank";

// A usage fraction this little above 1 is float noise, not a cache past its capacity.
constexpr double kUsageTolerance = 1e-6;

Series series_of(const Page& page, std::string_view name) {
  Series series;
  for (const Sample& sample : page.samples) {
    if (sample.name == name) series.push_back(&sample);
  }
  return series;
}

// Prometheus does not tell an empty label from an absent one, so neither do we.
std::string_view label_or_empty(const Sample& sample, std::string_view key) {
  const std::string* value = sample.label(key);
  return value == nullptr ? std::string_view() : std::string_view(*value);
}

// Decimal digits only, as engines print integers: no sign, no blanks, no fraction.
template <typename Unsigned>
std::optional<Unsigned> parse_decimal(std::string_view text) {
  Unsigned n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return n;
}

std::expected<std::uint32_t, std::string> rank_of(const Sample& series, std::string_view rank_label,
                                                  std::uint32_t default_rank) {
  const std::string_view text = label_or_empty(series, rank_label);
  if (text.empty()) return default_rank;
  if (const auto rank = parse_decimal<std::uint32_t>(text)) return *rank;
  return Failure(fmt::format("{} label {} of {} is not a u32", rank_label, quoted_excerpt(text), series.name));
}

// A gauge the conversions can use: finite and non-negative.
std::expected<double, std::string> gauge_value(const Sample& series, std::uint32_t rank) {
  if (!std::isfinite(series.value) || series.value < 0) {
    return Failure(fmt::format("{} of rank {} is {}", series.name, rank, series.value));
  }
  return series.value;
}

// Saturation would hide a broken page: a count past u64 is refused instead.
std::expected<std::uint64_t, std::string> whole_blocks(double blocks, const Sample& series, std::uint32_t rank) {
  if (blocks >= 0x1p64) return Failure(fmt::format("{} of rank {} is out of range", series.name, rank));
  return static_cast<std::uint64_t>(blocks);
}

// Each series' rank and blocks, refusing a rank seen twice: two series are two answers for one rank.
template <typename BlocksOf>
OccupancyRead per_rank(const Series& series, std::string_view rank_label, std::uint32_t default_rank,
                       BlocksOf blocks_of) {
  std::map<std::uint32_t, std::uint64_t> blocks_by_rank;
  for (const Sample* one : series) {
    const auto rank = rank_of(*one, rank_label, default_rank);
    if (!rank) return Failure(rank.error());
    if (blocks_by_rank.contains(*rank)) return Failure(fmt::format("two {} series for rank {}", one->name, *rank));
    const auto blocks = blocks_of(*one, *rank);
    if (!blocks) return Failure(blocks.error());
    blocks_by_rank.emplace(*rank, *blocks);
  }
  std::vector<RankOccupancy> occupancy;
  occupancy.reserve(blocks_by_rank.size());
  for (const auto& [rank, blocks] : blocks_by_rank) occupancy.push_back({rank, blocks});
  return occupancy;
}

// vLLM: the usage is a fraction of the engine's blocks ("1 means 100 percent usage").
std::expected<double, std::string> usage_fraction(const Sample& usage, std::uint32_t rank) {
  const auto value = gauge_value(usage, rank);
  if (!value) return value;
  if (*value > 1 + kUsageTolerance) {
    return Failure(fmt::format("{} of rank {} is {}, above 1 (it is a fraction)", usage.name, rank, *value));
  }
  return std::min(*value, 1.0);
}

// The cache_config_info series by their engine label, read once: each usage series looks its
// config up instead of scanning them all (a page is untrusted: thousands of each would be
// quadratic). Null marks an engine label that two series carry.
class CacheConfigs {
 public:
  explicit CacheConfigs(const Series& configs) : only_(configs.size() == 1 ? configs.front() : nullptr) {
    for (const Sample* config : configs) {
      const auto [it, added] = by_engine_.emplace(label_or_empty(*config, kVllmRankLabel), config);
      if (!added) it->second = nullptr;
    }
  }

  // The series of the engine whose usage carries `engine`: the one with the same engine label,
  // else the one without (older vLLM exports it once, unlabelled), else the only one.
  std::expected<const Sample*, std::string> of(std::string_view engine) const {
    for (const std::string_view wanted : {engine, std::string_view()}) {
      const auto it = by_engine_.find(wanted);
      if (it == by_engine_.end()) continue;
      if (it->second == nullptr) {
        return Failure(fmt::format("two {} series for engine {}", kVllmCacheConfig, quoted_excerpt(wanted)));
      }
      return it->second;
    }
    if (only_ != nullptr) return only_;
    return Failure(fmt::format("no {} series for engine {}", kVllmCacheConfig, quoted_excerpt(engine)));
  }

 private:
  const Sample* only_;
  std::map<std::string_view, const Sample*> by_engine_;
};

// vLLM prints its cache config's num_gpu_blocks as a label: "None" until the cache is sized.
std::expected<std::uint64_t, std::string> num_gpu_blocks(const Sample& config) {
  const std::string* text = config.label(kVllmBlocksLabel);
  if (text == nullptr) return Failure(fmt::format("{} has no {} label", kVllmCacheConfig, kVllmBlocksLabel));
  if (const auto blocks = parse_decimal<std::uint64_t>(*text)) return *blocks;
  return Failure(
      fmt::format("{} {} of {} is not an integer", kVllmBlocksLabel, quoted_excerpt(*text), kVllmCacheConfig));
}

std::expected<std::uint64_t, std::string> vllm_used_blocks(const Sample& usage, std::uint32_t rank,
                                                           const CacheConfigs& configs) {
  const auto fraction = usage_fraction(usage, rank);
  if (!fraction) return Failure(fraction.error());
  const auto config = configs.of(label_or_empty(usage, kVllmRankLabel));
  if (!config) return Failure(config.error());
  const auto total = num_gpu_blocks(**config);
  if (!total) return Failure(total.error());
  // The fraction is used / total blocks, so rounding recovers the engine's count of used blocks.
  const double used = std::round(*fraction * static_cast<double>(*total));
  // At most total, but for total rounding up on its way to a double.
  return used >= static_cast<double>(*total) ? *total : static_cast<std::uint64_t>(used);
}

OccupancyRead read_vllm(const Page& page, std::uint32_t default_rank) {
  Series usage = series_of(page, kVllmUsage);
  if (usage.empty()) usage = series_of(page, kVllmLegacyUsage);
  if (usage.empty()) return Failure(fmt::format("the page has neither {} nor {}", kVllmUsage, kVllmLegacyUsage));
  const Series config_series = series_of(page, kVllmCacheConfig);
  if (config_series.empty()) return Failure(fmt::format("the page has no {}", kVllmCacheConfig));
  const CacheConfigs configs(config_series);
  return per_rank(usage, kVllmRankLabel, default_rank,
                  [&](const Sample& series, std::uint32_t rank) { return vllm_used_blocks(series, rank, configs); });
}

// SGLang counts tokens, the relay blocks of block_size tokens. Every used token sits in some
// block, so ceil(tokens / block_size) is the fewest blocks that hold them: rounding up never
// shows a cache that holds tokens as empty, and is exact when the tokens fill whole blocks (as
// SGLang's paged allocator does when its page size is the card's block size).
std::expected<std::uint64_t, std::string> sglang_used_blocks(const Sample& used_tokens, std::uint32_t rank,
                                                             std::uint32_t block_size) {
  const auto tokens = gauge_value(used_tokens, rank);
  if (!tokens) return Failure(tokens.error());
  return whole_blocks(std::ceil(*tokens / block_size), used_tokens, rank);
}

OccupancyRead read_sglang(const Page& page, const OccupancyQuery& query) {
  if (query.block_size == 0) return Failure("SGLang reports tokens: the block size must not be 0");
  const Series used_tokens = series_of(page, kSglangUsedTokens);
  if (used_tokens.empty()) return Failure(fmt::format("the page has no {}", kSglangUsedTokens));
  return per_rank(used_tokens, kSglangRankLabel, query.default_rank, [&](const Sample& series, std::uint32_t rank) {
    return sglang_used_blocks(series, rank, query.block_size);
  });
}

// The families each engine's occupancy is read from.
bool read_from(EngineKind kind, std::string_view family) {
  switch (kind) {
    case EngineKind::kVllm:
      return family == kVllmUsage || family == kVllmLegacyUsage || family == kVllmCacheConfig;
    case EngineKind::kSglang:
      return family == kSglangUsedTokens;
  }
  return false;
}

}  // namespace

OccupancyRead read_occupancy(const prometheus_text::Page& page, const OccupancyQuery& query) {
  switch (query.kind) {
    case EngineKind::kVllm:
      return read_vllm(page, query.default_rank);
    case EngineKind::kSglang:
      return read_sglang(page, query);
  }
  return Failure("unknown engine kind");
}

OccupancyRead read_page(std::string_view text, const OccupancyQuery& query) {
  try {
    const auto page =
        prometheus_text::parse(text, [kind = query.kind](std::string_view name) { return read_from(kind, name); });
    if (!page) return Failure("unreadable page: " + page.error());
    return read_occupancy(*page, query);
  } catch (const std::bad_alloc&) {
    return Failure("the page is too large to read in the memory available");
  }
}

}  // namespace kvrelay::engine_load
