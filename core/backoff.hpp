#pragma once
// Bounded exponential backoff with equal jitter: attempt n waits a uniform draw from
// [initial * 2^n / 2, initial * 2^n], capped at `max`. Only an attempt that stayed usable for
// at least `max` resets it: a consumer's stream that fails soon after it opens, even after
// delivering messages (docs/consumer.md#backoff), or a pool generation that fences itself soon
// after it was built (docs/protocol/pools.md#fencing), counts as one more consecutive failure.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>

namespace kvrelay {

struct BackoffPolicy {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{5000};
};

class Backoff {
 public:
  explicit Backoff(BackoffPolicy policy, std::uint64_t seed = std::random_device{}()) : policy_(policy), rng_(seed) {}

  std::chrono::milliseconds next() {
    const auto ceiling =
        std::min<std::int64_t>(policy_.max.count(), policy_.initial.count() << std::min(attempt_, 20U));
    ++attempt_;
    std::uniform_int_distribution<std::int64_t> draw(ceiling / 2, std::max<std::int64_t>(ceiling, 1));
    return std::chrono::milliseconds(draw(rng_));
  }
  void reset() { attempt_ = 0; }
  // An attempt ended: it resets the count if it was usable from `usable_since` until `ended`
  // for at least `max`; otherwise the count stands.
  void attempt_ended(std::optional<std::chrono::steady_clock::time_point> usable_since,
                     std::chrono::steady_clock::time_point ended) {
    if (usable_since && ended - *usable_since >= policy_.max) reset();
  }

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  unsigned attempt_ = 0;
};

}  // namespace kvrelay
