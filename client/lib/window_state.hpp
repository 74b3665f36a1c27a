#pragma once
// The consumer's windowed planes (load, serving load): every window is complete and replaces the
// one before. The relay emits every window, so on one stream windows follow one another by
// exactly one window_sequence; a gap or a regression invalidates the plane and the stream is
// reopened, and the new stream's first window is taken whatever its number (docs/consumer.md).
#include <fmt/format.h>

#include <map>

#include "client/lib/fault.hpp"

namespace kvrelay::client {

// `Window` is built from an update that passed its message-level check (wire::check_response);
// it keeps its pool entries in `pools`, keyed by producer.
template <class Update, class Window>
class WindowState {
 public:
  using PoolEntry = typename decltype(Window::pools)::mapped_type;

  Applied apply(const Update& update) {
    if (auto fault = admit(update)) {
      invalidate();
      return fault;
    }
    window_ = Window(update);
    valid_ = true;
    window_sequence_ = update.window_sequence();
    return std::nullopt;
  }
  void invalidate() {
    valid_ = false;
    window_ = Window();
  }

  bool valid() const { return valid_; }
  std::uint64_t window_sequence() const { return window_sequence_; }
  // Empty while the plane is invalid.
  const Window& window() const { return window_; }
  const PoolEntry* find_pool(const wire::ProducerKey& producer) const {
    const auto it = window_.pools.find(producer);
    return it == window_.pools.end() ? nullptr : &it->second;
  }

 private:
  Applied admit(const Update& update) const {
    if (auto error = wire::check_response(update)) return fault_of(*error);
    if (!valid_ || update.window_sequence() == window_sequence_ + 1) return std::nullopt;
    const bool regressed = update.window_sequence() <= window_sequence_;
    return Fault{regressed ? "WindowRegressed" : "WindowGap",
                 fmt::format("window {} after window {}", update.window_sequence(), window_sequence_)};
  }

  bool valid_ = false;
  std::uint64_t window_sequence_ = 0;
  Window window_;
};

// A window's entries that pass `check`, by `key_of`; each one that fails is quarantined: dropped
// and counted, while the rest of the window applies.
template <class Key, class Entry, class Check, class KeyOf>
std::map<Key, Entry> usable_entries(const google::protobuf::RepeatedPtrField<Entry>& entries, Check check, KeyOf key_of,
                                    std::size_t& quarantined) {
  std::map<Key, Entry> usable;
  for (const auto& entry : entries) {
    if (check(entry)) {
      ++quarantined;
    } else {
      usable.emplace(key_of(entry), entry);
    }
  }
  return usable;
}

}  // namespace kvrelay::client
