// The engine I/O thread (ingest/zmq_io.hpp) against an in-process fake engine: a replay that
// ZeroMQ refuses costs that replay only, not the thread (and so not the relay); replies spend
// credit as live messages do; an oversized frame costs its connection, not memory; what a lost
// connection left unread is not read after the loss; one thread holds hundreds of sources.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "app/open_files.hpp"
#include "ingest/fake_engine.hpp"
#include "ingest/zmq_io.hpp"
#include "tests/app/free_port.hpp"
#include "tests/skip.hpp"

using namespace kvrelay::engine_io;
using kvrelay::demo::FakeEngine;
using kvrelay::demo::FakeEngineOptions;

namespace {

// What the callbacks of one subscription saw.
struct Counts {
  bool connected = false;
  int connects = 0;
  int disconnects = 0;
  int live = 0;
  int replies = 0;
  std::uint64_t last_replay = 0;           // the request the last reply answered
  std::vector<std::string> live_payloads;  // each live message's last frame
};

// The callbacks' counts, for the test thread to await or read.
class Seen {
 public:
  SourceCallbacks callbacks() {
    return {[this](bool connected) {
              note([&] {
                counts_.connected = connected;
                ++(connected ? counts_.connects : counts_.disconnects);
              });
            },
            [this](MultipartPtr message) {
              note([&] {
                ++counts_.live;
                counts_.live_payloads.push_back(message->frames.back().to_string());
              });
            },
            [this](MultipartPtr, std::uint64_t replay) {
              note([&] {
                ++counts_.replies;
                counts_.last_replay = replay;
              });
            }};
  }
  bool await(const std::function<bool(const Counts&)>& done) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return done(counts_); });
  }
  Counts counts() {
    std::lock_guard lock(mutex_);
    return counts_;
  }

 private:
  template <class Change>
  void note(Change change) {
    {
      std::lock_guard lock(mutex_);
      change();
    }
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  Counts counts_;
};

// Subscribes `seen` to `engine`'s PUB socket with `config` (its endpoint set here) and waits
// until the connection's handshake is done.
ZmqIo::Id subscribe_connected(ZmqIo& io, const FakeEngine& engine, Seen& seen, SubscriptionConfig config = {}) {
  config.endpoint = engine.pub_endpoint();
  const auto id = io.subscribe(config, seen.callbacks());
  REQUIRE(seen.await([](const Counts& s) { return s.connected; }));
  return id;
}

}  // namespace

TEST_CASE("zmq io: a replay endpoint ZeroMQ refuses leaves the source and the thread working", "[engines][zmq]") {
  FakeEngine engine(FakeEngineOptions{});
  ZmqIo io;
  Seen seen;
  const auto id = subscribe_connected(io, engine, seen);
  REQUIRE(engine.await_subscribers(1, std::chrono::seconds(30)));

  io.request_replay(id, "tcp://engine", 0);  // no port: libzmq throws on connect (it used to end the process)
  engine.publish({});
  REQUIRE(seen.await([](const Counts& s) { return s.live == 1; }));

  io.request_replay(id, engine.replay_endpoint(), 0);  // a good one still runs: its batch, then the end
  CHECK(seen.await([](const Counts& s) { return s.replies == 2; }));
  CHECK(seen.counts().last_replay == 2);  // the refused one was the first request
  io.unsubscribe(id);
}

TEST_CASE("zmq io: one I/O thread holds more sources than ZeroMQ's default of 1 023 sockets allows", "[engines][zmq]") {
  constexpr std::size_t kSources = 400;  // three sockets each: 1 200
  // About four descriptors a source here, and one more for the engine's end of its connection.
  const auto open_files = kvrelay::raise_open_files_limit();
  if (open_files.now < 5 * kSources + 256) KVRELAY_SKIP("the hard limit on open files is below 2 256");
  FakeEngine engine(FakeEngineOptions{});
  Seen seen;  // before the thread that calls it, so that it outlives it
  ZmqIo io;
  SubscriptionConfig config;
  config.endpoint = engine.pub_endpoint();
  std::vector<ZmqIo::Id> ids;
  for (std::size_t source = 0; source < kSources; ++source) ids.push_back(io.subscribe(config, seen.callbacks()));
  CHECK(engine.await_subscribers(kSources, std::chrono::seconds(30)));
  for (const ZmqIo::Id id : ids) io.unsubscribe(id);
}

TEST_CASE("zmq io: replay replies are read only against credit, as live messages are", "[engines][zmq]") {
  FakeEngine engine(FakeEngineOptions{});
  for (int batch = 0; batch < 5; ++batch) engine.publish({});  // nobody listens: kept for replay only
  ZmqIo io;
  Seen seen;
  SubscriptionConfig config;
  config.credit = 2;
  const auto id = subscribe_connected(io, engine, seen, config);
  // Another engine on the same I/O thread: a live message of it read after a check means the
  // thread polled again since, and would have read any reply it had credit for.
  FakeEngine other(FakeEngineOptions{});
  Seen other_seen;
  const auto other_id = subscribe_connected(io, other, other_seen);
  REQUIRE(other.await_subscribers(1, std::chrono::seconds(30)));
  int other_live = 0;
  const auto another_poll = [&] {
    other.publish({});
    ++other_live;
    REQUIRE(other_seen.await([&](const Counts& s) { return s.live == other_live; }));
  };

  io.request_replay(id, engine.replay_endpoint(), 0);  // five batches, then the end: six replies
  REQUIRE(seen.await([](const Counts& s) { return s.replies >= 2; }));
  another_poll();
  CHECK(seen.counts().replies == 2);
  io.return_credit(id, 1);
  REQUIRE(seen.await([](const Counts& s) { return s.replies >= 3; }));
  another_poll();
  CHECK(seen.counts().replies == 3);
  io.return_credit(id, 3);
  CHECK(seen.await([](const Counts& s) { return s.replies == 6; }));
  io.unsubscribe(id);
  io.unsubscribe(other_id);
}

TEST_CASE("zmq io: a frame above the size bound ends its connection unread, and the thread dials it again",
          "[engines][zmq]") {
  FakeEngine engine(FakeEngineOptions{});
  ZmqIo io;
  Seen seen;
  SubscriptionConfig config;
  config.max_message_bytes = 4096;
  const auto id = subscribe_connected(io, engine, seen, config);
  REQUIRE(engine.await_subscribers(1, std::chrono::seconds(30)));

  engine.publish_payload(std::make_shared<const std::string>(8192, 'x'));
  CHECK(seen.await([](const Counts& s) { return s.disconnects == 1; }));
  // libzmq ends a session whose peer broke the protocol and does not dial it again: the I/O
  // thread does, after its grace.
  CHECK(seen.await([](const Counts& s) { return s.connects == 2; }));
  CHECK(seen.counts().live == 0);
  REQUIRE(engine.await_subscriptions_made(2, std::chrono::seconds(30)));
  engine.publish({});
  CHECK(seen.await([](const Counts& s) { return s.live == 1; }));
  io.unsubscribe(id);
}

namespace {

// An engine's PUB socket as a plain XPUB, so that the test can wait for the relay's
// subscription before it publishes; it sends everything queued before it closes.
class PlainPublisher {
 public:
  PlainPublisher(zmq::context_t& context, const std::string& endpoint) : socket_(context, zmq::socket_type::xpub) {
    socket_.set(zmq::sockopt::linger, 10000);
    socket_.set(zmq::sockopt::rcvtimeo, 30000);  // a subscription that never comes fails the test
    socket_.bind(endpoint);
  }
  std::string endpoint() const { return socket_.get(zmq::sockopt::last_endpoint); }
  void await_subscription() {
    zmq::message_t subscription;
    REQUIRE(socket_.recv(subscription));
  }
  void send(const std::string& text) { socket_.send(zmq::buffer(text), zmq::send_flags::none); }
  void close() { socket_.close(); }

 private:
  zmq::socket_t socket_;
};

}  // namespace

TEST_CASE("zmq io: what a lost connection delivered and nobody read is discarded, not read after the loss",
          "[engines][zmq]") {
  zmq::context_t context;
  // A port below the ephemeral range: between the two publishers nothing else (an outgoing
  // connection, the subscriber's own redial) can take it.
  PlainPublisher first(context, "tcp://127.0.0.1:" + std::to_string(free_port()));
  const std::string endpoint = first.endpoint();
  ZmqIo io;
  Seen seen;
  SubscriptionConfig config;
  config.endpoint = endpoint;
  config.credit = 1;  // the source takes one message; the rest wait in ZeroMQ's queue
  const auto id = io.subscribe(config, seen.callbacks());
  REQUIRE(seen.await([](const Counts& s) { return s.connected; }));
  first.await_subscription();
  for (int i = 0; i < 5; ++i) first.send("old-" + std::to_string(i));
  REQUIRE(seen.await([](const Counts& s) { return s.live == 1; }));
  first.close();  // the engine dies after sending all five: four reached the queue unread
  REQUIRE(seen.await([](const Counts& s) { return s.disconnects == 1; }));
  io.return_credit(id, 1);

  PlainPublisher second(context, endpoint);  // a new process on the same address
  REQUIRE(seen.await([](const Counts& s) { return s.connects == 2; }));
  second.await_subscription();
  second.send("new-0");
  REQUIRE(seen.await([](const Counts& s) { return s.live == 2; }));
  CHECK(seen.counts().live_payloads == std::vector<std::string>{"old-0", "new-0"});
  io.unsubscribe(id);
}

namespace {

void ignore_signal(int) {}

// Blocks (or unblocks) SIGUSR1 in the calling thread; threads started meanwhile inherit it.
void block_sigusr1(bool block) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  REQUIRE(pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr) == 0);
}

}  // namespace

TEST_CASE("zmq io: a handled signal that interrupts the thread's poll costs nothing", "[engines][zmq]") {
  struct sigaction handler {};
  handler.sa_handler = ignore_signal;  // no SA_RESTART: a poll it interrupts fails with EINTR
  struct sigaction previous {};
  REQUIRE(sigaction(SIGUSR1, &handler, &previous) == 0);
  block_sigusr1(true);  // the fake engine's threads never take it
  FakeEngine engine(FakeEngineOptions{});
  block_sigusr1(false);
  ZmqIo io;  // the one thread of the process that takes it (libzmq's own threads block every signal)
  block_sigusr1(true);
  Seen seen;
  const auto id = subscribe_connected(io, engine, seen);
  REQUIRE(engine.await_subscribers(1, std::chrono::seconds(30)));

  for (int round = 1; round <= 10; ++round) {
    REQUIRE(kill(getpid(), SIGUSR1) == 0);
    engine.publish({});
    REQUIRE(seen.await([round](const Counts& s) { return s.live == round; }));
  }
  io.unsubscribe(id);
  block_sigusr1(false);
  sigaction(SIGUSR1, &previous, nullptr);
}
