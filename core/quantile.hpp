#pragma once
// The nearest-rank quantile of sorted samples: the smallest sample with at least a share q of
// all samples at or below it. kvrelay-bench reports its latency percentiles with it
// (docs/benchmarks.md#the-load-generator-issue-15).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace kvrelay {

// 0 for no samples; q in [0, 1].
inline double nearest_rank_quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace kvrelay
