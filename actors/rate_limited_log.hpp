#pragma once
// A warning for rejected input, logged at most once a second with how many similar ones were
// dropped meanwhile: bad input is reported, never allowed to flood the log.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kvrelay {

class RateLimitedLog {
 public:
  void warn(const std::string& what) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    if (now - last_ < std::chrono::seconds(1)) {
      ++suppressed_;
      return;
    }
    spdlog::warn("{} ({} similar suppressed)", what, suppressed_);
    last_ = now;
    suppressed_ = 0;
  }

 private:
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t suppressed_ = 0;
};

}  // namespace kvrelay
