#pragma once
// A message about rejected input, a failing input file or a misbehaving peer, logged at most
// once a second with how many similar ones were dropped meanwhile: what outsiders cause is
// reported, never allowed to flood the log, and on one line whatever text of theirs it quotes.
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include "core/quoted_text.hpp"

namespace kvrelay {

class RateLimitedLog {
 public:
  // `what`: the message, or a function that makes it, called only when the line is written
  // (a refusal in a burst then costs no formatting).
  template <class Message>
  void info(const Message& what) {
    log(spdlog::level::info, what);
  }
  template <class Message>
  void warn(const Message& what) {
    log(spdlog::level::warn, what);
  }
  template <class Message>
  void error(const Message& what) {
    log(spdlog::level::err, what);
  }

  // Every site logs its next line at once, whenever its last was: for a test that reads the
  // log of one process after another test's lines.
  static void forget_all() { generation().fetch_add(1, std::memory_order_relaxed); }

 private:
  static std::atomic<std::uint64_t>& generation() {
    static std::atomic<std::uint64_t> current{0};
    return current;
  }

  // The message, made only now if it is a function that makes it.
  template <class Message>
  static decltype(auto) text_of(const Message& what) {
    if constexpr (std::is_invocable_v<const Message&>) {
      return what();
    } else {
      return (what);
    }
  }

  template <class Message>
  void log(spdlog::level::level_enum level, const Message& what) {
    const auto now = std::chrono::steady_clock::now();
    const std::uint64_t current = generation().load(std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    if (current == generation_ && now - last_ < std::chrono::seconds(1)) {
      ++suppressed_;
      return;
    }
    spdlog::log(level, "{} ({} similar suppressed)", one_line(text_of(what)), suppressed_);
    last_ = now;
    generation_ = current;
    suppressed_ = 0;
  }

  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t generation_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace kvrelay
