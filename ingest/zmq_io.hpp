#pragma once
// The relay's ZeroMQ I/O thread (docs/protocol/engine-sources.md#io): it owns every engine
// subscription's sockets (SUB, its monitor, the replay DEALER) and polls them all, so no
// actor ever blocks on a socket. What arrives goes to the source's callbacks, on this thread.
//
// Flow control: a subscription hands out at most `credit` messages (live or replayed) that the
// receiver has not returned yet; without credit its sockets are not read, ZeroMQ queues up to
// its high-water mark, and past that the engine drops, which the receiver then sees as a seq
// gap (filled by replay or answered by a cold reset). A frame above `max_message_bytes` ends
// the connection before it is buffered; the thread dials it again (the lost batches are a gap).
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/engine_frames.hpp"

namespace kvrelay::engine_io {

// The frames of one received message.
struct Multipart {
  std::vector<zmq::message_t> frames;
  std::vector<engine::Frame> views() const;
  std::size_t bytes() const;  // of every frame
};
using MultipartPtr = std::shared_ptr<const Multipart>;

struct SourceCallbacks {
  std::function<void(bool connected)> connection;  // the SUB socket's peer came or went
  std::function<void(MultipartPtr)> live;          // one published message (spends one credit)
  // One replay reply, after its empty delimiter (one credit), and the request it answers: the
  // subscription's n-th request_replay is answered as replay n, so a late reply of an earlier
  // replay can be told apart.
  std::function<void(MultipartPtr, std::uint64_t replay)> replay;
};

struct SubscriptionConfig {
  std::string endpoint;  // the engine's PUB socket
  std::string topic;     // subscription prefix; empty = everything
  std::size_t credit = 16;
  int receive_hwm = 10000;                                  // messages ZeroMQ queues for this subscription
  std::int64_t max_message_bytes = std::int64_t{64} << 20;  // per frame, live and replay
  std::chrono::milliseconds reconnect_max{5000};
};

class ZmqIo {
 public:
  using Id = std::uint64_t;

  ZmqIo();
  ~ZmqIo();  // no callback runs once it returns
  ZmqIo(const ZmqIo&) = delete;
  ZmqIo& operator=(const ZmqIo&) = delete;

  // Every call is thread-safe and returns at once; the I/O thread carries it out in order.
  Id subscribe(SubscriptionConfig config, SourceCallbacks callbacks);
  void unsubscribe(Id id);  // closes its sockets; no callback of it runs afterwards
  void return_credit(Id id, std::size_t count = 1);
  // Opens a fresh DEALER on `endpoint` (closing one in flight) and asks for every batch from
  // `from` on; the replies come to `replay`, read before the live messages while both wait.
  void request_replay(Id id, std::string endpoint, std::uint64_t from);
  void cancel_replay(Id id);

 private:
  struct Source;
  struct Command;

  void post(Command command);
  void wake();
  void run();
  void carry_out(std::vector<Command>& commands);
  void carry_out(Command& command);
  void open(Id id, SubscriptionConfig config, SourceCallbacks callbacks);
  void read_monitor(Source& source);
  void discard_unread(Source& source);
  void redial_due(std::chrono::steady_clock::time_point now);
  std::chrono::milliseconds poll_timeout(std::chrono::steady_clock::time_point now) const;
  void read_live(Source& source);
  void read_replay(Source& source);

  zmq::context_t context_;
  int wake_fd_ = -1;  // eventfd: commands or returned credit are waiting
  std::mutex mutex_;
  std::vector<Command> commands_;                             // guarded by mutex_
  std::map<Id, std::shared_ptr<std::atomic<long>>> credits_;  // guarded by mutex_
  std::atomic<Id> next_id_{1};
  std::atomic<bool> stopping_{false};
  std::map<Id, std::unique_ptr<Source>> sources_;  // the I/O thread's own
  std::thread thread_;
};

}  // namespace kvrelay::engine_io
