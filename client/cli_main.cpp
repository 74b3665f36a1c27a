// kvrelay-cli: an operator's window into a relay. This first cut prints one snapshot of a
// plane as JSON (or keeps following with --watch); the router-side consumer library and
// the richer views come with it later.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

namespace {

namespace v1 = dynamo::kvrelay::v1;
namespace ingest_v1 = kvrelay::ingest::v1;

constexpr std::uint32_t kMarker = 0x4B565231;
constexpr int kUsageError = 2;
constexpr int kRelayError = 1;

const char* kUsage =
    "Usage: kvrelay-cli COMMAND [--target HOST:PORT] [--watch]\n\n"
    "Commands (WAN API, default target localhost:50051):\n"
    "  info        the relay's identity (GetRelayInfo)\n"
    "  catalog     the pool catalog (WatchKvPoolCatalog)\n"
    "  readiness   serving readiness per (namespace, model) (SubscribeServingReadiness)\n"
    "  load        the latest pool load window (SubscribeKvPoolLoad)\n"
    "Commands (DC-local ingest API, default target localhost:50052):\n"
    "  state       what the relay holds: endpoints, pools, sequences, filter digests (GetState)\n\n"
    "--watch keeps printing every update of a stream until interrupted.\n";

std::string json(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &text, options);
  return text;
}

int report(const grpc::Status& status, const grpc::ClientContext& context, const std::string& target) {
  if (status.ok()) return 0;
  std::string reason;
  const auto& trailers = context.GetServerTrailingMetadata();
  if (const auto it = trailers.find("kv-relay-error-reason"); it != trailers.end()) {
    reason = " [" + std::string(it->second.data(), it->second.size()) + "]";
  }
  std::fprintf(stderr, "kvrelay-cli: %s: %s%s\n", target.c_str(), status.error_message().c_str(), reason.c_str());
  return kRelayError;
}

template <class Request, class Response, class Open>
int print_stream(const std::string& target, Request request, Open open, bool watch) {
  grpc::ClientContext context;
  request.set_subscriber_id("kvrelay-cli");
  request.set_contract_marker(kMarker);
  auto reader = open(&context, request);
  Response update;
  while (reader->Read(&update)) {
    std::printf("%s", json(update).c_str());
    std::fflush(stdout);
    if (!watch) {
      context.TryCancel();
      reader->Finish();
      return 0;
    }
  }
  return report(reader->Finish(), context, target);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kUsageError : 0;
  }
  const std::string command = args[0];
  std::string target = command == "state" ? "localhost:50052" : "localhost:50051";
  bool watch = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--watch") {
      watch = true;
    } else if (args[i] == "--target" && i + 1 < args.size()) {
      target = args[++i];
    } else {
      std::fprintf(stderr, "kvrelay-cli: unexpected argument '%s' (see --help)\n", args[i].c_str());
      return kUsageError;
    }
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(8 << 20);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), channel_args);
  auto wan = v1::KvEventRelay::NewStub(channel);
  if (command == "info") {
    grpc::ClientContext context;
    v1::RelayInfoRequest request;
    request.set_contract_marker(kMarker);
    v1::RelayInfo info;
    const auto status = wan->GetRelayInfo(&context, request, &info);
    if (status.ok()) std::printf("%s", json(info).c_str());
    return report(status, context, target);
  }
  if (command == "catalog") {
    return print_stream<v1::WatchKvPoolCatalogRequest, v1::KvPoolCatalogUpdate>(
        target, {}, [&](grpc::ClientContext* c, const auto& r) { return wan->WatchKvPoolCatalog(c, r); }, watch);
  }
  if (command == "readiness") {
    return print_stream<v1::SubscribeServingReadinessRequest, v1::ServingReadinessUpdate>(
        target, {}, [&](grpc::ClientContext* c, const auto& r) { return wan->SubscribeServingReadiness(c, r); }, watch);
  }
  if (command == "load") {
    return print_stream<v1::SubscribeKvPoolLoadRequest, v1::KvPoolLoadUpdate>(
        target, {}, [&](grpc::ClientContext* c, const auto& r) { return wan->SubscribeKvPoolLoad(c, r); }, watch);
  }
  if (command == "state") {
    auto ingest = ingest_v1::RelayIngest::NewStub(channel);
    grpc::ClientContext context;
    ingest_v1::RelayState state;
    const auto status = ingest->GetState(&context, ingest_v1::GetStateRequest{}, &state);
    if (status.ok()) std::printf("%s", json(state).c_str());
    return report(status, context, target);
  }
  std::fprintf(stderr, "kvrelay-cli: unknown command '%s' (see --help)\n", command.c_str());
  return kUsageError;
}
