#pragma once
// kvrelay.ingest.v1.RelayIngest: the DC-local ingest plane. Requests are checked whole
// (core/ingest_validation) before anything applies; malformed unary calls answer
// INVALID_ARGUMENT naming the field; a bad batch on a stream is counted and the stream
// goes on. Every call gets an answer: a unary call whose answer cannot come (membership gone,
// or silent past its deadline) fails with UNAVAILABLE, and so does a stream whose batches
// cannot be answered.
#include <caf/all.hpp>

#include <atomic>

#include "actors/load_window.hpp"
#include "actors/membership.hpp"
#include "actors/messages.hpp"
#include "actors/serving_load_window.hpp"
#include "core/ingest_validation.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

struct IngestPeers {
  caf::actor_system* system = nullptr;  // runs the short-lived actor that asks membership per unary call
  MembershipActor membership;
  LoadWindowActor load;
  ServingLoadWindowActor serving_load;
};

class IngestService final : public ingest_v1::RelayIngest::CallbackService {
 public:
  // `metrics` (may be null) counts the inputs rejected here, before any actor sees them.
  IngestService(IngestPeers peers, metrics::RelayMetrics* metrics, std::size_t read_window = 64)
      : peers_(std::move(peers)), metrics_(metrics), read_window_(read_window) {}

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
  grpc::ServerReadReactor<ingest_v1::KvEventBatch>* PublishKvEvents(
      grpc::CallbackServerContext* context, ingest_v1::PublishKvEventsResponse* response) override;
  grpc::ServerReadReactor<ingest_v1::LoadReport>* ReportLoad(grpc::CallbackServerContext* context,
                                                             ingest_v1::ReportLoadResponse* response) override;

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

 private:
  ingest_check::Problem checked_report(metrics::ServingLoadSource source, ingest_check::Problem problem);

  IngestPeers peers_;
  metrics::RelayMetrics* metrics_;
  std::size_t read_window_;
  std::atomic<bool> draining_{false};
};

}  // namespace kvrelay::gateway
