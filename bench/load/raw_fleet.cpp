#include "bench/load/raw_fleet.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "dynamo/kvrelay/v1/relay.grpc.pb.h"

namespace kvrelay::bench {
namespace {

namespace v1 = ::dynamo::kvrelay::v1;

double wall_clock_us() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace

struct RawFleet::Client {
  grpc::ClientContext context;
  std::thread thread;
  std::vector<double> latencies_ms;  // the client's thread only, until joined
  grpc::Status status;
};

RawFleet::RawFleet(const std::string& address, std::size_t clients) {
  for (std::size_t i = 0; i < clients; ++i) {
    auto client = std::make_unique<Client>();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own, as a router has
    auto stub = v1::KvEventRelay::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    client->thread = std::thread([this, c = client.get(), stub = std::move(stub)] {
      auto reader = stub->SubscribeKvPool(&c->context, v1::SubscribeKvPoolRequest{});
      v1::FilterUpdate frame;
      for (bool first = true; reader->Read(&frame); first = false) {
        if (first) {
          std::lock_guard lock(mutex_);
          ++flowing_;
          flowing_changed_.notify_all();
        }
        if (!measuring_.load(std::memory_order_acquire)) continue;
        c->latencies_ms.push_back((wall_clock_us() - static_cast<double>(frame.send_ts_us())) / 1e3);
        frames_.fetch_add(1, std::memory_order_relaxed);
      }
      c->status = reader->Finish();
    });
    clients_.push_back(std::move(client));
  }
}

RawFleet::~RawFleet() {
  for (auto& client : clients_) {
    client->context.TryCancel();
    if (client->thread.joinable()) client->thread.join();
  }
}

bool RawFleet::await_flowing(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return flowing_changed_.wait_for(lock, timeout, [&] { return flowing_ == clients_.size(); });
}

FleetTotals RawFleet::finish() {
  measuring_.store(false, std::memory_order_release);
  FleetTotals totals;
  totals.deltas = frames_.load();
  for (auto& client : clients_) {
    client->context.TryCancel();
    client->thread.join();
    totals.lagged_streams += client->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ? 1 : 0;
    totals.latencies_ms.insert(totals.latencies_ms.end(), client->latencies_ms.begin(), client->latencies_ms.end());
  }
  std::sort(totals.latencies_ms.begin(), totals.latencies_ms.end());
  return totals;
}

}  // namespace kvrelay::bench
