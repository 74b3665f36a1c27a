#pragma once
// kvrelay.ingest.v1.RelayIngest: the DC-local ingest plane. Every call is admitted first: not
// while draining (UNAVAILABLE), only with the bearer token when --ingest-token-file is set
// (UNAUTHENTICATED, grpc_gateway/ingest_auth.hpp), and a client stream only within
// --max-ingest-streams (RESOURCE_EXHAUSTED). Requests are then checked whole before anything
// applies: against the size limits (core/ingest_limits), then structurally
// (core/ingest_validation). A unary call that fails either answers INVALID_ARGUMENT naming the
// field; on a stream, a request above a size limit ends the stream with INVALID_ARGUMENT, and
// a malformed one (or one that does not parse) is counted while the stream goes on. Every call gets an answer: a unary
// call whose answer cannot come (membership gone, or silent past its deadline) fails with UNAVAILABLE, and so does a
// stream whose batches cannot be answered. A call that would pass a count limit is refused with RESOURCE_EXHAUSTED
// (actors/ingest_refusal.hpp): PutWorker and SetAvailability by membership, the four serving-load calls by the
// serving-load window.
#include <caf/all.hpp>

#include <atomic>
#include <expected>
#include <memory>
#include <optional>

#include "actors/load_window.hpp"
#include "actors/membership.hpp"
#include "actors/messages.hpp"
#include "actors/permits.hpp"
#include "actors/serving_load_window.hpp"
#include "core/ingest_limits.hpp"
#include "core/ingest_validation.hpp"
#include "grpc_gateway/ingest_auth.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

struct IngestPeers {
  caf::actor_system* system = nullptr;  // runs the short-lived actor that asks membership per unary call
  MembershipActor membership;
  BatchRouter batches;  // PublishKvEvents hands each batch to its source's lane, on the reading thread
  LoadWindowActor load;
  ServingLoadWindowActor serving_load;
};

struct IngestServiceConfig {
  ingest_check::Limits limits;       // the size limits of one request
  std::size_t max_streams = 4'096;   // --max-ingest-streams: open PublishKvEvents and ReportLoad streams
  std::shared_ptr<IngestAuth> auth;  // none: every caller is admitted
  std::size_t read_window = 64;      // a stream's requests read ahead of their acknowledgements
};

// Every method is registered raw: its requests are read as bytes and parsed here, so that a
// request that does not parse (a string field that is not UTF-8) is refused with
// INVALID_ARGUMENT saying so, counted and logged, rather than answered UNIMPLEMENTED by gRPC
// (a unary call) or taken for the client's end (a stream, grpc_gateway/windowed_reader.hpp).
using ingest_rpc = ingest_v1::RelayIngest;
using IngestCallbacks = ingest_rpc::WithRawCallbackMethod_PutWorker<
    ingest_rpc::WithRawCallbackMethod_RemoveWorker<ingest_rpc::WithRawCallbackMethod_SetAvailability<
        ingest_rpc::WithRawCallbackMethod_PublishKvEvents<ingest_rpc::WithRawCallbackMethod_ReportLoad<
            ingest_rpc::WithRawCallbackMethod_GetState<ingest_rpc::WithRawCallbackMethod_ReportFrontendLoad<
                ingest_rpc::WithRawCallbackMethod_ReportSchedulerLoad<ingest_rpc::WithRawCallbackMethod_SetFrontends<
                    ingest_rpc::WithRawCallbackMethod_SetSchedulers<ingest_rpc::Service>>>>>>>>>>;

class IngestService final : public IngestCallbacks {
 public:
  // `metrics` (may be null) counts the inputs refused or rejected here, before any actor sees them.
  IngestService(IngestPeers peers, IngestServiceConfig config, metrics::RelayMetrics* metrics)
      : peers_(std::move(peers)),
        config_(std::move(config)),
        metrics_(metrics),
        streams_("ingest stream", config_.max_streams) {}

  // A PutWorkerRequest, a PutWorkerResponse.
  grpc::ServerUnaryReactor* PutWorker(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // A RemoveWorkerRequest, a RemoveWorkerResponse.
  grpc::ServerUnaryReactor* RemoveWorker(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // A SetAvailabilityRequest, a SetAvailabilityResponse.
  grpc::ServerUnaryReactor* SetAvailability(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  // A GetStateRequest, a RelayState.
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // KvEventBatch requests, a PublishKvEventsResponse.
  grpc::ServerReadReactor<grpc::ByteBuffer>* PublishKvEvents(grpc::CallbackServerContext* context,
                                                             grpc::ByteBuffer* response) override;
  // LoadReport requests, a ReportLoadResponse.
  grpc::ServerReadReactor<grpc::ByteBuffer>* ReportLoad(grpc::CallbackServerContext* context,
                                                        grpc::ByteBuffer* response) override;

  // A FrontendLoadReport, a ReportFrontendLoadResponse.
  grpc::ServerUnaryReactor* ReportFrontendLoad(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) override;
  // A SchedulerLoadReport, a ReportSchedulerLoadResponse.
  grpc::ServerUnaryReactor* ReportSchedulerLoad(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) override;
  // A SetFrontendsRequest, a SetFrontendsResponse.
  grpc::ServerUnaryReactor* SetFrontends(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // A SetSchedulersRequest, a SetSchedulersResponse.
  grpc::ServerUnaryReactor* SetSchedulers(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;

  // From now on every new call is refused with UNAVAILABLE.
  void begin_drain() { draining_ = true; }

  // The open client streams (PublishKvEvents and ReportLoad), for tests and the runtime.
  const StreamLimit& streams() const { return streams_; }

 private:
  // Why the call may not go on (draining, credentials), before anything of it is read.
  std::optional<grpc::Status> refusal(const grpc::CallbackServerContext& context);
  std::optional<grpc::Status> unauthenticated(const grpc::CallbackServerContext& context);
  // A client stream's permit, or the status that refuses it.
  std::expected<std::shared_ptr<StreamLimit::Permit>, grpc::Status> admit_stream(
      const grpc::CallbackServerContext& context);
  // A unary call being checked: which one, and from whom (for the log).
  struct Call {
    const grpc::CallbackServerContext* context;
    metrics::IngestCall rpc;
  };
  // `bytes` parsed into `request`, or the problem that they do not parse (counted and logged as
  // an invalid request of `call`).
  template <class Request>
  ingest_check::Problem parsed(const Call& call, const grpc::ByteBuffer& bytes, Request& request);
  // parsed(), the size limits, then `structure`: the first problem, counted and logged (a size
  // one as a limit refusal, the others as an invalid request of `call`).
  template <class Request>
  ingest_check::Problem checked(const Call& call, const grpc::ByteBuffer& bytes, Request& request,
                                ingest_check::Problem (*structure)(const Request&));
  ingest_check::Problem invalid(const Call& call, std::string problem);
  ingest_check::Problem checked_report(metrics::ServingLoadSource source, ingest_check::Problem problem);
  // Admits the call, checks it with `check`, then asks `target` with make_message() and
  // finishes with its answer, serialized as Response.
  template <class Response, class Target, class Check, class MakeMessage>
  grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* context, const Target& target,
                                  grpc::ByteBuffer* response, Check check, MakeMessage make_message);
  // unary() for a call whose request checked() judges with `structure`, asked as (atom, request).
  template <class Response, class Request, class Target, class Atom>
  grpc::ServerUnaryReactor* checked_unary(grpc::CallbackServerContext* context, const Target& target,
                                          const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
                                          metrics::IngestCall rpc, ingest_check::Problem (*structure)(const Request&),
                                          Atom atom,
                                          std::optional<metrics::ServingLoadSource> report_source = std::nullopt);

  IngestPeers peers_;
  IngestServiceConfig config_;
  metrics::RelayMetrics* metrics_;
  StreamLimit streams_;
  std::atomic<bool> draining_{false};
};

}  // namespace kvrelay::gateway
