#pragma once
// A scripted KvEventRelay on 127.0.0.1: each stream sends the messages a test queued for it
// and ends with the status (and kv-relay-error-reason) the test chose, so the consumer can be
// shown every hand-crafted fault the real relay never produces.
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "tests/client/wire_builders.hpp"

namespace kvrelay::test {

struct StreamEndScript {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string reason;  // kv-relay-error-reason trailer; empty = none
};

// What one stream sends, in order; after the last item it stays open until cancelled.
template <class Message>
using StreamScript = std::vector<std::variant<Message, StreamEndScript>>;

class FakeRelay final : public v1::KvEventRelay::Service {
 public:
  // A pool stream's script, given the request and how many earlier requests named that pool.
  using PoolScript = std::function<StreamScript<v1::FilterUpdate>(const v1::SubscribeKvPoolRequest&, int attempt)>;

  FakeRelay();
  ~FakeRelay() override;

  const std::string& address() const { return address_; }
  // Queued for whichever stream of that RPC reads next, or only for its `for_stream`-th stream
  // (1-based): a stream the consumer cancels must not swallow what its successor should read.
  void push_catalog(std::variant<v1::KvPoolCatalogUpdate, StreamEndScript> item, int for_stream = 0);
  void push_readiness(std::variant<v1::ServingReadinessUpdate, StreamEndScript> item, int for_stream = 0);
  void push_load(std::variant<v1::KvPoolLoadUpdate, StreamEndScript> item, int for_stream = 0);
  void push_serving_load(std::variant<v1::ServingLoadUpdate, StreamEndScript> item, int for_stream = 0);
  void set_pool_script(PoolScript script);
  void set_info_marker(std::uint32_t marker);
  // GetRelayInfo ends with `refusal` instead of answering; nullopt: it answers.
  void set_info_refusal(std::optional<StreamEndScript> refusal);
  // GetRelayInfo answers without the relay's identity (an invalid answer of the right contract).
  void set_info_identity(bool present);
  // GetRelayInfo answers with this incarnation (7 until set).
  void set_info_incarnation(std::uint64_t incarnation);
  int pool_requests() const;
  int info_calls() const;  // GetRelayInfo calls answered or refused

  grpc::Status GetRelayInfo(grpc::ServerContext*, const v1::RelayInfoRequest*, v1::RelayInfo* info) override;
  grpc::Status WatchKvPoolCatalog(grpc::ServerContext* context, const v1::WatchKvPoolCatalogRequest*,
                                  grpc::ServerWriter<v1::KvPoolCatalogUpdate>* writer) override;
  grpc::Status SubscribeServingReadiness(grpc::ServerContext* context, const v1::SubscribeServingReadinessRequest*,
                                         grpc::ServerWriter<v1::ServingReadinessUpdate>* writer) override;
  grpc::Status SubscribeKvPoolLoad(grpc::ServerContext* context, const v1::SubscribeKvPoolLoadRequest*,
                                   grpc::ServerWriter<v1::KvPoolLoadUpdate>* writer) override;
  grpc::Status SubscribeServingLoad(grpc::ServerContext* context, const v1::SubscribeServingLoadRequest*,
                                    grpc::ServerWriter<v1::ServingLoadUpdate>* writer) override;
  grpc::Status SubscribeKvPool(grpc::ServerContext* context, const v1::SubscribeKvPoolRequest* request,
                               grpc::ServerWriter<v1::FilterUpdate>* writer) override;

 private:
  template <class Message>
  struct Queued {
    std::variant<Message, StreamEndScript> item;
    int for_stream = 0;
  };
  template <class Message>
  struct Queue {
    std::deque<Queued<Message>> items;
    int streams = 0;
  };

  template <class Message>
  grpc::Status serve(grpc::ServerContext* context, Queue<Message>& queue, grpc::ServerWriter<Message>* writer);
  template <class Message>
  void push(Queue<Message>& queue, std::variant<Message, StreamEndScript> item, int for_stream);
  grpc::Status end(grpc::ServerContext* context, const StreamEndScript& script);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  Queue<v1::KvPoolCatalogUpdate> catalog_;
  Queue<v1::ServingReadinessUpdate> readiness_;
  Queue<v1::KvPoolLoadUpdate> load_;
  Queue<v1::ServingLoadUpdate> serving_load_;
  PoolScript pool_script_;
  std::map<std::string, int> pool_attempts_;
  int pool_requests_ = 0;
  int info_calls_ = 0;
  std::uint32_t info_marker_ = wire::kContractMarker;
  std::optional<StreamEndScript> info_refusal_;
  bool info_identity_ = true;
  std::uint64_t info_incarnation_ = 7;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace kvrelay::test
