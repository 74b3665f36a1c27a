// kvrelay-raw-server: the transport's own limit, for kvrelay-bench --baseline. A minimal gRPC
// C++ server whose only method is KvEventRelay.SubscribeKvPool, raw: every tick it serializes
// one delta-sized FilterUpdate once and hands the same bytes to every open stream, which ends
// with RESOURCE_EXHAUSTED once 16 frames wait for its client (the relay's default outbox).
// No actors, no filter, no catalog: what is left is gRPC streaming the same bytes.
// It takes the flags kvrelay-bench gives a relay it starts (--listen, --ready-file; others are
// ignored), so the bench starts and measures it the same way.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "dynamo/kvrelay/v1/relay.grpc.pb.h"

namespace {

namespace v1 = ::dynamo::kvrelay::v1;
using Frame = std::shared_ptr<const grpc::ByteBuffer>;

constexpr std::size_t kOutboxFrames = 16;

std::uint64_t wall_clock_us() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

class Streams;

// One subscriber: frames queue here until the previous write completes. Every call into the
// reactor is made under `mutex_`, which is recursive in case gRPC runs a reaction inline.
class FrameStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FrameStream(Streams& streams) : streams_(streams) {}
  void offer(const Frame& frame);
  void OnWriteDone(bool ok) override;
  void OnCancel() override { end(grpc::Status::CANCELLED); }
  void OnDone() override;

 private:
  void end(const grpc::Status& status);

  Streams& streams_;
  std::recursive_mutex mutex_;
  std::deque<Frame> outbox_;
  bool writing_ = false;
  bool finished_ = false;
};

// The open streams and the thread that feeds them.
class Streams {
 public:
  void add(FrameStream* stream) {
    std::lock_guard lock(mutex_);
    open_.insert(stream);
  }
  void remove(FrameStream* stream) {
    std::lock_guard lock(mutex_);
    open_.erase(stream);
  }
  // Every `interval` one frame of `payload_bytes`, serialized once, to every open stream.
  void feed(std::size_t payload_bytes, std::chrono::microseconds interval, const std::atomic<bool>& stop) {
    v1::FilterUpdate update;
    update.set_protocol_version(1);
    update.set_kind(v1::FILTER_UPDATE_KIND_DELTA);
    update.set_contract_marker(0x4B565231);
    update.set_payload(std::string(payload_bytes, '\x5a'));
    auto tick = std::chrono::steady_clock::now();
    for (std::uint64_t sequence = 1; !stop; ++sequence, tick += interval) {
      std::this_thread::sleep_until(tick);
      update.set_base_sequence(sequence - 1);
      update.set_sequence(sequence);
      update.set_send_ts_us(wall_clock_us());
      auto frame = std::make_shared<grpc::ByteBuffer>();
      bool own_buffer = false;
      grpc::SerializationTraits<v1::FilterUpdate>::Serialize(update, frame.get(), &own_buffer);
      std::lock_guard lock(mutex_);
      for (auto* stream : open_) stream->offer(frame);
    }
  }

 private:
  std::mutex mutex_;
  std::set<FrameStream*> open_;
};

void FrameStream::offer(const Frame& frame) {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  if (outbox_.size() >= kOutboxFrames) return end(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "lagged"));
  outbox_.push_back(frame);
  if (!writing_) {
    writing_ = true;
    StartWrite(outbox_.front().get());
  }
}

void FrameStream::OnWriteDone(bool ok) {
  std::lock_guard lock(mutex_);
  outbox_.pop_front();
  writing_ = false;
  if (!ok || finished_) return;
  if (!outbox_.empty()) {
    writing_ = true;
    StartWrite(outbox_.front().get());
  }
}

void FrameStream::end(const grpc::Status& status) {
  std::lock_guard lock(mutex_);
  if (std::exchange(finished_, true)) return;
  Finish(status);
}

void FrameStream::OnDone() {
  streams_.remove(this);
  delete this;
}

class RawRelay final
    : public v1::KvEventRelay::WithRawCallbackMethod_SubscribeKvPool<v1::KvEventRelay::CallbackService> {
 public:
  explicit RawRelay(Streams& streams) : streams_(streams) {}
  grpc::ServerWriteReactor<grpc::ByteBuffer>* SubscribeKvPool(grpc::CallbackServerContext*,
                                                              const grpc::ByteBuffer*) override {
    auto* stream = new FrameStream(streams_);
    streams_.add(stream);
    return stream;
  }

 private:
  Streams& streams_;
};

std::atomic<bool> stopping{false};

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0", ready_file;
  std::size_t payload_bytes = 2048;
  std::chrono::microseconds interval{1000};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--listen")
      listen = value;
    else if (flag == "--ready-file")
      ready_file = value;
    else if (flag == "--payload-bytes")
      payload_bytes = std::stoul(value);
    else if (flag == "--interval-us")
      interval = std::chrono::microseconds(std::stoul(value));
  }
  Streams streams;
  RawRelay service(streams);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "kvrelay-raw-server: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  const std::string address = listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
  if (!ready_file.empty()) {
    std::ofstream(ready_file + ".tmp") << "{\"wan\": \"" << address << "\", \"ingest\": \"\"}\n";
    std::filesystem::rename(ready_file + ".tmp", ready_file);
  }
  signal(SIGTERM, [](int) { stopping = true; });
  std::thread feeder([&] { streams.feed(payload_bytes, interval, stopping); });
  feeder.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
