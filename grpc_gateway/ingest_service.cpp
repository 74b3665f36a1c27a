#include "grpc_gateway/ingest_service.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/pool_publisher.hpp"
#include "actors/rate_limited_log.hpp"
#include "core/ingest_validation.hpp"
#include "grpc_gateway/status.hpp"
#include "grpc_gateway/windowed_reader.hpp"

namespace kvrelay::gateway {

namespace {

grpc::Status draining_status() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the relay is shutting down"); }

// A client stream refused before anything was read.
template <class Request>
class RefusedRead final : public grpc::ServerReadReactor<Request> {
 public:
  explicit RefusedRead(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// How long a unary call waits for its actor's answer before it fails with UNAVAILABLE.
constexpr auto kAnswerDeadline = std::chrono::seconds(10);

RpcStatus unanswerable(const caf::error& error) {
  return RpcStatus{StatusCode::kUnavailable, "the relay could not answer: " + caf::to_string(error), {}};
}

// Checks the request, then asks `target` (membership, the serving-load window) from a
// short-lived actor: its answer, or the error when it cannot answer (gone, or past the
// deadline), finishes the RPC.
template <class Response, class Target, class... Message>
grpc::ServerUnaryReactor* dispatch_unary(grpc::CallbackServerContext* context, caf::actor_system& system,
                                         const Target& target, Response* response, const ingest_check::Problem& problem,
                                         bool draining, Message... message) {
  auto* reactor = context->DefaultReactor();
  if (draining) {
    reactor->Finish(draining_status());
    return reactor;
  }
  if (problem) {
    reactor->Finish(to_grpc(context, RpcStatus::invalid_argument(*problem)));
    return reactor;
  }
  // The handle is an argument, not a capture: CAF 0.17 dereferences a null argument tuple
  // when a function actor takes none (UBSan reports it).
  system.spawn(
      [=](caf::event_based_actor* self, const Target& asked) {
        self->request(asked, kAnswerDeadline, message...)
            .then(
                [=](Response& answer) {
                  *response = std::move(answer);
                  reactor->Finish(grpc::Status::OK);
                },
                [=](const caf::error& error) { reactor->Finish(to_grpc(context, unanswerable(error))); });
      },
      target);
  return reactor;
}

RateLimitedLog& rejected_input_log() {
  static RateLimitedLog log;
  return log;
}

class EventBatchReader final : public WindowedReader<ingest_v1::KvEventBatch, BatchOutcome> {
 public:
  EventBatchReader(MembershipActor membership, ingest_v1::PublishKvEventsResponse* response,
                   metrics::RelayMetrics* metrics, std::size_t window)
      : WindowedReader(window), membership_(std::move(membership)), response_(response), metrics_(metrics) {}

 protected:
  void forward(ingest_v1::KvEventBatch batch) override {
    const std::int64_t receipt_ns = steady_now_ns();
    if (auto problem = ingest_check::kv_event_batch(batch)) {
      rejected_input_log().warn("rejected KV event batch: " + *problem);
      if (metrics_ != nullptr) metrics_->batch(metrics::BatchResult::kMalformed);
      return gate()->acknowledge(BatchOutcome{false, false, 0});
    }
    auto shared = std::make_shared<const ingest_v1::KvEventBatch>(std::move(batch));
    // A batch nobody could answer (an actor on its way failed) comes back `lost`.
    auto reply = std::make_shared<Reply<BatchOutcome>>(
        [gate = gate()](const BatchOutcome& outcome) { gate->acknowledge(outcome); }, BatchOutcome{.lost = true});
    caf::anon_send(membership_, atoms::batch_atom_v, EventBatchPtr(std::move(shared)), std::move(reply), receipt_ns,
                   SourceTransport::kPush);
  }
  void tally(const BatchOutcome& outcome) override {
    if (outcome.lost) lost_ = true;
    if (outcome.applied) {
      response_->set_batches_applied(response_->batches_applied() + 1);
    } else {
      response_->set_batches_rejected(response_->batches_rejected() + 1);
    }
    if (outcome.source_reset) response_->set_source_resets(response_->source_resets() + 1);
  }
  // A lost batch means an actor on the way failed and the relay is stopping: the stream ends
  // at once rather than when the client closes it.
  std::optional<grpc::Status> early_status() override {
    if (!lost_) return std::nullopt;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the relay could not apply every batch: it is failing");
  }

 private:
  MembershipActor membership_;
  ingest_v1::PublishKvEventsResponse* response_;
  metrics::RelayMetrics* metrics_;
  bool lost_ = false;  // guarded like the response: tally and early_status run under the reader's lock
};

class LoadReportReader final : public WindowedReader<ingest_v1::LoadReport, LoadOutcome> {
 public:
  LoadReportReader(LoadWindowActor load, ingest_v1::ReportLoadResponse* response, metrics::RelayMetrics* metrics,
                   std::size_t window)
      : WindowedReader(window), load_(std::move(load)), response_(response), metrics_(metrics) {}

 protected:
  void forward(ingest_v1::LoadReport report) override {
    if (auto problem = ingest_check::load_report(report)) {
      rejected_input_log().warn("rejected load report: " + *problem);
      if (metrics_ != nullptr) metrics_->load_reports(metrics::LoadReportResult::kMalformed, 1);
      return gate()->acknowledge(LoadOutcome{0, 1});
    }
    LoadReportBatch batch;
    batch.reports.push_back(std::move(report));
    batch.reply = std::make_shared<Reply<LoadOutcome>>(
        [gate = gate()](const LoadOutcome& outcome) { gate->acknowledge(outcome); }, LoadOutcome{0, 1});
    caf::anon_send(load_, atoms::report_atom_v, std::move(batch));
  }
  void tally(const LoadOutcome& outcome) override {
    response_->set_reports_applied(response_->reports_applied() + outcome.applied);
    response_->set_reports_rejected(response_->reports_rejected() + outcome.rejected);
  }

 private:
  LoadWindowActor load_;
  ingest_v1::ReportLoadResponse* response_;
  metrics::RelayMetrics* metrics_;
};

}  // namespace

grpc::ServerUnaryReactor* IngestService::PutWorker(grpc::CallbackServerContext* context,
                                                   const ingest_v1::PutWorkerRequest* request,
                                                   ingest_v1::PutWorkerResponse* response) {
  return dispatch_unary(context, *peers_.system, peers_.membership, response, ingest_check::put_worker(*request),
                        draining_, atoms::put_worker_atom_v, *request);
}

grpc::ServerUnaryReactor* IngestService::RemoveWorker(grpc::CallbackServerContext* context,
                                                      const ingest_v1::RemoveWorkerRequest* request,
                                                      ingest_v1::RemoveWorkerResponse* response) {
  return dispatch_unary(context, *peers_.system, peers_.membership, response, ingest_check::remove_worker(*request),
                        draining_, atoms::remove_worker_atom_v, *request);
}

grpc::ServerUnaryReactor* IngestService::SetAvailability(grpc::CallbackServerContext* context,
                                                         const ingest_v1::SetAvailabilityRequest* request,
                                                         ingest_v1::SetAvailabilityResponse* response) {
  return dispatch_unary(context, *peers_.system, peers_.membership, response, ingest_check::set_availability(*request),
                        draining_, atoms::availability_atom_v, *request);
}

grpc::ServerUnaryReactor* IngestService::GetState(grpc::CallbackServerContext* context,
                                                  const ingest_v1::GetStateRequest*, ingest_v1::RelayState* response) {
  return dispatch_unary(context, *peers_.system, peers_.membership, response, std::nullopt, draining_,
                        atoms::get_state_atom_v);
}

// A serving-load report that fails validation is counted and logged (rate-limited) here.
ingest_check::Problem IngestService::checked_report(metrics::ServingLoadSource source, ingest_check::Problem problem) {
  if (problem) {
    rejected_input_log().warn(fmt::format("rejected {} load report: {}", metrics::label(source), *problem));
    if (metrics_ != nullptr) metrics_->serving_load_report_invalid(source);
  }
  return problem;
}

grpc::ServerUnaryReactor* IngestService::ReportFrontendLoad(grpc::CallbackServerContext* context,
                                                            const ingest_v1::FrontendLoadReport* request,
                                                            ingest_v1::ReportFrontendLoadResponse* response) {
  const auto problem =
      checked_report(metrics::ServingLoadSource::kFrontend, ingest_check::frontend_load_report(*request));
  return dispatch_unary(context, *peers_.system, peers_.serving_load, response, problem, draining_,
                        atoms::frontend_load_atom_v, *request);
}

grpc::ServerUnaryReactor* IngestService::ReportSchedulerLoad(grpc::CallbackServerContext* context,
                                                             const ingest_v1::SchedulerLoadReport* request,
                                                             ingest_v1::ReportSchedulerLoadResponse* response) {
  const auto problem =
      checked_report(metrics::ServingLoadSource::kScheduler, ingest_check::scheduler_load_report(*request));
  return dispatch_unary(context, *peers_.system, peers_.serving_load, response, problem, draining_,
                        atoms::scheduler_load_atom_v, *request);
}

grpc::ServerUnaryReactor* IngestService::SetFrontends(grpc::CallbackServerContext* context,
                                                      const ingest_v1::SetFrontendsRequest* request,
                                                      ingest_v1::SetFrontendsResponse* response) {
  return dispatch_unary(context, *peers_.system, peers_.serving_load, response, ingest_check::set_frontends(*request),
                        draining_, atoms::frontends_atom_v, *request);
}

grpc::ServerUnaryReactor* IngestService::SetSchedulers(grpc::CallbackServerContext* context,
                                                       const ingest_v1::SetSchedulersRequest* request,
                                                       ingest_v1::SetSchedulersResponse* response) {
  return dispatch_unary(context, *peers_.system, peers_.serving_load, response, ingest_check::set_schedulers(*request),
                        draining_, atoms::schedulers_atom_v, *request);
}

grpc::ServerReadReactor<ingest_v1::KvEventBatch>* IngestService::PublishKvEvents(
    grpc::CallbackServerContext*, ingest_v1::PublishKvEventsResponse* response) {
  if (draining_) return new RefusedRead<ingest_v1::KvEventBatch>(draining_status());
  auto* reader = new EventBatchReader(peers_.membership, response, metrics_, read_window_);
  reader->start();
  return reader;
}

grpc::ServerReadReactor<ingest_v1::LoadReport>* IngestService::ReportLoad(grpc::CallbackServerContext*,
                                                                          ingest_v1::ReportLoadResponse* response) {
  if (draining_) return new RefusedRead<ingest_v1::LoadReport>(draining_status());
  auto* reader = new LoadReportReader(peers_.load, response, metrics_, read_window_);
  reader->start();
  return reader;
}

}  // namespace kvrelay::gateway
