#include "ingest/demo_serving_load.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/bearer_token.hpp"

namespace kvrelay::demo {

namespace {

constexpr auto kReportPeriod = std::chrono::seconds(1);
constexpr auto kFirstToken = std::chrono::milliseconds(100);  // how long a demo request awaits its first token
constexpr auto kRequest = std::chrono::seconds(1);            // how long it is in flight in all
constexpr std::uint64_t kOutputTokens = 64;                   // what it generates
constexpr std::uint64_t kFrontendId = 1;
constexpr std::uint64_t kRouterId = 1;

std::chrono::milliseconds since_epoch() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
}

}  // namespace

ServingLoadFeed::ServingLoadFeed(std::vector<RouterRank> ranks, std::vector<std::pair<std::string, std::string>> models,
                                 std::uint64_t seed)
    : ranks_(std::move(ranks)),
      decode_blocks_(ranks_.size()),
      prefill_tokens_(ranks_.size()),
      incarnation_(std::mt19937_64(seed)() | 1) {
  for (auto& key : models) models_[std::move(key)];
}

void ServingLoadFeed::served(const std::string& ns, const std::string& model, std::size_t rank,
                             std::uint64_t prompt_tokens, std::uint64_t uncached,
                             std::chrono::steady_clock::time_point now) {
  prefill_tokens_.at(rank) += uncached;
  auto& load = models_[{ns, model}];
  load.in_flight.push_back({now, prompt_tokens});
  load.totals.set_requests_started(load.totals.requests_started() + 1);
  load.totals.set_input_tokens(load.totals.input_tokens() + prompt_tokens);
}

bool ServingLoadFeed::ok(const grpc::Status& status, const char* call) {
  if (status.ok()) {
    failing_ = false;
    return true;
  }
  if (!failing_) spdlog::warn("demo: {} failed: {}", call, status.error_message());
  failing_ = true;
  return false;
}

// A file that cannot be read or holds no token keeps the token read before, as the relay does.
void ServingLoadFeed::refresh_authorization() {
  if (!token_file_) return;
  std::ifstream in(*token_file_);
  std::stringstream content;
  content << in.rdbuf();
  if (const auto token = bearer::token_of_file(content.str())) authorization_ = bearer::metadata_value(*token);
}

void ServingLoadFeed::authorize(grpc::ClientContext& context) const {
  if (authorization_) context.AddMetadata(std::string(bearer::kMetadataKey), *authorization_);
}

void ServingLoadFeed::tick(ingest_v1::RelayIngest::Stub& ingest, std::chrono::steady_clock::time_point now) {
  if (now < next_report_) return;
  next_report_ = now + kReportPeriod;
  refresh_authorization();
  if (!declared_) declare(ingest);
  if (declared_) report(ingest, now);
}

void ServingLoadFeed::declare(ingest_v1::RelayIngest::Stub& ingest) {
  std::set<std::string> namespaces;
  for (const auto& [key, load] : models_) namespaces.insert(key.first);
  for (const auto& ns : namespaces) {
    ingest_v1::SetFrontendsRequest request;
    request.set_namespace_(ns);
    request.add_frontend_ids(kFrontendId);
    grpc::ClientContext context;
    authorize(context);
    ingest_v1::SetFrontendsResponse response;
    if (!ok(ingest.SetFrontends(&context, request, &response), "SetFrontends")) return;
  }
  std::set<std::string> endpoints;
  for (const auto& rank : ranks_) {
    if (!endpoints.insert(rank.endpoint.SerializeAsString()).second) continue;
    ingest_v1::SetSchedulersRequest request;
    *request.mutable_endpoint() = rank.endpoint;
    request.add_router_ids(kRouterId);
    grpc::ClientContext context;
    authorize(context);
    ingest_v1::SetSchedulersResponse response;
    if (!ok(ingest.SetSchedulers(&context, request, &response), "SetSchedulers")) return;
  }
  declared_ = true;
}

void ServingLoadFeed::report(ingest_v1::RelayIngest::Stub& ingest, std::chrono::steady_clock::time_point now) {
  ++sequence_;
  const std::uint64_t published_ms = static_cast<std::uint64_t>(since_epoch().count());
  std::map<std::string, ingest_v1::FrontendLoadReport> frontends;  // by namespace
  for (auto& [key, load] : models_) {
    auto& frontend = frontends[key.first];
    auto* model = frontend.add_models();
    model->set_canonical_model_id(key.second);
    auto* gauges = model->mutable_gauges();
    for (auto it = load.in_flight.begin(); it != load.in_flight.end();) {
      const auto age = now - it->started;
      if (age >= kRequest) {
        load.totals.set_requests_completed(load.totals.requests_completed() + 1);
        load.totals.set_output_tokens(load.totals.output_tokens() + kOutputTokens);
        it = load.in_flight.erase(it);
        continue;
      }
      if (age < kFirstToken) {
        gauges->set_requests_awaiting_first_token(gauges->requests_awaiting_first_token() + 1);
        gauges->set_awaiting_first_token_input_tokens(gauges->awaiting_first_token_input_tokens() + it->prompt_tokens);
      } else {
        gauges->set_requests_generating(gauges->requests_generating() + 1);
      }
      gauges->set_inflight_input_tokens(gauges->inflight_input_tokens() + it->prompt_tokens);
      ++it;
    }
    *model->mutable_totals() = load.totals;
  }
  for (auto& [ns, frontend] : frontends) {
    frontend.set_namespace_(ns);
    frontend.set_frontend_id(kFrontendId);
    frontend.set_incarnation(incarnation_);
    frontend.set_sequence(sequence_);
    frontend.set_serving_ready(true);
    frontend.set_published_ms(published_ms);
    grpc::ClientContext context;
    authorize(context);
    ingest_v1::ReportFrontendLoadResponse response;
    if (!ok(ingest.ReportFrontendLoad(&context, frontend, &response), "ReportFrontendLoad")) return;
  }
  struct RouterReport {
    ingest_v1::SchedulerLoadReport report;
    std::vector<std::size_t> ranks;  // indices into ranks_
  };
  std::map<std::string, RouterReport> routers;  // by endpoint
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    auto& [router, indices] = routers[ranks_[i].endpoint.SerializeAsString()];
    indices.push_back(i);
    *router.mutable_endpoint() = ranks_[i].endpoint;
    auto* rank = router.add_ranks();
    rank->set_worker_id(ranks_[i].worker_id);
    rank->set_dp_rank(ranks_[i].dp_rank);
    rank->set_active_decode_blocks(decode_blocks_[i]);
    rank->set_active_prefill_tokens(prefill_tokens_[i]);
  }
  for (auto& [key, entry] : routers) {
    auto& [router, indices] = entry;
    router.set_router_id(kRouterId);
    router.set_router_epoch(incarnation_);
    router.set_sequence(sequence_);
    router.set_published_ms(published_ms);
    grpc::ClientContext context;
    authorize(context);
    ingest_v1::ReportSchedulerLoadResponse response;
    if (!ok(ingest.ReportSchedulerLoad(&context, router, &response), "ReportSchedulerLoad")) return;
    // Reported: this router's next reports show the prefill work that arrives from now on (a
    // failed report keeps its ranks' for the next tick).
    for (const std::size_t i : indices) prefill_tokens_[i] = 0;
  }
}

}  // namespace kvrelay::demo
