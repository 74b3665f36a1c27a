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

// The two client streams are read as bytes and parsed by their readers
// (grpc_gateway/windowed_reader.hpp), so that a request that does not parse is refused on its
// own instead of ending the stream as if the client had closed it.
using IngestCallbacks = ingest_v1::RelayIngest::WithRawCallbackMethod_PublishKvEvents<
    ingest_v1::RelayIngest::WithRawCallbackMethod_ReportLoad<ingest_v1::RelayIngest::CallbackService>>;

class IngestService final : public IngestCallbacks {
 public:
  // `metrics` (may be null) counts the inputs refused or rejected here, before any actor sees them.
  IngestService(IngestPeers peers, IngestServiceConfig config, metrics::RelayMetrics* metrics)
      : peers_(std::move(peers)),
        config_(std::move(config)),
        metrics_(metrics),
        streams_("ingest stream", config_.max_streams) {}

  grpc::ServerUnaryReactor* PutWorker(grpc::CallbackServerContext* context, const ingest_v1::PutWorkerRequest* request,
                                      ingest_v1::PutWorkerResponse* response) override;
  grpc::ServerUnaryReactor* RemoveWorker(grpc::CallbackServerContext* context,
                                         const ingest_v1::RemoveWorkerRequest* request,
                                         ingest_v1::RemoveWorkerResponse* response) override;
  grpc::ServerUnaryReactor* SetAvailability(grpc::CallbackServerContext* context,
                                            const ingest_v1::SetAvailabilityRequest* request,
                                            ingest_v1::SetAvailabilityResponse* response) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context, const ingest_v1::GetStateRequest* request,
                                     ingest_v1::RelayState* response) override;
  // KvEventBatch requests, a PublishKvEventsResponse.
  grpc::ServerReadReactor<grpc::ByteBuffer>* PublishKvEvents(grpc::CallbackServerContext* context,
                                                             grpc::ByteBuffer* response) override;
  // LoadReport requests, a ReportLoadResponse.
  grpc::ServerReadReactor<grpc::ByteBuffer>* ReportLoad(grpc::CallbackServerContext* context,
                                                        grpc::ByteBuffer* response) override;

  grpc::ServerUnaryReactor* ReportFrontendLoad(grpc::CallbackServerContext* context,
                                               const ingest_v1::FrontendLoadReport* request,
                                               ingest_v1::ReportFrontendLoadResponse* response) override;
  grpc::ServerUnaryReactor* ReportSchedulerLoad(grpc::CallbackServerContext* context,
                                                const ingest_v1::SchedulerLoadReport* request,
                                                ingest_v1::ReportSchedulerLoadResponse* response) override;
  grpc::ServerUnaryReactor* SetFrontends(grpc::CallbackServerContext* context,
                                         const ingest_v1::SetFrontendsRequest* request,
                                         ingest_v1::SetFrontendsResponse* response) override;
  grpc::ServerUnaryReactor* SetSchedulers(grpc::CallbackServerContext* context,
                                          const ingest_v1::SetSchedulersRequest* request,
                                          ingest_v1::SetSchedulersResponse* response) override;

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
  // The size limits, then `structure`: the first problem, counted and logged (a size one as
  // a limit refusal, a structural one as an invalid request of `call`).
  template <class Request>
  ingest_check::Problem checked(metrics::IngestCall call, const Request& request,
                                ingest_check::Problem (*structure)(const Request&));
  ingest_check::Problem checked_report(metrics::ServingLoadSource source, ingest_check::Problem problem);
  // Admits the call, checks it with `check`, then asks `target` and finishes with its answer.
  template <class Response, class Target, class Check, class... Message>
  grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* context, const Target& target, Response* response,
                                  Check check, Message... message);

  IngestPeers peers_;
  IngestServiceConfig config_;
  metrics::RelayMetrics* metrics_;
  StreamLimit streams_;
  std::atomic<bool> draining_{false};
};

}  // namespace kvrelay::gateway
