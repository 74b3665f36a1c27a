// The nearest-rank quantile kvrelay-bench reports its percentiles with (core/quantile.hpp).
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "core/quantile.hpp"

using kvrelay::nearest_rank_quantile;

TEST_CASE("quantile: the smallest sample with at least q of all at or below it", "[quantile]") {
  CHECK(nearest_rank_quantile({}, 0.99) == 0.0);
  CHECK(nearest_rank_quantile({4.0}, 0.5) == 4.0);
  // Two samples: p50 is the smaller, p99 the larger (an index of q (n - 1) rounded down gave
  // the smaller for both).
  CHECK(nearest_rank_quantile({1.0, 2.0}, 0.5) == 1.0);
  CHECK(nearest_rank_quantile({1.0, 2.0}, 0.99) == 2.0);
  std::vector<double> samples(1000);
  std::iota(samples.begin(), samples.end(), 1.0);  // 1 .. 1000
  CHECK(nearest_rank_quantile(samples, 0.5) == 500.0);
  CHECK(nearest_rank_quantile(samples, 0.99) == 990.0);
  CHECK(nearest_rank_quantile(samples, 0.999) == 999.0);
  samples.pop_back();  // 999 samples: p999 is the largest
  CHECK(nearest_rank_quantile(samples, 0.999) == 999.0);
  CHECK(nearest_rank_quantile(samples, 0.0) == 1.0);
  CHECK(nearest_rank_quantile(samples, 1.0) == 999.0);
}
