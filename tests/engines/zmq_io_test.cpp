// The engine I/O thread (ingest/zmq_io.hpp) against an in-process fake engine: a replay that
// ZeroMQ refuses costs that replay only, not the thread (and so not the relay).
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>

#include "ingest/fake_engine.hpp"
#include "ingest/zmq_io.hpp"

using namespace kvrelay::engine_io;
using kvrelay::demo::FakeEngine;
using kvrelay::demo::FakeEngineOptions;

namespace {

// What the callbacks of one subscription saw, for the test thread to await.
class Seen {
 public:
  SourceCallbacks callbacks() {
    return {[this](bool connected) { note([&] { connected_ = connected; }); },
            [this](MultipartPtr) { note([&] { ++live_; }); }, [this](MultipartPtr) { note([&] { ++replies_; }); }};
  }
  bool await(const std::function<bool(const Seen&)>& done) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return done(*this); });
  }
  bool connected_ = false;
  int live_ = 0;
  int replies_ = 0;

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
};

}  // namespace

TEST_CASE("zmq io: a replay endpoint ZeroMQ refuses leaves the source and the thread working", "[engines][zmq]") {
  FakeEngine engine(FakeEngineOptions{});
  ZmqIo io;
  Seen seen;
  SubscriptionConfig config;
  config.endpoint = engine.pub_endpoint();
  const auto id = io.subscribe(config, seen.callbacks());
  REQUIRE(seen.await([](const Seen& s) { return s.connected_; }));
  REQUIRE(engine.await_subscribers(1, std::chrono::seconds(30)));

  io.request_replay(id, "tcp://engine", 0);  // no port: libzmq throws on connect (it used to end the process)
  engine.publish({});
  REQUIRE(seen.await([](const Seen& s) { return s.live_ == 1; }));

  io.request_replay(id, engine.replay_endpoint(), 0);  // a good one still runs: its batch, then the end
  CHECK(seen.await([](const Seen& s) { return s.replies_ == 2; }));
  io.unsubscribe(id);
}
