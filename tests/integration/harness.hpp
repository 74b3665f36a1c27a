#pragma once
// An in-process relay on 127.0.0.1 ephemeral ports, with real gRPC clients for both
// planes. Streams are read with blocking reads bounded by a call deadline: a test awaits
// the update it expects, it never sleeps.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "app/relay_runtime.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"
#include "tests/integration/replica.hpp"

namespace kvrelay::test {

namespace v1 = dynamo::kvrelay::v1;
namespace ingest_v1 = ::kvrelay::ingest::v1;

inline constexpr std::uint32_t kMarker = 0x4B565231;
inline constexpr auto kStreamDeadline = std::chrono::seconds(60);

RelayOptions loopback_options();

// With `options.ingest_token_file` set, the relay's ingest client sends the file's token on
// every call, re-read for each call as a feeder given the file would (so it follows rotations).
class TestRelay {
 public:
  explicit TestRelay(RelayOptions options = loopback_options());
  ~TestRelay();

  RelayRuntime& runtime() { return *runtime_; }
  std::shared_ptr<grpc::Channel> wan_channel() const { return wan_channel_; }
  std::shared_ptr<grpc::Channel> ingest_channel() const { return ingest_channel_; }
  v1::KvEventRelay::Stub& wan() { return *wan_; }
  // A WAN client on a connection of its own (HTTP/2 flow control is per connection).
  std::unique_ptr<v1::KvEventRelay::Stub> separate_wan_client();
  ingest_v1::RelayIngest::Stub& ingest() { return *ingest_; }
  // An ingest client on a channel of its own that sends exactly this `authorization` value on
  // every call (none: no credentials at all).
  std::unique_ptr<ingest_v1::RelayIngest::Stub> ingest_client(std::optional<std::string> authorization);

  // Unary ingest calls; REQUIRE success.
  ingest_v1::PutWorkerResponse put_worker(const ingest_v1::PutWorkerRequest& request);
  // The same call unchecked, for requests a test expects refused.
  grpc::Status put_worker_status(const ingest_v1::PutWorkerRequest& request);
  void remove_worker(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker_id);
  void set_availability(const ingest_v1::EndpointRef& endpoint, std::vector<std::uint64_t> live);
  grpc::Status set_availability_status(const ingest_v1::EndpointRef& endpoint, std::vector<std::uint64_t> live);
  ingest_v1::RelayState get_state();
  // One PublishKvEvents stream carrying `batches`, closed; returns the tally.
  ingest_v1::PublishKvEventsResponse publish(const std::vector<ingest_v1::KvEventBatch>& batches);
  ingest_v1::ReportLoadResponse report_load(const std::vector<ingest_v1::LoadReport>& reports);
  // Serving-load inputs; REQUIRE success.
  ingest_v1::ReportOutcome report_frontend(const ingest_v1::FrontendLoadReport& report);
  ingest_v1::ReportSchedulerLoadResponse report_scheduler(const ingest_v1::SchedulerLoadReport& report);
  void set_frontends(const std::string& ns, std::vector<std::uint64_t> ids);
  void set_schedulers(const ingest_v1::EndpointRef& endpoint, std::vector<std::uint64_t> ids);

  void shutdown();

 private:
  std::unique_ptr<RelayRuntime> runtime_;
  std::shared_ptr<grpc::Channel> wan_channel_;
  std::shared_ptr<grpc::Channel> ingest_channel_;
  std::unique_ptr<v1::KvEventRelay::Stub> wan_;
  std::unique_ptr<ingest_v1::RelayIngest::Stub> ingest_;
};

// A server stream with its own context; reads block until a message, the end, or the deadline.
template <class Response>
class StreamReader {
 public:
  template <class Request, class Open>
  StreamReader(const Request& request, Open open) {
    context_.set_deadline(std::chrono::system_clock::now() + kStreamDeadline);
    reader_ = open(&context_, request);
  }

  std::optional<Response> next() {
    Response message;
    if (reader_->Read(&message)) return message;
    return std::nullopt;
  }

  // Reads until `accept` returns true; nullopt if the stream ended first.
  std::optional<Response> until(const std::function<bool(const Response&)>& accept) {
    while (auto message = next()) {
      if (accept(*message)) return message;
    }
    return std::nullopt;
  }

  grpc::Status finish() { return reader_->Finish(); }
  // Reads to the end, then the status code and the kv-relay-error-reason trailer it ended with.
  std::pair<grpc::StatusCode, std::string> ending() {
    while (next()) {
    }
    const auto status = finish();
    return {status.error_code(), reason()};
  }
  // The kv-relay-error-reason trailer, or "" (valid after finish()).
  std::string reason() const;
  void cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<Response>> reader_;
};

template <class Response>
std::string StreamReader<Response>::reason() const {
  const auto& trailers = context_.GetServerTrailingMetadata();
  const auto it = trailers.find("kv-relay-error-reason");
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// `client` is a stub on a channel of the test's own, or the relay's shared one when null.
std::unique_ptr<StreamReader<v1::KvPoolCatalogUpdate>> watch_catalog(TestRelay& relay, std::string subscriber = "test",
                                                                     v1::KvEventRelay::Stub* client = nullptr);
std::unique_ptr<StreamReader<v1::ServingReadinessUpdate>> watch_readiness(TestRelay& relay,
                                                                          std::string subscriber = "test");
std::unique_ptr<StreamReader<v1::KvPoolLoadUpdate>> watch_load(TestRelay& relay, std::string subscriber = "test");
std::unique_ptr<StreamReader<v1::ServingLoadUpdate>> watch_serving_load(TestRelay& relay,
                                                                        std::string subscriber = "test",
                                                                        v1::KvEventRelay::Stub* client = nullptr);
std::unique_ptr<StreamReader<v1::FilterUpdate>> subscribe_pool(TestRelay& relay, const v1::ProducerIdentity& producer,
                                                               std::string subscriber = "test",
                                                               v1::KvEventRelay::Stub* client = nullptr);

// ---- request builders ----

ingest_v1::EndpointRef endpoint_ref(const std::string& ns, const std::string& component,
                                    const std::string& endpoint = "generate");
// The endpoint most tests register their workers under.
inline const ingest_v1::EndpointRef kBackend = endpoint_ref("prod", "backend");

struct WorkerShape {
  std::string model = "llama";
  ingest_v1::WorkerType worker_type = ingest_v1::WORKER_TYPE_AGGREGATED;
  std::vector<std::vector<ingest_v1::WorkerType>> needs;
  std::uint32_t block_size = 4;
  std::uint32_t dp_size = 1;
  std::optional<std::uint64_t> total_kv_blocks;
  std::optional<std::uint64_t> max_num_seqs;
  bool push_sources = true;           // one push source per rank
  std::vector<std::string> adapters;  // served name = LoRA name
};

ingest_v1::PutWorkerRequest put_worker_request(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker_id,
                                               const WorkerShape& shape = {});

ingest_v1::KvEventBatch stored_batch(const ingest_v1::EndpointRef& endpoint, std::uint64_t worker_id,
                                     std::uint32_t rank, std::uint64_t epoch, std::uint64_t sequence,
                                     const std::vector<std::pair<std::uint64_t, std::uint64_t>>& blocks,
                                     std::optional<std::uint64_t> parent = std::nullopt);

// Random stores and removals on the ranks of one worker, as ordered batches of 8 events;
// each store carries `blocks_per_store` blocks.
class EventScript {
 public:
  EventScript(std::uint64_t seed, ingest_v1::EndpointRef endpoint, std::uint64_t worker_id, std::uint32_t ranks,
              std::uint32_t blocks_per_store = 1)
      : rng_(seed),
        endpoint_(std::move(endpoint)),
        worker_id_(worker_id),
        ranks_(ranks),
        blocks_per_store_(blocks_per_store) {}

  std::vector<ingest_v1::KvEventBatch> next_batches(std::size_t count);

 private:
  void store(ingest_v1::KvEvent& event, std::vector<std::uint64_t>& held);

  std::mt19937_64 rng_;
  ingest_v1::EndpointRef endpoint_;
  std::uint64_t worker_id_;
  std::uint32_t ranks_;
  std::uint32_t blocks_per_store_;
  std::map<std::uint32_t, std::vector<std::uint64_t>> held_;
  std::map<std::uint32_t, std::uint64_t> sequence_;
};

// Awaits a catalog holding exactly `count` pools; returns it.
v1::KvPoolCatalogUpdate await_catalog(StreamReader<v1::KvPoolCatalogUpdate>& catalog, std::size_t count);
// Awaits a catalog holding exactly one pool; returns its producer.
v1::ProducerIdentity await_single_pool(StreamReader<v1::KvPoolCatalogUpdate>& catalog);

// The one pool of a GetState answer; REQUIREs that there is exactly one.
const ingest_v1::PoolState& only_pool(const ingest_v1::RelayState& state);
// The one pool the relay holds now.
ingest_v1::PoolState only_pool(TestRelay& relay);

// Installs the relay's one pool at `producer`'s generation and follows it until the replica
// is at the relay's published sequence with nothing pending.
Replica replicate(TestRelay& relay, const v1::ProducerIdentity& producer);

}  // namespace kvrelay::test
