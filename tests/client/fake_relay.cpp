#include "tests/client/fake_relay.hpp"

#include <chrono>

namespace kvrelay::test {

FakeRelay::FakeRelay() {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxSendMessageSize(8 << 20);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = "127.0.0.1:" + std::to_string(port);
}

FakeRelay::~FakeRelay() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void FakeRelay::push_catalog(std::variant<v1::KvPoolCatalogUpdate, StreamEndScript> item, int for_stream) {
  push(catalog_, std::move(item), for_stream);
}
void FakeRelay::push_readiness(std::variant<v1::ServingReadinessUpdate, StreamEndScript> item, int for_stream) {
  push(readiness_, std::move(item), for_stream);
}
void FakeRelay::push_load(std::variant<v1::KvPoolLoadUpdate, StreamEndScript> item, int for_stream) {
  push(load_, std::move(item), for_stream);
}

void FakeRelay::push_serving_load(std::variant<v1::ServingLoadUpdate, StreamEndScript> item, int for_stream) {
  push(serving_load_, std::move(item), for_stream);
}

void FakeRelay::set_pool_script(PoolScript script) {
  std::lock_guard lock(mutex_);
  pool_script_ = std::move(script);
}

void FakeRelay::set_info_marker(std::uint32_t marker) {
  std::lock_guard lock(mutex_);
  info_marker_ = marker;
}

void FakeRelay::set_info_refusal(std::optional<StreamEndScript> refusal) {
  std::lock_guard lock(mutex_);
  info_refusal_ = std::move(refusal);
}

void FakeRelay::set_info_identity(bool present) {
  std::lock_guard lock(mutex_);
  info_identity_ = present;
}

void FakeRelay::set_info_incarnation(std::uint64_t incarnation) {
  std::lock_guard lock(mutex_);
  info_incarnation_ = incarnation;
}

int FakeRelay::pool_requests() const {
  std::lock_guard lock(mutex_);
  return pool_requests_;
}

int FakeRelay::info_calls() const {
  std::lock_guard lock(mutex_);
  return info_calls_;
}

template <class Message>
void FakeRelay::push(Queue<Message>& queue, std::variant<Message, StreamEndScript> item, int for_stream) {
  {
    std::lock_guard lock(mutex_);
    queue.items.push_back({std::move(item), for_stream});
  }
  changed_.notify_all();
}

grpc::Status FakeRelay::end(grpc::ServerContext* context, const StreamEndScript& script) {
  if (!script.reason.empty()) context->AddTrailingMetadata("kv-relay-error-reason", script.reason);
  return grpc::Status(script.code, "scripted end");
}

// Sends queued items as they come; a cancelled stream or a stopping server ends the call.
template <class Message>
grpc::Status FakeRelay::serve(grpc::ServerContext* context, Queue<Message>& queue,
                              grpc::ServerWriter<Message>* writer) {
  std::unique_lock lock(mutex_);
  const int stream = ++queue.streams;
  const auto mine = [&] {
    return !queue.items.empty() && (queue.items.front().for_stream == 0 || queue.items.front().for_stream == stream);
  };
  while (true) {
    // The wait is bounded only so that a client's cancellation is noticed; items wake it at once.
    changed_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopping_ || mine(); });
    if (stopping_ || context->IsCancelled()) return grpc::Status::CANCELLED;
    if (!mine()) continue;
    auto item = std::move(queue.items.front().item);
    queue.items.pop_front();
    if (auto* script = std::get_if<StreamEndScript>(&item)) return end(context, *script);
    lock.unlock();
    writer->Write(std::get<Message>(item));
    lock.lock();
  }
}

grpc::Status FakeRelay::GetRelayInfo(grpc::ServerContext* context, const v1::RelayInfoRequest*, v1::RelayInfo* info) {
  std::lock_guard lock(mutex_);
  ++info_calls_;
  if (info_refusal_) return end(context, *info_refusal_);
  info->set_protocol_version(wire::kProtocolVersion);
  if (info_identity_) *info->mutable_relay() = relay_identity(info_incarnation_);
  info->set_contract_marker(info_marker_);
  return grpc::Status::OK;
}

grpc::Status FakeRelay::WatchKvPoolCatalog(grpc::ServerContext* context, const v1::WatchKvPoolCatalogRequest*,
                                           grpc::ServerWriter<v1::KvPoolCatalogUpdate>* writer) {
  return serve(context, catalog_, writer);
}

grpc::Status FakeRelay::SubscribeServingReadiness(grpc::ServerContext* context,
                                                  const v1::SubscribeServingReadinessRequest*,
                                                  grpc::ServerWriter<v1::ServingReadinessUpdate>* writer) {
  return serve(context, readiness_, writer);
}

grpc::Status FakeRelay::SubscribeKvPoolLoad(grpc::ServerContext* context, const v1::SubscribeKvPoolLoadRequest*,
                                            grpc::ServerWriter<v1::KvPoolLoadUpdate>* writer) {
  return serve(context, load_, writer);
}

grpc::Status FakeRelay::SubscribeServingLoad(grpc::ServerContext* context, const v1::SubscribeServingLoadRequest*,
                                             grpc::ServerWriter<v1::ServingLoadUpdate>* writer) {
  return serve(context, serving_load_, writer);
}

grpc::Status FakeRelay::SubscribeKvPool(grpc::ServerContext* context, const v1::SubscribeKvPoolRequest* request,
                                        grpc::ServerWriter<v1::FilterUpdate>* writer) {
  Queue<v1::FilterUpdate> queue;
  {
    std::lock_guard lock(mutex_);
    ++pool_requests_;
    const auto key = request->expected_producer().SerializeAsString();
    const int attempt = pool_attempts_[key]++;
    if (pool_script_) {
      for (auto& item : pool_script_(*request, attempt)) queue.items.push_back({std::move(item), 0});
    }
  }
  return serve(context, queue, writer);
}

}  // namespace kvrelay::test
