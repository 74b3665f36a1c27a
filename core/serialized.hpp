#pragma once
// A message that one publisher hands to many streams (a catalog, readiness or load update),
// serialized once when it is made: every stream sends these same bytes, where gRPC would
// otherwise serialize the message again for each stream
// (docs/architecture.md#one-serialization-per-frame).
#include <string>
#include <utility>

namespace kvrelay::wire {

template <class Message>
class Serialized {
 public:
  explicit Serialized(Message message) : message_(std::move(message)), bytes_(message_.SerializeAsString()) {}

  const Message& message() const { return message_; }
  const std::string& bytes() const { return bytes_; }

 private:
  Message message_;
  std::string bytes_;
};

}  // namespace kvrelay::wire
