// info, catalog, readiness, load, serving-load and state: read a relay's planes as they are on
// the wire, validate them as a consumer would, and print them as tables or JSON.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <functional>

#include "client/cli/commands.hpp"
#include "client/cli/format.hpp"
#include "client/cli/table.hpp"
#include "client/lib/reaction.hpp"
#include "core/bearer_token.hpp"
#include "core/wire_validation.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "kvrelay/client/consumer.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

namespace kvrelay::cli {

namespace {

namespace ingest_v1 = ::kvrelay::ingest::v1;

constexpr const char* kWanTarget = "localhost:50051";
constexpr const char* kIngestTarget = "localhost:50052";

std::shared_ptr<grpc::Channel> channel_to(const std::string& target) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(8 << 20);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
}

std::vector<std::string> targets_of(const Args& args, const char* fallback) {
  return args.targets.empty() ? std::vector<std::string>{fallback} : args.targets;
}

int report(const grpc::Status& status, const grpc::ClientContext& context, const std::string& target) {
  if (status.ok()) return kOk;
  std::string reason = client::reason_trailer(context);
  if (!reason.empty()) reason = " [" + reason + "]";
  const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE && reason.empty();
  const bool unimplemented = status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
  const char* what = unreachable ? "relay unreachable: " : unimplemented ? "the relay does not serve this RPC: " : "";
  std::fprintf(stderr, "kvrelay-cli: %s: %s%s%s\n", target.c_str(), what, status.error_message().c_str(),
               reason.c_str());
  return reason.find("CONTRACT_MISMATCH") != std::string::npos ? kContractMismatch : kRelayError;
}

// A response a consumer would reject: exit 3 for another contract, 1 for anything else.
template <class Response>
int reject_invalid(const Response& response, const std::string& target) {
  const auto error = wire::check_response(response);
  if (!error) return kOk;
  const bool mismatch =
      error->code == wire::ErrorCode::kContractMarker || error->code == wire::ErrorCode::kProtocolVersion;
  std::fprintf(stderr, "kvrelay-cli: %s: %s: %s (%s)\n", target.c_str(),
               mismatch ? "contract mismatch" : "invalid response", std::string(wire::to_string(error->code)).c_str(),
               error->message.c_str());
  return mismatch ? kContractMismatch : kRelayError;
}

// Reads the first update of a stream (or every one with --watch) and prints each.
template <class Request, class Response>
int follow(const Args& args, const std::string& target,
           const std::function<std::unique_ptr<grpc::ClientReader<Response>>(
               v1::KvEventRelay::Stub&, grpc::ClientContext*, const Request&)>& open,
           const std::function<void(const std::string&, const Response&)>& print_table) {
  auto stub = v1::KvEventRelay::NewStub(channel_to(target));
  grpc::ClientContext context;
  Request request;
  request.set_subscriber_id("kvrelay-cli");
  request.set_contract_marker(wire::kContractMarker);
  auto reader = open(*stub, &context, request);
  Response update;
  while (reader->Read(&update)) {
    if (const int invalid = reject_invalid(update, target)) {
      context.TryCancel();
      reader->Finish();
      return invalid;
    }
    if (args.json) {
      std::printf("%s", json_of(update).c_str());
    } else {
      print_table(target, update);
    }
    std::fflush(stdout);
    if (!args.watch) {
      context.TryCancel();
      reader->Finish();
      return kOk;
    }
  }
  return report(reader->Finish(), context, target);
}

template <class Request, class Response>
int for_each_target(const Args& args,
                    const std::function<std::unique_ptr<grpc::ClientReader<Response>>(
                        v1::KvEventRelay::Stub&, grpc::ClientContext*, const Request&)>& open,
                    const std::function<void(const std::string&, const Response&)>& print_table) {
  const auto targets = targets_of(args, kWanTarget);
  if (args.watch && targets.size() > 1) {
    std::fprintf(stderr, "kvrelay-cli: --watch follows one relay; use `top` for several\n");
    return kUsageError;
  }
  int worst = kOk;
  for (const auto& target : targets)
    worst = std::max(worst, follow<Request, Response>(args, target, open, print_table));
  return worst;
}

void print_catalog(const std::string& target, const v1::KvPoolCatalogUpdate& update) {
  std::printf("%s  catalog revision %lu, %d pools\n", target.c_str(), static_cast<unsigned long>(update.revision()),
              update.snapshot().pools_size());
  Table table({"ENDPOINT", "POOL", "MODELS", "BLOCK", "FORMAT", "ROLES", "BUCKETS", "GENERATION"});
  for (const auto& pool : update.snapshot().pools()) {
    std::string models;
    for (const auto& registration : pool.registrations()) {
      models += (models.empty() ? "" : ",") + registration.canonical_model_id();
      if (registration.target().has_lora()) models += "(lora)";
    }
    const auto& producer = pool.producer();
    table.add({client::endpoint_name(pool.serving_endpoint()), pool_label(producer.pool_id()), models,
               std::to_string(pool.query_semantics().kv_block_size()),
               short_name(v1::KvQueryHashFormat_Name(pool.query_semantics().hash_format()), "KV_QUERY_HASH_FORMAT_"),
               roles_of(pool.pool_roles()), std::to_string(producer.ckf_format().bucket_count()),
               fmt::format("{:x}/{}", producer.producer_incarnation(), producer.layout_generation())});
  }
  table.print();
}

void print_readiness(const std::string& target, const v1::ServingReadinessUpdate& update) {
  std::printf("%s  readiness revision %lu, %d entries\n", target.c_str(), static_cast<unsigned long>(update.revision()),
              update.entries_size());
  Table table({"NAMESPACE", "MODEL", "STATE", "PRESENT", "MISSING", "MEMBERS", "ADAPTERS"});
  for (const auto& entry : update.entries()) {
    std::string adapters;
    for (const auto& adapter : entry.adapters()) {
      adapters += fmt::format("{}{}={}", adapters.empty() ? "" : ",", adapter.canonical_model_id(),
                              state_name(adapter.state()));
    }
    table.add({entry.namespace_(), entry.canonical_model_id(), state_name(entry.state()),
               roles_of(entry.present_roles()), roles_of(entry.missing_roles()), std::to_string(entry.members_size()),
               adapters.empty() ? "-" : adapters});
  }
  table.print();
}

void print_load(const std::string& target, const v1::KvPoolLoadUpdate& update) {
  std::printf("%s  load window %lu (%lu ms), %d pools\n", target.c_str(),
              static_cast<unsigned long>(update.window_sequence()), static_cast<unsigned long>(update.window_ms()),
              update.pools_size());
  Table table({"POOL", "GENERATION", "USED", "TOTAL", "RANKS", "AUTHORITATIVE"});
  for (const auto& pool : update.pools()) {
    const client::LoadFacts facts = client::load_facts(pool);
    table.add({pool_label(pool.producer().pool_id()), std::to_string(pool.producer().layout_generation()),
               std::to_string(pool.kv_used_blocks()), std::to_string(pool.total_kv_blocks()),
               fmt::format("{}/{}", pool.kv_observed_ranks(), pool.kv_expected_ranks()),
               facts.authoritative() ? "yes" : "no"});
  }
  table.print();
}

// An entry's load status, or why a consumer would quarantine it (docs/protocol/rpcs.md#validate-load).
std::string entry_status(const v1::LoadView& load, const wire::Status& check) {
  return check ? fmt::format("invalid: {}", wire::to_string(check->code)) : data_status_name(load.status());
}

void print_serving_load(const std::string& target, const v1::ServingLoadUpdate& update) {
  std::printf("%s  serving-load window %lu (%lu ms), %d models, %d pools\n", target.c_str(),
              static_cast<unsigned long>(update.window_sequence()), static_cast<unsigned long>(update.window_ms()),
              update.models_size(), update.pools_size());
  Table models({"NAMESPACE", "MODEL", "STATUS", "AWAITING/GENERATING", "QUEUED PREFILL TOKENS", "INFLIGHT INPUT TOKENS",
                "FRONTENDS OBS/EXP/READY", "STARTED/COMPLETED"});
  for (const auto& model : update.models()) {
    const auto& load = model.load();
    const auto& tokens = load.tokens();
    const auto& deployment = model.deployment();
    models.add(
        {model.namespace_(), model.canonical_model_id(), entry_status(load, wire::check_model_serving_load(model)),
         in_flight(load.requests()),
         gauge(tokens.has_awaiting_first_token_input_tokens(), tokens.awaiting_first_token_input_tokens()),
         gauge(tokens.has_inflight_input_tokens(), tokens.inflight_input_tokens()),
         fmt::format("{}/{}/{}", deployment.observed_frontends(), deployment.expected_frontends(),
                     deployment.ready_frontends()),
         fmt::format("{}/{}", load.requests().requests_started_total(), load.requests().requests_completed_total())});
  }
  models.print();
  Table pools({"POOL", "GENERATION", "STATUS", "PREFILL TOKENS", "DECODE BLOCKS", "LIVE WORKERS", "MAX CONCURRENCY"});
  for (const auto& pool : update.pools()) {
    const auto& tokens = pool.load().tokens();
    const auto& deployment = pool.deployment();
    pools.add({pool_label(pool.producer().pool_id()), std::to_string(pool.producer().layout_generation()),
               entry_status(pool.load(), wire::check_pool_serving_load(pool)),
               gauge(tokens.has_active_prefill_tokens(), tokens.active_prefill_tokens()),
               gauge(tokens.has_active_decode_blocks(), tokens.active_decode_blocks()),
               gauge(deployment.has_live_workers(), deployment.live_workers()),
               gauge(deployment.has_max_concurrency(), deployment.max_concurrency())});
  }
  pools.print();
}

// Every declared KV source: how it is fed, whether it is connected, where its sequence is.
std::string endpoint_name(const ingest_v1::EndpointRef& e) {
  return fmt::format("{}/{}/{}", e.namespace_(), e.component(), e.endpoint());
}

// Every declared endpoint, pool or not: its workers, which of them are live (when the relay
// knows), whether its pool is published, and then each conflict that keeps it from being one.
void print_endpoints(const ingest_v1::RelayState& state) {
  Table table({"ENDPOINT", "WORKERS", "LIVE", "POOL", "SOURCES", "CONFLICTS"});
  for (const auto& endpoint : state.endpoints()) {
    table.add({endpoint_name(endpoint.endpoint()), std::to_string(endpoint.worker_ids_size()),
               endpoint.availability_known() ? std::to_string(endpoint.live_worker_ids_size()) : "unknown",
               endpoint.pool_materialized() ? "yes" : "no", std::to_string(endpoint.sources_size()),
               std::to_string(endpoint.conflicts_size())});
  }
  table.print();
  for (const auto& endpoint : state.endpoints()) {
    for (const auto& conflict : endpoint.conflicts()) {
      std::printf("  %s conflict: %s\n", endpoint_name(endpoint.endpoint()).c_str(), conflict.c_str());
    }
  }
  std::printf("\n");
}

void print_sources(const ingest_v1::RelayState& state) {
  Table table({"ENDPOINT", "WORKER", "RANK", "TRANSPORT", "CONNECTED", "LAST SEQ", "RESETS", "PUBLISHER"});
  for (const auto& endpoint : state.endpoints()) {
    for (const auto& source : endpoint.sources()) {
      table.add({endpoint_name(endpoint.endpoint()), std::to_string(source.worker_id()),
                 std::to_string(source.dp_rank()), source.transport(), source.connected() ? "yes" : "no",
                 source.has_last_sequence() ? std::to_string(source.last_sequence()) : "-",
                 std::to_string(source.resets()), source.endpoint().empty() ? "-" : source.endpoint()});
    }
  }
  std::printf("\n");
  table.print();
}

}  // namespace

int run_info(const Args& args) {
  Table table({"TARGET", "PROTOCOL", "DRT_INSTANCE", "INCARNATION"});
  int worst = kOk;
  for (const auto& target : targets_of(args, kWanTarget)) {
    auto stub = v1::KvEventRelay::NewStub(channel_to(target));
    grpc::ClientContext context;
    v1::RelayInfoRequest request;
    request.set_contract_marker(wire::kContractMarker);
    v1::RelayInfo info;
    const auto status = stub->GetRelayInfo(&context, request, &info);
    int outcome = report(status, context, target);
    if (outcome == kOk) outcome = reject_invalid(info, target);
    worst = std::max(worst, outcome);
    if (outcome != kOk) continue;
    if (args.json) std::printf("%s", json_of(info).c_str());
    table.add({target, std::to_string(info.protocol_version()), fmt::format("{:016x}", info.relay().drt_instance_id()),
               fmt::format("{:016x}", info.relay().relay_incarnation())});
  }
  if (!args.json && !table.empty()) table.print();
  return worst;
}

int run_catalog(const Args& args) {
  return for_each_target<v1::WatchKvPoolCatalogRequest, v1::KvPoolCatalogUpdate>(
      args, [](auto& stub, auto* context, const auto& request) { return stub.WatchKvPoolCatalog(context, request); },
      print_catalog);
}

int run_readiness(const Args& args) {
  return for_each_target<v1::SubscribeServingReadinessRequest, v1::ServingReadinessUpdate>(
      args,
      [](auto& stub, auto* context, const auto& request) { return stub.SubscribeServingReadiness(context, request); },
      print_readiness);
}

int run_load(const Args& args) {
  return for_each_target<v1::SubscribeKvPoolLoadRequest, v1::KvPoolLoadUpdate>(
      args, [](auto& stub, auto* context, const auto& request) { return stub.SubscribeKvPoolLoad(context, request); },
      print_load);
}

int run_serving_load(const Args& args) {
  return for_each_target<v1::SubscribeServingLoadRequest, v1::ServingLoadUpdate>(
      args, [](auto& stub, auto* context, const auto& request) { return stub.SubscribeServingLoad(context, request); },
      print_serving_load);
}

int run_state(const Args& args) {
  std::optional<std::string> token;
  if (args.ingest_token_file && !(token = read_ingest_token(*args.ingest_token_file))) return kInvalidInput;
  int worst = kOk;
  for (const auto& target : targets_of(args, kIngestTarget)) {
    auto stub = ingest_v1::RelayIngest::NewStub(channel_to(target));
    grpc::ClientContext context;
    if (token) context.AddMetadata(std::string(bearer::kMetadataKey), bearer::metadata_value(*token));
    ingest_v1::RelayState state;
    const auto status = stub->GetState(&context, ingest_v1::GetStateRequest{}, &state);
    const int outcome = report(status, context, target);
    worst = std::max(worst, outcome);
    if (outcome != kOk) continue;
    if (args.json) {
      std::printf("%s", json_of(state).c_str());
      continue;
    }
    std::printf("%s  %d endpoints, %d pools\n", target.c_str(), state.endpoints_size(), state.pools_size());
    print_endpoints(state);
    Table table({"ENDPOINT", "GENERATION", "SEQUENCE", "BLOCKS", "SLOTS", "BUCKETS", "RELAYOUTS", "OMITTED",
                 "SUBSCRIBERS", "SOURCES", "DIGEST"});
    for (const auto& pool : state.pools()) {
      table.add({endpoint_name(pool.serving_endpoint()), std::to_string(pool.layout_generation()),
                 std::to_string(pool.sequence()), std::to_string(pool.unique_blocks()),
                 std::to_string(pool.occupied_slots()), std::to_string(pool.bucket_count()),
                 std::to_string(pool.relayouts()), std::to_string(pool.omitted_blocks()),
                 std::to_string(pool.subscribers()), std::to_string(pool.active_sources()),
                 fmt::format("{:016x}", pool.filter_digest())});
    }
    table.print();
    for (const auto& pool : state.pools()) {
      if (pool.growth_refusal().empty()) continue;
      std::printf("  %s cannot grow: %s\n", endpoint_name(pool.serving_endpoint()).c_str(),
                  pool.growth_refusal().c_str());
    }
    print_sources(state);
  }
  return worst;
}

}  // namespace kvrelay::cli
