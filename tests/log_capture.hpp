#pragma once
// The relay's log lines while a CapturedLog lives: the default logger is swapped for one that
// keeps its last lines in memory, and put back when it goes. Every rate-limited log site logs
// its next line, whatever was logged before the capture began.
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rate_limited_log.hpp"

namespace kvrelay::test {

// The last 512 formatted lines, and a wake-up for whoever awaits one.
class AwaitableSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return {lines_.begin(), lines_.end()};
  }

  // Until `holds(lines)` or the timeout; whether it held. `holds` reads the lines in place.
  template <class Holds>
  bool await(Holds holds, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return logged_.wait_for(lock, timeout, [&] { return holds(std::as_const(lines_)); });
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(message, formatted);
    lines_.emplace_back(formatted.data(), formatted.size());
    if (lines_.size() > 512) lines_.pop_front();
    logged_.notify_all();
  }
  void flush_() override {}

 private:
  std::deque<std::string> lines_;  // guarded by the sink's mutex_
  std::condition_variable_any logged_;
};

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

  std::vector<std::string> lines() const { return sink_->lines(); }

  // How many lines hold every one of `parts`.
  std::size_t count(const std::vector<std::string_view>& parts) const { return count_in(lines(), parts); }

  // Until a line holds every one of `parts`, or the timeout; whether one did.
  bool await(const std::vector<std::string_view>& parts, std::chrono::milliseconds timeout) const {
    return sink_->await([&](const auto& logged) { return count_in(logged, parts) > 0; }, timeout);
  }

 private:
  template <class Lines>
  static std::size_t count_in(const Lines& logged, const std::vector<std::string_view>& parts) {
    return static_cast<std::size_t>(std::count_if(logged.begin(), logged.end(), [&](const std::string& line) {
      return std::all_of(parts.begin(), parts.end(),
                         [&](std::string_view part) { return line.find(part) != std::string::npos; });
    }));
  }

  std::shared_ptr<AwaitableSink> sink_ = std::make_shared<AwaitableSink>();
  std::shared_ptr<spdlog::logger> capturing_ = std::make_shared<spdlog::logger>("captured", sink_);
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace kvrelay::test
