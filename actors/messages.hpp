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
#include <utility>
#include <vector>

#include "actors/permits.hpp"
#include "actors/stream_sink.hpp"
#include "core/pool_index.hpp"
#include "core/pool_load.hpp"
#include "core/readiness.hpp"
#include "core/rpc_status.hpp"
#include "core/serialized.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::metrics {
struct PoolStats;
}
namespace kvrelay::engine_io {
struct Multipart;  // ingest/zmq_io.hpp
using MultipartPtr = std::shared_ptr<const Multipart>;
}  // namespace kvrelay::engine_io

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

// An answer owed to a caller that is not an actor (a gRPC reactor reading a client stream).
// Exactly one answer reaches it: the one given, or `unanswered` when the last reference is
// dropped without one (an actor died with the message in its mailbox, or refused it), so a
// caller never waits for an answer that cannot come.
template <class Outcome>
class Reply {
 public:
  Reply(std::function<void(const Outcome&)> deliver, Outcome unanswered)
      : deliver_(std::move(deliver)), unanswered_(std::move(unanswered)) {}
  ~Reply() {
    if (deliver_) deliver_(unanswered_);
  }
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;

  void operator()(const Outcome& outcome) {
    if (auto deliver = std::exchange(deliver_, nullptr)) deliver(outcome);
  }

 private:
  std::function<void(const Outcome&)> deliver_;
  Outcome unanswered_;
};

// The outcome of one KV event batch (the PublishKvEvents stream).
// Whether a batch starts its source over in its pool, and why: the source's own (a new epoch,
// a sequence gap) or the pool's (a new generation since the source's last batch, which holds
// none of the source's blocks).
enum class SourceReset : std::uint8_t { kNone, kSource, kNewGeneration };

struct BatchOutcome {
  bool applied = false;
  SourceReset reset = SourceReset::kNone;  // of an applied batch
  std::uint32_t events_rejected = 0;       // lineage errors inside an applied batch
  bool lost = false;                       // nobody could answer: an actor on its way failed
};
using BatchReplyPtr = std::shared_ptr<Reply<BatchOutcome>>;
using EventBatchPtr = std::shared_ptr<const ingest_v1::KvEventBatch>;

// One KV event source: a dp rank of one worker of a serving endpoint.
struct SourceId {
  EndpointKey endpoint;
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  friend auto operator<=>(const SourceId&, const SourceId&) = default;
};

// How a batch reached the relay: only a source declared with that transport may send it.
enum class SourceTransport : std::uint8_t { kPush, kZmq };

// The outcome of load reports (the ReportLoad stream).
struct LoadOutcome {
  std::uint64_t applied = 0;
  std::uint64_t rejected = 0;
};
struct LoadReportBatch {
  std::vector<ingest_v1::LoadReport> reports;
  std::shared_ptr<Reply<LoadOutcome>> reply;
};

// ---- catalog, readiness, load ----

// Each update is serialized once, by the actor that publishes it, for all of its streams.
using CatalogBroadcast = wire::Serialized<v1::KvPoolCatalogUpdate>;
using ReadinessBroadcast = wire::Serialized<v1::ServingReadinessUpdate>;
using LoadBroadcast = wire::Serialized<v1::KvPoolLoadUpdate>;
using ServingLoadBroadcast = wire::Serialized<v1::ServingLoadUpdate>;
using CatalogUpdatePtr = std::shared_ptr<const CatalogBroadcast>;
using ReadinessUpdatePtr = std::shared_ptr<const ReadinessBroadcast>;
using LoadUpdatePtr = std::shared_ptr<const LoadBroadcast>;
using ServingLoadUpdatePtr = std::shared_ptr<const ServingLoadBroadcast>;

// A pool as the load windows see it.
struct LoadPool {
  PoolFacts facts;
  std::shared_ptr<metrics::PoolStats> stats;  // where its load coverage is published (may be null)
};

struct PoolStateReport {
  ingest_v1::PoolState state;
};

}  // namespace kvrelay

// Local-only messages: none of these is ever serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolSnapshotMsg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolDeltaMsg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::SourceReset)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::RpcStatus)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::SourceKey)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::BatchReplyPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::EventBatchPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::LoadReportBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::BatchOutcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::SourceId)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::EndpointKey)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::engine_io::MultipartPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SourceState)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::CatalogUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ReadinessUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::LoadUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvrelay::readiness::EndpointFacts>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvrelay::LoadPool>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolStateReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::PutWorkerRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::PutWorkerResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::RemoveWorkerRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::RemoveWorkerResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SetAvailabilityRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SetAvailabilityResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::RelayState)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::v1::ProducerIdentity)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ServingLoadUpdatePtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::FrontendLoadReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::ReportFrontendLoadResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SchedulerLoadReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::ReportSchedulerLoadResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SetFrontendsRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SetFrontendsResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SetSchedulersRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::ingest_v1::SetSchedulersResponse)

// One atom means one thing, whichever actor receives it.
CAF_BEGIN_TYPE_ID_BLOCK(kvrelay, caf::first_custom_type_id)
// streams and their transport
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, write_done_atom, "writedone")  // a write completed (ok?)
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, cancelled_atom, "cancelled")   // the client went away
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, end_stream_atom, "endstream")  // end the stream with a status
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, update_atom, "update")         // the latest value for a stream
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, subscribe_atom, "subscribe")   // send updates to this stream
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, heartbeat_atom, "heartbeat")   // a stream's heartbeat is due
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, progress_atom, "progress")     // a snapshot chunk's deadline
// snapshot encoder permits
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, acquire_atom, "acquire")
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, granted_atom, "granted")
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, release_atom, "release")
// pool publication
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, attach_atom, "attach")              // a stream joins the fan-out
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, waiting_atom, "waiting")            // a stream waits to attach
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, publish_atom, "publish")            // the publication delay ran out
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, apply_batch_atom, "applybatch")     // KV events for the pool
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, reset_atom, "reset")                // drop one source's blocks
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, retire_atom, "retire")              // the generation ends
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, pool_state_atom, "poolstate")       // GetState's view of a pool
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, broken_sequence_atom, "brokenseq")  // a stream saw a bad delta
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, generation_fenced_atom, "fenced")   // a publisher fenced itself
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, grow_atom, "grow")                  // a publisher asks for more buckets
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, relayout_atom, "relayout")          // re-lay out as this generation
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, growth_refused_atom, "growrefuse")  // no bigger layout: why
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, growth_due_atom, "growthdue")       // the re-layout interval ran out
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, rebuild_due_atom, "rebuilddue")     // a fenced pool's backoff ran out
// ingest
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, put_worker_atom, "putworker")
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, remove_worker_atom, "rmworker")
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, availability_atom, "avail")
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, get_state_atom, "getstate")
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, report_atom, "report")             // load reports
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, forget_load_atom, "forgetload")    // a worker's load is unknown again
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, forget_reports_atom, "forgetrep")  // what the sender reported is void
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, frontend_load_atom, "feload")      // one frontend's serving-load report
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, scheduler_load_atom, "schedload")  // one router's scheduler report
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, frontends_atom, "frontends")       // a namespace's declared frontends
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, schedulers_atom, "schedulers")     // an endpoint's declared routers
// engine sources (ZeroMQ) and scrapers
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, link_atom, "link")                 // a source's connection came or went
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, frames_atom, "frames")             // a message the engine published
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, replay_atom, "replay")             // a reply of the engine's replay socket
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, replay_deadline_atom, "replaydl")  // a replay ran out of time
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, outcome_atom, "outcome")           // what became of a batch sent on
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, scrape_atom, "scrape")             // a scrape is due, or its result
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, stop_atom, "stop")                 // an engine feed is no longer wanted
// what membership tells the projections
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, catalog_atom, "catalog")       // the complete set of pools
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, facts_atom, "facts")           // every endpoint's readiness facts
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, load_pools_atom, "loadpools")  // the pools load windows cover
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, tick_atom, "tick")             // a load window is due
// lifecycle
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, shutdown_atom, "shutdown")  // the relay drains
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, sample_atom, "sample")      // sample the mailbox depth
// test hooks
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, corrupt_atom, "corrupt")  // break the next delta's sequence
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, evict_atom, "evict")      // drop a fingerprint behind the index
CAF_ADD_ATOM(kvrelay, kvrelay::atoms, crash_atom, "crash")      // throw from a core actor
CAF_END_TYPE_ID_BLOCK(kvrelay)

namespace kvrelay {

// ---- roles: what an actor needs of another, narrower than that actor's whole interface ----

// What a stream's transport tells it.
using StreamTransportActor =
    caf::typed_actor<caf::reacts_to<atoms::write_done_atom, bool>, caf::reacts_to<atoms::cancelled_atom>>;

// A stream as its long-lived source (catalog, topology projector, load window) sees it.
template <class Message>
using UpdateStreamActor = caf::typed_actor<caf::reacts_to<atoms::update_atom, std::shared_ptr<const Message>>,
                                           caf::reacts_to<atoms::end_stream_atom, RpcStatus>>;

// A long-lived source as its streams see it.
template <class Message>
using UpdateSourceActor = caf::typed_actor<caf::reacts_to<atoms::subscribe_atom, UpdateStreamActor<Message>>>;

// A pool stream as its publisher sees it.
using PoolFrameSinkActor = caf::typed_actor<caf::reacts_to<PoolSnapshotMsg>, caf::reacts_to<PoolDeltaMsg>,
                                            caf::reacts_to<atoms::end_stream_atom, RpcStatus>>;

// A pool stream as the snapshot encoder permits see it.
using PermitHolderActor = caf::typed_actor<caf::reacts_to<atoms::granted_atom>>;

// Where engine sources report their connection (membership): a connected source is active,
// and may keep its endpoint's pool materialized. The answer comes once the source's lane
// routes to that pool (actors/source_lanes.hpp), so a source sends no batch before it does.
using SourceLinksActor = caf::typed_actor<caf::reacts_to<atoms::link_atom, SourceId, bool>>;

// Whoever owns a pool's generations (membership), as its publisher sees it: told when the
// generation fenced itself, and asked for a re-layout into `bucket_count` buckets (answered
// with relayout_atom or growth_refused_atom). Both name the publisher's layout generation.
using PoolOwnerActor = caf::typed_actor<caf::reacts_to<atoms::generation_fenced_atom, std::uint64_t>,
                                        caf::reacts_to<atoms::grow_atom, std::uint64_t, std::uint64_t>>;

}  // namespace kvrelay

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::StreamTransportActor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::UpdateStreamActor<kvrelay::CatalogBroadcast>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::UpdateStreamActor<kvrelay::ReadinessBroadcast>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::UpdateStreamActor<kvrelay::LoadBroadcast>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::UpdateStreamActor<kvrelay::ServingLoadBroadcast>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PoolFrameSinkActor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::PermitHolderActor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvrelay::SourceLinksActor)
