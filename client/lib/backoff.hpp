#pragma once
// Bounded exponential backoff with full jitter: attempt n waits a uniform draw from
// [initial * 2^n / 2, initial * 2^n], capped at `max`. A stream that delivered a message
// resets it, so only consecutive failures grow the delay.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace kvrelay::client {

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

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  unsigned attempt_ = 0;
};

}  // namespace kvrelay::client
