#include "grpc_gateway/ingest_service.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/ingest_refusal.hpp"
#include "actors/pool_publisher.hpp"
#include "core/bearer_token.hpp"
#include "core/ingest_validation.hpp"
#include "core/rate_limited_log.hpp"
#include "grpc_gateway/status.hpp"
#include "grpc_gateway/windowed_reader.hpp"

namespace kvrelay::gateway {

namespace {

grpc::Status draining_status() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the relay is shutting down"); }

constexpr const char* kMissingCredentials =
    "this relay's ingest API needs credentials: send the metadata 'authorization: Bearer <token>' with the token of "
    "its --ingest-token-file";
constexpr const char* kInvalidCredentials =
    "the ingest credentials are not valid: 'authorization' must be 'Bearer <token>' with the token of the relay's "
    "--ingest-token-file";

// How long a unary call waits for its actor's answer before it fails with UNAVAILABLE. GetState's
// two rounds start when membership takes the request: a membership that takes it within the
// 2 s left over answers in part rather than the call failing (a backlog longer than that, as
// in a storm of PutWorker calls, still fails it).
constexpr auto kAnswerDeadline = std::chrono::seconds(10);
static_assert(2 * kStateRoundDeadline + std::chrono::seconds(2) <= kAnswerDeadline,
              "GetState's two rounds leave membership time to take the request");

// An actor's error answer: a refusal by a count limit, or an actor that could not answer.
RpcStatus status_of(const caf::error& error) {
  if (auto refusal = ingest_refusal_message(error)) return {StatusCode::kResourceExhausted, std::move(*refusal), {}};
  return RpcStatus{StatusCode::kUnavailable, "the relay could not answer: " + caf::to_string(error), {}};
}

RateLimitedLog& rejected_input_log() {
  static RateLimitedLog log;
  return log;
}

// Apart from rejected input, so that a caller without credentials cannot hide bad input.
RateLimitedLog& refused_caller_log() {
  static RateLimitedLog log;
  return log;
}

metrics::IngestLimit label_of(ingest_check::Limit limit) {
  switch (limit) {
    case ingest_check::Limit::kBatchEvents:
      return metrics::IngestLimit::kBatchEvents;
    case ingest_check::Limit::kEventBlocks:
      return metrics::IngestLimit::kEventBlocks;
    case ingest_check::Limit::kEventTokens:
      return metrics::IngestLimit::kEventTokens;
    case ingest_check::Limit::kStringBytes:
      break;
  }
  return metrics::IngestLimit::kStringBytes;
}

// A request above a size limit: counted and logged (rate-limited); its message is the
// INVALID_ARGUMENT that refuses it.
std::string refused_oversize(metrics::RelayMetrics* metrics, const google::protobuf::Message& request,
                             const ingest_check::LimitExceeded& over, std::string_view peer) {
  rejected_input_log().warn(
      [&] { return fmt::format("refused {} from {}: {}", request.GetDescriptor()->name(), peer, over.message); });
  if (metrics != nullptr) metrics->ingest_limit_refused(label_of(over.limit));
  return over.message;
}

// The `authorization` metadata values of a call.
std::vector<std::string_view> authorization_of(const grpc::CallbackServerContext& context) {
  std::vector<std::string_view> presented;
  const auto [first, last] =
      context.client_metadata().equal_range(grpc::string_ref(bearer::kMetadataKey.data(), bearer::kMetadataKey.size()));
  for (auto it = first; it != last; ++it) presented.emplace_back(it->second.data(), it->second.size());
  return presented;
}

// A verdict on a caller's credentials: nothing when accepted, or else the UNAUTHENTICATED that
// ends its call (counted and logged, rate-limited).
std::optional<grpc::Status> refused_credentials(IngestAuth::Verdict verdict, metrics::RelayMetrics* metrics,
                                                const std::string& peer) {
  if (verdict == IngestAuth::Verdict::kAccepted) return std::nullopt;
  const bool missing = verdict == IngestAuth::Verdict::kMissing;
  if (metrics != nullptr) {
    metrics->ingest_auth_failed(missing ? metrics::AuthFailure::kMissing : metrics::AuthFailure::kInvalid);
  }
  refused_caller_log().warn(
      fmt::format("refused an ingest call from {}: {} credentials", peer, missing ? "no" : "invalid"));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, missing ? kMissingCredentials : kInvalidCredentials);
}

// What an admitted stream presented, checked again for each of its messages: a rotated token
// ends the streams opened with the old one at their next message.
class StreamCredentials {
 public:
  // Without `auth` the ingest API takes every caller.
  StreamCredentials(std::shared_ptr<IngestAuth> auth, const grpc::CallbackServerContext& context)
      : auth_(std::move(auth)) {
    if (!auth_) return;
    peer_ = context.peer();
    for (const std::string_view value : authorization_of(context)) presented_.emplace_back(value);
  }
  std::optional<grpc::Status> refused(metrics::RelayMetrics* metrics) const {
    if (!auth_) return std::nullopt;
    return refused_credentials(auth_->recheck({presented_.begin(), presented_.end()}), metrics, peer_);
  }

 private:
  std::shared_ptr<IngestAuth> auth_;
  std::vector<std::string> presented_;
  std::string peer_;
};

// Why bytes that do not parse as a Request are refused.
template <class Request>
std::string unparsable() {
  return "the request does not parse as a " + Request::descriptor()->full_name() +
         " (a string field that is not valid UTF-8, or the bytes of another message)";
}

// What a stream's reader is told of one request: the outcome its actor answered, or the status
// that ends the stream unanswered: a request above a size limit (INVALID_ARGUMENT: the feeder
// sends what this relay does not take, and going on would only turn the loss into a sequence
// gap), or credentials no longer in force (UNAUTHENTICATED).
template <class Outcome>
struct Acknowledgement {
  Outcome outcome;
  std::optional<grpc::Status> ends_stream;
};

struct StreamSettings {
  ingest_check::Limits limits;
  std::size_t read_window = 64;
  metrics::RelayMetrics* metrics = nullptr;
  StreamCredentials credentials;
  std::string peer;  // the feeder, as the relay's log lines name it
};

// What both ingest streams share: a request refused on its own (its size, or credentials no
// longer in force) is acknowledged at once and ends the stream; every other is answered with
// an Outcome, which the derived reader counts in its Response.
template <class Request, class Outcome, class Response>
class IngestReader : public WindowedReader<Request, Acknowledgement<Outcome>> {
  using Ack = Acknowledgement<Outcome>;

 public:
  IngestReader(grpc::ByteBuffer* wire_response, StreamSettings settings, std::shared_ptr<StreamLimit::Permit> permit)
      : WindowedReader<Request, Ack>(settings.read_window, std::move(permit)),
        settings_(std::move(settings)),
        wire_response_(wire_response) {}

 protected:
  // One answer into the response. Runs under the reader's lock, as tally(): bookkeeping only.
  virtual void count(const Outcome& outcome) = 0;
  // Why the stream ends now though no request ended it. Runs under the reader's lock.
  virtual std::optional<grpc::Status> failing() { return std::nullopt; }

  // Whether `request` (null: it did not parse) ends the stream; it is then answered so, and
  // nothing is handed on.
  bool ends_stream(const Request* request) {
    std::optional<grpc::Status> ended = settings_.credentials.refused(settings_.metrics);
    if (!ended && request != nullptr) {
      if (auto over = ingest_check::oversize(*request, settings_.limits)) {
        ended = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             refused_oversize(settings_.metrics, *request, *over, settings_.peer));
      }
    }
    if (ended) this->gate()->acknowledge(Ack{{}, std::move(ended)});
    return ended.has_value();
  }
  // What is wrong with `request` on its own (null: it did not parse), by `structure` if it parsed.
  static ingest_check::Problem malformed(const Request* request, ingest_check::Problem (*structure)(const Request&)) {
    if (request != nullptr) return structure(*request);
    return unparsable<Request>();
  }
  void answer(const Outcome& outcome) { this->gate()->acknowledge(Ack{outcome, std::nullopt}); }
  // What an actor answers through; `unanswered` goes back if it is dropped unanswered.
  std::shared_ptr<Reply<Outcome>> reply(Outcome unanswered) {
    return std::make_shared<Reply<Outcome>>(
        [gate = this->gate()](const Outcome& outcome) {
          gate->acknowledge(Ack{outcome, std::nullopt});
        },
        std::move(unanswered));
  }
  metrics::RelayMetrics* metrics() const { return settings_.metrics; }
  const std::string& peer() const { return settings_.peer; }
  // Written by count(), under the reader's lock.
  Response& response() { return response_; }

 private:
  void tally(const Ack& ack) final {
    if (ack.ends_stream) {
      ending_ = ack.ends_stream;
      return;
    }
    count(ack.outcome);
  }
  std::optional<grpc::Status> early_status() final { return ending_ ? ending_ : failing(); }
  void respond() final { write_response(response_, wire_response_); }

  StreamSettings settings_;
  grpc::ByteBuffer* wire_response_;  // the call's, written once as the stream ends OK
  // Guarded like the response: tally runs under the reader's lock.
  Response response_;
  std::optional<grpc::Status> ending_;
};

class EventBatchReader final
    : public IngestReader<ingest_v1::KvEventBatch, BatchOutcome, ingest_v1::PublishKvEventsResponse> {
 public:
  EventBatchReader(BatchRouter router, grpc::ByteBuffer* response, StreamSettings settings,
                   std::shared_ptr<StreamLimit::Permit> permit)
      : IngestReader(response, std::move(settings), std::move(permit)), router_(std::move(router)) {}

 protected:
  void forward(EventBatchPtr batch) override {
    const std::int64_t receipt_ns = steady_now_ns();
    if (ends_stream(batch.get())) return;
    if (auto problem = malformed(batch.get(), &ingest_check::kv_event_batch)) {
      rejected_input_log().warn([&] { return fmt::format("rejected KV event batch from {}: {}", peer(), *problem); });
      if (metrics() != nullptr) metrics()->batch(metrics::BatchResult::kMalformed);
      return answer(BatchOutcome{});
    }
    // A batch nobody could answer (an actor on its way failed) comes back `lost`.
    router_.route({std::move(batch), reply(BatchOutcome{.lost = true}), receipt_ns, SourceTransport::kPush, {}});
  }
  void count(const BatchOutcome& outcome) override {
    if (outcome.lost) lost_ = true;
    auto& counts = response();
    if (outcome.applied) {
      counts.set_batches_applied(counts.batches_applied() + 1);
    } else {
      counts.set_batches_rejected(counts.batches_rejected() + 1);
    }
    if (outcome.reset != SourceReset::kNone) counts.set_source_resets(counts.source_resets() + 1);
  }
  // A lost batch (an actor on the way failed and the relay is stopping): the stream ends at
  // once rather than when the client closes it.
  std::optional<grpc::Status> failing() override {
    if (!lost_) return std::nullopt;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the relay could not apply every batch: it is failing");
  }

 private:
  BatchRouter router_;
  bool lost_ = false;  // guarded like the response
};

class LoadReportReader final : public IngestReader<ingest_v1::LoadReport, LoadOutcome, ingest_v1::ReportLoadResponse> {
 public:
  LoadReportReader(LoadWindowActor load, grpc::ByteBuffer* response, StreamSettings settings,
                   std::shared_ptr<StreamLimit::Permit> permit)
      : IngestReader(response, std::move(settings), std::move(permit)), load_(std::move(load)) {}

 protected:
  void forward(std::shared_ptr<const ingest_v1::LoadReport> report) override {
    if (ends_stream(report.get())) return;
    if (auto problem = malformed(report.get(), &ingest_check::load_report)) {
      rejected_input_log().warn([&] { return fmt::format("rejected load report from {}: {}", peer(), *problem); });
      if (metrics() != nullptr) metrics()->load_reports(metrics::LoadReportResult::kMalformed, 1);
      return answer(LoadOutcome{0, 1});
    }
    LoadReportBatch batch;
    batch.reports.push_back(*report);
    batch.reply = reply(LoadOutcome{0, 1});
    caf::anon_send(load_, atoms::report_atom_v, std::move(batch));
  }
  void count(const LoadOutcome& outcome) override {
    auto& counts = response();
    counts.set_reports_applied(counts.reports_applied() + outcome.applied);
    counts.set_reports_rejected(counts.reports_rejected() + outcome.rejected);
  }

 private:
  LoadWindowActor load_;
};

}  // namespace

// ---- admission ----

std::optional<grpc::Status> IngestService::refusal(const grpc::CallbackServerContext& context) {
  if (draining_) return draining_status();
  return unauthenticated(context);
}

std::optional<grpc::Status> IngestService::unauthenticated(const grpc::CallbackServerContext& context) {
  if (!config_.auth) return std::nullopt;
  return refused_credentials(config_.auth->check(authorization_of(context)), metrics_, context.peer());
}

std::expected<std::shared_ptr<StreamLimit::Permit>, grpc::Status> IngestService::admit_stream(
    const grpc::CallbackServerContext& context) {
  if (auto refused = refusal(context)) return std::unexpected(std::move(*refused));
  if (auto permit = streams_.try_acquire()) return permit;
  const std::string message =
      fmt::format("the relay has {} open ingest streams, the most --max-ingest-streams ({}) allows", streams_.in_use(),
                  streams_.max());
  refused_caller_log().warn(fmt::format("refused an ingest stream from {}: {}", context.peer(), message));
  if (metrics_ != nullptr) metrics_->ingest_limit_refused(metrics::IngestLimit::kIngestStreams);
  return std::unexpected(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message));
}

template <class Request>
ingest_check::Problem IngestService::parsed(const Call& call, const grpc::ByteBuffer& bytes, Request& request) {
  if (read_message(bytes, request)) return std::nullopt;
  return invalid(call, unparsable<Request>());
}

template <class Request>
ingest_check::Problem IngestService::checked(const Call& call, const grpc::ByteBuffer& bytes, Request& request,
                                             ingest_check::Problem (*structure)(const Request&)) {
  if (auto problem = parsed(call, bytes, request)) return problem;
  if (auto over = ingest_check::oversize(request, config_.limits)) {
    return refused_oversize(metrics_, request, *over, call.context->peer());
  }
  if (auto problem = structure(request)) return invalid(call, std::move(*problem));
  return std::nullopt;
}

ingest_check::Problem IngestService::invalid(const Call& call, std::string problem) {
  rejected_input_log().warn(
      [&] { return fmt::format("rejected {} from {}: {}", metrics::label(call.rpc), call.context->peer(), problem); });
  if (metrics_ != nullptr) metrics_->ingest_request_invalid(call.rpc);
  return problem;
}

// A serving-load report refused by its checks also counts among the reports' outcomes.
ingest_check::Problem IngestService::checked_report(metrics::ServingLoadSource source, ingest_check::Problem problem) {
  if (problem && metrics_ != nullptr) metrics_->serving_load_report_invalid(source);
  return problem;
}

// Asks `target` (membership, the serving-load window) from a short-lived actor with the
// message make_message() builds once `check` passed: its answer (serialized as the call's
// Response), or the error when it cannot answer (gone, or past the deadline) or refuses,
// finishes the RPC.
template <class Response, class Target, class Check, class MakeMessage>
grpc::ServerUnaryReactor* IngestService::unary(grpc::CallbackServerContext* context, const Target& target,
                                               grpc::ByteBuffer* response, Check check, MakeMessage make_message) {
  auto* reactor = context->DefaultReactor();
  if (auto refused = refusal(*context)) {
    reactor->Finish(std::move(*refused));
    return reactor;
  }
  if (auto problem = check()) {
    reactor->Finish(to_grpc(context, RpcStatus::invalid_argument(*problem)));
    return reactor;
  }
  // The handle is an argument, not a capture: CAF 0.17 dereferences a null argument tuple
  // when a function actor takes none (UBSan reports it).
  peers_.system->spawn(
      [=, message = make_message()](caf::event_based_actor* self, const Target& asked) {
        std::apply([&](const auto&... parts) { return self->request(asked, kAnswerDeadline, parts...); }, message)
            .then(
                [=](const Response& answer) {
                  write_response(answer, response);
                  reactor->Finish(grpc::Status::OK);
                },
                [=](const caf::error& error) { reactor->Finish(to_grpc(context, status_of(error))); });
      },
      target);
  return reactor;
}

// A checked unary call: its bytes parsed into a Request, held to the size limits and to
// `structure`, then sent to `target` as (atom, request). A serving-load report refused here
// also counts among its `report_source`'s reports.
template <class Response, class Request, class Target, class Atom>
grpc::ServerUnaryReactor* IngestService::checked_unary(grpc::CallbackServerContext* context, const Target& target,
                                                       const grpc::ByteBuffer& bytes, grpc::ByteBuffer* response,
                                                       metrics::IngestCall rpc,
                                                       ingest_check::Problem (*structure)(const Request&), Atom atom,
                                                       std::optional<metrics::ServingLoadSource> report_source) {
  Request request;
  return unary<Response>(
      context, target, response,
      [&] {
        auto problem = checked({context, rpc}, bytes, request, structure);
        return report_source ? checked_report(*report_source, std::move(problem)) : problem;
      },
      [&] { return std::make_tuple(atom, request); });
}

// ---- calls ----

grpc::ServerUnaryReactor* IngestService::PutWorker(grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes,
                                                   grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::PutWorkerResponse>(context, peers_.membership, *bytes, response,
                                                     metrics::IngestCall::kPutWorker, &ingest_check::put_worker,
                                                     atoms::put_worker_atom_v);
}

grpc::ServerUnaryReactor* IngestService::RemoveWorker(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::RemoveWorkerResponse>(context, peers_.membership, *bytes, response,
                                                        metrics::IngestCall::kRemoveWorker,
                                                        &ingest_check::remove_worker, atoms::remove_worker_atom_v);
}

grpc::ServerUnaryReactor* IngestService::SetAvailability(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::SetAvailabilityResponse>(context, peers_.membership, *bytes, response,
                                                           metrics::IngestCall::kSetAvailability,
                                                           &ingest_check::set_availability, atoms::availability_atom_v);
}

grpc::ServerUnaryReactor* IngestService::GetState(grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes,
                                                  grpc::ByteBuffer* response) {
  ingest_v1::GetStateRequest request;
  return unary<ingest_v1::RelayState>(
      context, peers_.membership, response,
      [&] {
        return parsed({context, metrics::IngestCall::kGetState}, *bytes, request);
      },
      [&] { return std::make_tuple(atoms::get_state_atom_v); });
}

grpc::ServerUnaryReactor* IngestService::ReportFrontendLoad(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::ReportFrontendLoadResponse>(
      context, peers_.serving_load, *bytes, response, metrics::IngestCall::kReportFrontendLoad,
      &ingest_check::frontend_load_report, atoms::frontend_load_atom_v, metrics::ServingLoadSource::kFrontend);
}

grpc::ServerUnaryReactor* IngestService::ReportSchedulerLoad(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* bytes,
                                                             grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::ReportSchedulerLoadResponse>(
      context, peers_.serving_load, *bytes, response, metrics::IngestCall::kReportSchedulerLoad,
      &ingest_check::scheduler_load_report, atoms::scheduler_load_atom_v, metrics::ServingLoadSource::kScheduler);
}

grpc::ServerUnaryReactor* IngestService::SetFrontends(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::SetFrontendsResponse>(context, peers_.serving_load, *bytes, response,
                                                        metrics::IngestCall::kSetFrontends,
                                                        &ingest_check::set_frontends, atoms::frontends_atom_v);
}

grpc::ServerUnaryReactor* IngestService::SetSchedulers(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response) {
  return checked_unary<ingest_v1::SetSchedulersResponse>(context, peers_.serving_load, *bytes, response,
                                                         metrics::IngestCall::kSetSchedulers,
                                                         &ingest_check::set_schedulers, atoms::schedulers_atom_v);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* IngestService::PublishKvEvents(grpc::CallbackServerContext* context,
                                                                          grpc::ByteBuffer* response) {
  auto permit = admit_stream(*context);
  if (!permit) return new Refused<grpc::ServerReadReactor<grpc::ByteBuffer>>(std::move(permit.error()));
  auto* reader = new EventBatchReader(peers_.batches, response,
                                      StreamSettings{config_.limits, config_.read_window, metrics_,
                                                     StreamCredentials(config_.auth, *context), context->peer()},
                                      std::move(*permit));
  reader->start();
  return reader;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* IngestService::ReportLoad(grpc::CallbackServerContext* context,
                                                                     grpc::ByteBuffer* response) {
  auto permit = admit_stream(*context);
  if (!permit) return new Refused<grpc::ServerReadReactor<grpc::ByteBuffer>>(std::move(permit.error()));
  auto* reader = new LoadReportReader(peers_.load, response,
                                      StreamSettings{config_.limits, config_.read_window, metrics_,
                                                     StreamCredentials(config_.auth, *context), context->peer()},
                                      std::move(*permit));
  reader->start();
  return reader;
}

}  // namespace kvrelay::gateway
