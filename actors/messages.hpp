#pragma once
// Every message that crosses between kv-relay's actors, and the one CAF type-ID block.
// Payloads that many receivers share (encoded frames, snapshot images, published updates)
// travel as shared_ptr<const T>: immutable, never copied per receiver.
#include <caf/all.hpp>
#include <caf/type_id.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/permits.hpp"
#include "actors/stream_sink.hpp"
#include "core/pool_index.hpp"
#include "core/pool_load.hpp"
#include "core/readiness.hpp"
#include "core/rpc_status.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::metrics {
struct PoolStats;
}

namespace kvrelay {

namespace v1 = dynamo::kvrelay::v1;
namespace ingest_v1 = ::kvrelay::ingest::v1;

// ---- pool publication ----

// An immutable copy of a pool's bucket words at one sequence, shared by every stream that
// joins at that sequence.
struct SnapshotImage {
  std::uint64_t sequence = 0;
  std::vector<std::uint64_t> words;
};

struct PoolSnapshotMsg {
  std::shared_ptr<const SnapshotImage> image;
};

// One CBI1 delta, encoded once by the publisher and sent as the same bytes to every stream.
struct PoolDeltaMsg {
  std::uint64_t base_sequence = 0;
  std::uint64_t sequence = 0;
  std::shared_ptr<const std::string> payload;
  std::int64_t ingest_receipt_ns = 0;  // steady-clock time the oldest event in it arrived
};

// What a pool stream needs to wrap frames: the identity it serves and the CBI1 format.
struct PoolStreamSpec {
  v1::RelayIdentity relay;
  v1::ProducerIdentity producer;
  std::uint64_t dc_id = 0;
  std::uint64_t seed = 0;
  std::uint64_t bucket_count = 0;
};

// Bounds of a stream's outbox; a frame counts payload + kFrameOverheadBytes bytes.
struct OutboxLimits {
  std::size_t max_frames = 16;
  std::size_t max_bytes = 16u << 20;
  static constexpr std::size_t kFrameOverheadBytes = 256;
};

// ---- ingest ----

// Where the outcome of one KV event batch is reported (the PublishKvEvents stream).
struct BatchOutcome {
  bool applied = false;
  bool source_reset = false;
  std::uint32_t events_rejected = 0;  // lineage errors inside an applied batch
};

class BatchSink {
 public:
  virtual ~BatchSink() = default;
  virtual void batch_done(const BatchOutcome& outcome) = 0;
};

using BatchSinkPtr = std::shared_ptr<BatchSink>;
using EventBatchPtr = std::shared_ptr<const ingest_v1::KvEventBatch>;

// A unary ingest call in flight: the actor fills the response and completes it.
template <class Request, class Response>
struct UnaryCall {
  Request request;
  Response* response = nullptr;  // owned by the transport until complete() runs
  std::function<void(RpcStatus)> complete;
};

// A call the relay makes to itself (loading the topology file): it owns its response.
template <class Request, class Response>
std::shared_ptr<UnaryCall<Request, Response>> internal_call(Request request,
                                                            std::function<void(RpcStatus)> complete) {
  struct Owned : UnaryCall<Request, Response> {
    Response storage;
  };
  auto call = std::make_shared<Owned>();
  call->request = std::move(request);
  call->response = &call->storage;
  call->complete = std::move(complete);
  return call;
}

template <class Request, class Response>
using UnaryCallPtr = std::shared_ptr<UnaryCall<Request, Response>>;

using PutWorkerCall = UnaryCallPtr<ingest_v1::PutWorkerRequest, ingest_v1::PutWorkerResponse>;
using RemoveWorkerCall = UnaryCallPtr<ingest_v1::RemoveWorkerRequest, ingest_v1::RemoveWorkerResponse>;
using SetAvailabilityCall = UnaryCallPtr<ingest_v1::SetAvailabilityRequest, ingest_v1::SetAvailabilityResponse>;
using GetStateCall = UnaryCallPtr<ingest_v1::GetStateRequest, ingest_v1::RelayState>;

struct LoadReportBatch {
  std::vector<ingest_v1::LoadReport> reports;
  std::function<void(std::uint64_t applied, std::uint64_t rejected)> done;
};

// ---- catalog, readiness, load ----

struct CatalogEntry {
  v1::KvPoolDescriptor descriptor;
  caf::actor publisher;
  std::shared_ptr<StreamLimit> subscribers;  // this generation's per-pool stream permits
};

using CatalogUpdatePtr = std::shared_ptr<const v1::KvPoolCatalogUpdate>;
using ReadinessUpdatePtr = std::shared_ptr<const v1::ServingReadinessUpdate>;
using LoadUpdatePtr = std::shared_ptr<const v1::KvPoolLoadUpdate>;
using FilterUpdatePtr = std::shared_ptr<const v1::FilterUpdate>;

// A pool as the load window sees it.
struct LoadPool {
  EndpointKey endpoint;
  v1::ProducerIdentity producer;
  std::map<std::uint64_t, RuntimeConfig> runtime_configs;
  std::shared_ptr<metrics::PoolStats> stats;  // where its load coverage is published (may be null)
};

struct PoolStateReport {
  ingest_v1::PoolState state;
};

}  // namespace kvrelay

// Local-only messages: none of these is ever serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolSnapshotMsg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolDeltaMsg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::RpcStatus)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::SourceKey)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::BatchSinkPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::EventBatchPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PutWorkerCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::RemoveWorkerCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::SetAvailabilityCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::GetStateCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::LoadReportBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvrelay::CatalogEntry>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::CatalogUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ReadinessUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::LoadUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvrelay::readiness::EndpointFacts>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvrelay::LoadPool>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolStateReport)

CAF_BEGIN_TYPE_ID_BLOCK(kvrelay, caf::first_custom_type_id)
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, write_done_atom, "writedone")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, cancelled_atom, "cancelled")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, end_stream_atom, "endstream")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, update_atom, "update")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, subscribe_atom, "subscribe")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, attach_atom, "attach")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, publish_atom, "publish")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, batch_atom, "batch")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, reset_atom, "reset")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, retire_atom, "retire")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, state_atom, "state")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, put_worker_atom, "putworker")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, remove_worker_atom, "rmworker")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, availability_atom, "avail")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, tick_atom, "tick")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, report_atom, "report")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, pools_atom, "pools")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, facts_atom, "facts")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, shutdown_atom, "shutdown")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, heartbeat_atom, "heartbeat")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, acquire_atom, "acquire")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, granted_atom, "granted")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, release_atom, "release")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, progress_atom, "progress")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, fence_atom, "fence")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, corrupt_atom, "corrupt")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, evict_atom, "evict")
  CAF_ADD_ATOM(kvrelay, kvrelay::atoms, sample_atom, "sample")
CAF_END_TYPE_ID_BLOCK(kvrelay)
