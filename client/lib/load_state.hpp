#pragma once
// The consumer's load plane: the latest complete KvPoolLoadUpdate window, keyed by producer.
// Windows follow one another by exactly one window_sequence; a gap or regression invalidates
// the plane and the stream is reopened (CKF state is unaffected).
#include <map>

#include "client/lib/fault.hpp"

namespace kvrelay::client {

class LoadState {
 public:
  Applied apply(const v1::KvPoolLoadUpdate& update);
  void invalidate();

  bool valid() const { return valid_; }
  std::uint64_t window_sequence() const { return window_sequence_; }
  const std::map<wire::ProducerKey, v1::KvPoolLoadEntry>& entries() const { return entries_; }
  std::size_t quarantined() const { return quarantined_; }
  const v1::KvPoolLoadEntry* find(const wire::ProducerKey& producer) const;

 private:
  bool valid_ = false;
  std::uint64_t window_sequence_ = 0;
  std::map<wire::ProducerKey, v1::KvPoolLoadEntry> entries_;
  std::size_t quarantined_ = 0;
};

}  // namespace kvrelay::client
