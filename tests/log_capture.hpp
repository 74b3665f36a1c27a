#pragma once
// The relay's log lines while a CapturedLog lives: the default logger is swapped for one that
// keeps its last lines in memory, and put back when it goes. Every rate-limited log site logs
// its next line, whatever was logged before the capture began.
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/rate_limited_log.hpp"

namespace kvrelay::test {

class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    RateLimitedLog::forget_all();
    spdlog::set_default_logger(capturing_);
  }
  // A thread still logging through the capturing logger keeps using it safely while this
  // lives: declare a CapturedLog before the relay whose lines it reads, so it outlives that
  // relay's threads.
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::vector<std::string> lines() const { return sink_->last_formatted(); }

  // How many lines hold every one of `parts`.
  std::size_t count(const std::vector<std::string_view>& parts) const {
    const auto logged = lines();
    return static_cast<std::size_t>(std::count_if(logged.begin(), logged.end(), [&](const std::string& line) {
      return std::all_of(parts.begin(), parts.end(),
                         [&](std::string_view part) { return line.find(part) != std::string::npos; });
    }));
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(512);
  std::shared_ptr<spdlog::logger> capturing_ = std::make_shared<spdlog::logger>("captured", sink_);
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace kvrelay::test
