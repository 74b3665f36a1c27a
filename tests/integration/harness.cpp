#include "tests/integration/harness.hpp"

#include <grpcpp/support/client_interceptor.h>
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "core/bearer_token.hpp"

namespace kvrelay::test {

namespace {

// Adds `authorization: <value>` to the call it intercepts.
class AuthorizationInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit AuthorizationInterceptor(std::string value) : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(std::string(bearer::kMetadataKey), value_);
    }
    methods->Proceed();
  }

 private:
  std::string value_;
};

// Every call gets a fixed `authorization` value, or "Bearer <token>" with the token a file
// holds as the call starts.
class Authorization final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  static std::unique_ptr<Authorization> fixed(std::string value) {
    return std::unique_ptr<Authorization>(new Authorization(std::move(value), std::nullopt));
  }
  static std::unique_ptr<Authorization> from_file(std::string path) {
    return std::unique_ptr<Authorization>(new Authorization({}, std::move(path)));
  }
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    if (!token_file_) return new AuthorizationInterceptor(value_);
    std::stringstream content;
    content << std::ifstream(*token_file_).rdbuf();
    return new AuthorizationInterceptor(bearer::metadata_value(bearer::token_of_file(content.str()).value()));
  }

 private:
  Authorization(std::string value, std::optional<std::string> token_file)
      : value_(std::move(value)), token_file_(std::move(token_file)) {}
  std::string value_;
  std::optional<std::string> token_file_;
};

grpc::ChannelArguments channel_arguments(bool own_connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

std::shared_ptr<grpc::Channel> channel_to(const std::string& address, bool own_connection = false) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), channel_arguments(own_connection));
}

// A channel whose calls carry what `authorization` adds (nothing when null).
std::shared_ptr<grpc::Channel> ingest_channel_to(const std::string& address,
                                                 std::unique_ptr<Authorization> authorization, bool own_connection) {
  if (!authorization) return channel_to(address, own_connection);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::move(authorization));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), channel_arguments(own_connection), std::move(interceptors));
}

void require_ok(const grpc::Status& status) {
  INFO(status.error_code() << ": " << status.error_message());
  REQUIRE(status.ok());
}

}  // namespace

RelayOptions loopback_options() {
  kvrelay::RelayOptions options;
  options.listen = "127.0.0.1:0";
  options.ingest_listen = "127.0.0.1:0";
  options.dc_id = "dc-test";
  options.expected_unique_blocks = 4096;
  options.instance_id = 7;
  return options;
}

TestRelay::TestRelay(RelayOptions options) {
  auto runtime = RelayRuntime::start(options);
  INFO((runtime ? std::string() : runtime.error().message));
  REQUIRE(runtime.has_value());
  runtime_ = std::move(*runtime);
  wan_channel_ = channel_to(runtime_->wan_address());
  ingest_channel_ = ingest_channel_to(
      runtime_->ingest_address(),
      options.ingest_token_file ? Authorization::from_file(*options.ingest_token_file) : nullptr, false);
  wan_ = v1::KvEventRelay::NewStub(wan_channel_);
  ingest_ = ingest_v1::RelayIngest::NewStub(ingest_channel_);
}

TestRelay::~TestRelay() { shutdown(); }

std::unique_ptr<v1::KvEventRelay::Stub> TestRelay::separate_wan_client() {
  return v1::KvEventRelay::NewStub(channel_to(runtime_->wan_address(), true));
}

std::unique_ptr<ingest_v1::RelayIngest::Stub> TestRelay::ingest_client(std::optional<std::string> authorization) {
  return ingest_v1::RelayIngest::NewStub(ingest_channel_to(
      runtime_->ingest_address(), authorization ? Authorization::fixed(std::move(*authorization)) : nullptr, true));
}

void TestRelay::shutdown() {
  if (runtime_) runtime_->shutdown(std::chrono::milliseconds(2000));
}

ingest_v1::PutWorkerResponse TestRelay::put_worker(const ingest_v1::PutWorkerRequest& request) {
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  require_ok(ingest_->PutWorker(&context, request, &response));
  return response;
}

grpc::Status TestRelay::put_worker_status(const ingest_v1::PutWorkerRequest& request) {
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  return ingest_->PutWorker(&context, request, &response);
}

void TestRelay::remove_worker(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker_id) {
  grpc::ClientContext context;
  ingest_v1::RemoveWorkerRequest request;
  *request.mutable_endpoint() = endpoint;
  request.set_worker_id(worker_id);
  ingest_v1::RemoveWorkerResponse response;
  require_ok(ingest_->RemoveWorker(&context, request, &response));
}

void TestRelay::set_availability(const ingest_v1::EndpointRef& endpoint, std::vector<std::uint64_t> live) {
  require_ok(set_availability_status(endpoint, std::move(live)));
}

grpc::Status TestRelay::set_availability_status(const ingest_v1::EndpointRef& endpoint,
                                                std::vector<std::uint64_t> live) {
  grpc::ClientContext context;
  ingest_v1::SetAvailabilityRequest request;
  *request.mutable_endpoint() = endpoint;
  for (std::uint64_t id : live) request.add_live_worker_ids(id);
  ingest_v1::SetAvailabilityResponse response;
  return ingest_->SetAvailability(&context, request, &response);
}

ingest_v1::RelayState TestRelay::get_state() {
  grpc::ClientContext context;
  ingest_v1::RelayState state;
  require_ok(ingest_->GetState(&context, ingest_v1::GetStateRequest{}, &state));
  return state;
}

ingest_v1::PublishKvEventsResponse TestRelay::publish(const std::vector<ingest_v1::KvEventBatch>& batches) {
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = ingest_->PublishKvEvents(&context, &response);
  for (const auto& batch : batches) REQUIRE(writer->Write(batch));
  REQUIRE(writer->WritesDone());
  require_ok(writer->Finish());
  return response;
}

ingest_v1::ReportLoadResponse TestRelay::report_load(const std::vector<ingest_v1::LoadReport>& reports) {
  grpc::ClientContext context;
  ingest_v1::ReportLoadResponse response;
  auto writer = ingest_->ReportLoad(&context, &response);
  for (const auto& report : reports) REQUIRE(writer->Write(report));
  REQUIRE(writer->WritesDone());
  require_ok(writer->Finish());
  return response;
}

ingest_v1::ReportOutcome TestRelay::report_frontend(const ingest_v1::FrontendLoadReport& report) {
  grpc::ClientContext context;
  ingest_v1::ReportFrontendLoadResponse response;
  require_ok(ingest_->ReportFrontendLoad(&context, report, &response));
  return response.outcome();
}

ingest_v1::ReportSchedulerLoadResponse TestRelay::report_scheduler(const ingest_v1::SchedulerLoadReport& report) {
  grpc::ClientContext context;
  ingest_v1::ReportSchedulerLoadResponse response;
  require_ok(ingest_->ReportSchedulerLoad(&context, report, &response));
  return response;
}

void TestRelay::set_frontends(const std::string& ns, std::vector<std::uint64_t> ids) {
  grpc::ClientContext context;
  ingest_v1::SetFrontendsRequest request;
  request.set_namespace_(ns);
  for (std::uint64_t id : ids) request.add_frontend_ids(id);
  ingest_v1::SetFrontendsResponse response;
  require_ok(ingest_->SetFrontends(&context, request, &response));
}

void TestRelay::set_schedulers(const ingest_v1::EndpointRef& endpoint, std::vector<std::uint64_t> ids) {
  grpc::ClientContext context;
  ingest_v1::SetSchedulersRequest request;
  *request.mutable_endpoint() = endpoint;
  for (std::uint64_t id : ids) request.add_router_ids(id);
  ingest_v1::SetSchedulersResponse response;
  require_ok(ingest_->SetSchedulers(&context, request, &response));
}

std::unique_ptr<StreamReader<v1::KvPoolCatalogUpdate>> watch_catalog(TestRelay& relay, std::string subscriber,
                                                                     v1::KvEventRelay::Stub* client) {
  v1::KvEventRelay::Stub& stub = client != nullptr ? *client : relay.wan();
  v1::WatchKvPoolCatalogRequest request;
  request.set_subscriber_id(std::move(subscriber));
  request.set_contract_marker(kMarker);
  return std::make_unique<StreamReader<v1::KvPoolCatalogUpdate>>(
      request, [&](grpc::ClientContext* c, const auto& r) { return stub.WatchKvPoolCatalog(c, r); });
}

std::unique_ptr<StreamReader<v1::ServingReadinessUpdate>> watch_readiness(TestRelay& relay, std::string subscriber) {
  v1::SubscribeServingReadinessRequest request;
  request.set_subscriber_id(std::move(subscriber));
  request.set_contract_marker(kMarker);
  return std::make_unique<StreamReader<v1::ServingReadinessUpdate>>(
      request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeServingReadiness(c, r); });
}

std::unique_ptr<StreamReader<v1::KvPoolLoadUpdate>> watch_load(TestRelay& relay, std::string subscriber) {
  v1::SubscribeKvPoolLoadRequest request;
  request.set_subscriber_id(std::move(subscriber));
  request.set_contract_marker(kMarker);
  return std::make_unique<StreamReader<v1::KvPoolLoadUpdate>>(
      request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeKvPoolLoad(c, r); });
}

std::unique_ptr<StreamReader<v1::ServingLoadUpdate>> watch_serving_load(TestRelay& relay, std::string subscriber,
                                                                        v1::KvEventRelay::Stub* client) {
  v1::KvEventRelay::Stub& stub = client != nullptr ? *client : relay.wan();
  v1::SubscribeServingLoadRequest request;
  request.set_subscriber_id(std::move(subscriber));
  request.set_contract_marker(kMarker);
  return std::make_unique<StreamReader<v1::ServingLoadUpdate>>(
      request, [&](grpc::ClientContext* c, const auto& r) { return stub.SubscribeServingLoad(c, r); });
}

std::unique_ptr<StreamReader<v1::FilterUpdate>> subscribe_pool(TestRelay& relay, const v1::ProducerIdentity& producer,
                                                               std::string subscriber, v1::KvEventRelay::Stub* client) {
  v1::KvEventRelay::Stub& stub = client != nullptr ? *client : relay.wan();
  v1::SubscribeKvPoolRequest request;
  request.set_subscriber_id(std::move(subscriber));
  *request.mutable_expected_producer() = producer;
  request.set_contract_marker(kMarker);
  return std::make_unique<StreamReader<v1::FilterUpdate>>(
      request, [&](grpc::ClientContext* c, const auto& r) { return stub.SubscribeKvPool(c, r); });
}

ingest_v1::EndpointRef endpoint_ref(const std::string& ns, const std::string& component, const std::string& endpoint) {
  ingest_v1::EndpointRef ref;
  ref.set_namespace_(ns);
  ref.set_component(component);
  ref.set_endpoint(endpoint);
  return ref;
}

ingest_v1::PutWorkerRequest put_worker_request(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker_id,
                                               const WorkerShape& shape) {
  ingest_v1::PutWorkerRequest request;
  *request.mutable_endpoint() = endpoint;
  request.set_worker_id(worker_id);
  auto* card = request.mutable_card();
  card->set_display_name(shape.model);
  card->set_kv_cache_block_size(shape.block_size);
  card->set_worker_type(shape.worker_type);
  card->set_model_type(1);
  for (const auto& term : shape.needs) {
    auto* conjunction = card->add_needs();
    for (auto type : term) conjunction->add_all_of(type);
  }
  card->mutable_runtime_config()->set_data_parallel_size(shape.dp_size);
  if (shape.total_kv_blocks) card->mutable_runtime_config()->set_total_kv_blocks(*shape.total_kv_blocks);
  if (shape.max_num_seqs) card->mutable_runtime_config()->set_max_num_seqs(*shape.max_num_seqs);
  for (const auto& adapter : shape.adapters) {
    auto* a = request.add_adapters();
    a->set_served_name(adapter);
    a->set_lora_name(adapter);
    a->set_max_gpu_lora_count(4);
  }
  if (shape.push_sources) {
    for (std::uint32_t rank = 0; rank < shape.dp_size; ++rank) {
      auto* source = request.add_kv_sources();
      source->set_dp_rank(rank);
      source->mutable_push();
    }
  }
  return request;
}

ingest_v1::KvEventBatch stored_batch(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker_id,
                                     std::uint32_t rank, std::uint64_t epoch, std::uint64_t sequence,
                                     const std::vector<std::pair<std::uint64_t, std::uint64_t>>& blocks,
                                     std::optional<std::uint64_t> parent) {
  ingest_v1::KvEventBatch batch;
  *batch.mutable_endpoint() = endpoint;
  batch.set_worker_id(worker_id);
  batch.set_dp_rank(rank);
  batch.set_source_epoch(epoch);
  batch.set_sequence(sequence);
  auto* stored = batch.add_events()->mutable_stored();
  if (parent) stored->set_parent_block_hash(*parent);
  for (const auto& [engine_id, local_hash] : blocks) {
    auto* block = stored->add_blocks();
    block->set_block_hash(engine_id);
    block->set_tokens_hash(local_hash);
  }
  return batch;
}

v1::KvPoolCatalogUpdate await_catalog(StreamReader<v1::KvPoolCatalogUpdate>& catalog, std::size_t count) {
  auto update =
      catalog.until([&](const auto& u) { return static_cast<std::size_t>(u.snapshot().pools_size()) == count; });
  REQUIRE(update.has_value());
  return *update;
}

v1::ProducerIdentity await_single_pool(StreamReader<v1::KvPoolCatalogUpdate>& catalog) {
  return await_catalog(catalog, 1).snapshot().pools(0).producer();
}

const ingest_v1::PoolState& only_pool(const ingest_v1::RelayState& state) {
  REQUIRE(state.pools_size() == 1);
  return state.pools(0);
}

ingest_v1::PoolState only_pool(TestRelay& relay) { return only_pool(relay.get_state()); }

Replica replicate(TestRelay& relay, const v1::ProducerIdentity& producer) {
  Replica replica(producer);
  auto stream = subscribe_pool(relay, producer);
  while (true) {
    const auto state = relay.get_state();
    const auto& pool = only_pool(state);
    REQUIRE(pool.layout_generation() == producer.layout_generation());
    if (replica.installed() && !pool.publication_pending() && replica.sequence() == pool.sequence()) break;
    const auto frame = stream->next();
    REQUIRE(frame.has_value());
    replica.apply(*frame);
  }
  stream->cancel();
  return replica;
}

std::vector<ingest_v1::KvEventBatch> EventScript::next_batches(std::size_t count) {
  std::vector<ingest_v1::KvEventBatch> batches;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t rank = static_cast<std::uint32_t>(rng_() % ranks_);
    auto& held = held_[rank];
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = endpoint_;
    batch.set_worker_id(worker_id_);
    batch.set_dp_rank(rank);
    batch.set_sequence(sequence_[rank]++);
    for (int e = 0; e < 8; ++e) {
      auto* event = batch.add_events();
      if (held.empty() || rng_() % 3 != 0) {
        store(*event, held);
      } else {
        const std::size_t victim = rng_() % held.size();
        event->mutable_removed()->add_block_hashes(held[victim]);
        held.erase(held.begin() + static_cast<long>(victim));
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

// Blocks of one store form a chain (each the child of the previous), as an engine stores a prompt.
void EventScript::store(ingest_v1::KvEvent& event, std::vector<std::uint64_t>& held) {
  auto* stored = event.mutable_stored();
  for (std::uint32_t b = 0; b < blocks_per_store_; ++b) {
    auto* block = stored->add_blocks();
    block->set_block_hash(rng_());
    block->set_tokens_hash(rng_() % 5000);
  }
  // Removing the head of a chain is enough for the script's bookkeeping: held ids are heads.
  held.push_back(stored->blocks(0).block_hash());
}

}  // namespace kvrelay::test
