#pragma once
// The stream actors subscribed to one publisher: monitored, so a stream that ends (however
// it ends) leaves the list, and every update goes to all of them as the same shared value.
#include <caf/all.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "actors/messages.hpp"

namespace kvrelay {

template <class Message>
class Subscribers {
 public:
  using Stream = UpdateStreamActor<Message>;

  // Adds `stream`, true. Once end_all has run, ends it at once with the same status instead,
  // false: a stream admitted just before a drain began may subscribe after its source closed.
  template <class Self>
  bool add(Self self, const Stream& stream) {
    if (closing_) {
      self->send(stream, atoms::end_stream_atom_v, *closing_);
      return false;
    }
    self->monitor(stream);
    streams_.push_back(stream);
    return true;
  }

  // Call from the owner's down handler.
  void remove(const caf::actor_addr& source) {
    std::erase_if(streams_, [&](const Stream& s) { return s.address() == source; });
  }

  template <class Self>
  void broadcast(Self self, const std::shared_ptr<const Message>& update) const {
    for (const Stream& stream : streams_) self->send(stream, atoms::update_atom_v, update);
  }

  template <class Self>
  void end_all(Self self, const RpcStatus& status) {
    for (const Stream& stream : streams_) {
      self->demonitor(stream.address());
      self->send(stream, atoms::end_stream_atom_v, status);
    }
    streams_.clear();
    closing_ = status;
  }

 private:
  std::vector<Stream> streams_;
  std::optional<RpcStatus> closing_;  // set by end_all: the publisher takes no more streams
};

}  // namespace kvrelay
