#pragma once
// The narrow interface between a stream actor and the transport that carries its stream
// (a gRPC ServerWriteReactor in production, a recording fake in actor tests). The sink
// reports write completions and cancellation back to the actor as messages.
#include <memory>

#include "core/rpc_status.hpp"

namespace kvrelay {

template <class Message>
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Starts one write; the caller keeps at most one outstanding and waits for write_done.
  // `more_queued` says further frames wait behind this one, so the transport may coalesce
  // them into one flush instead of completing each write on its own.
  virtual void write(std::shared_ptr<const Message> message, bool more_queued) = 0;
  // Ends the stream (idempotent); its permits come back once the call is over.
  virtual void finish(RpcStatus status) = 0;
};

template <class Message>
using StreamSinkPtr = std::shared_ptr<StreamSink<Message>>;

}  // namespace kvrelay
