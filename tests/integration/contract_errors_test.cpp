// docs/protocol/rpcs.md#request-validation: every request error, with its status code and
// trailer (docs/protocol/errors.md#reason-table).
#include <grpcpp/impl/client_unary_call.h>
#include <catch2/catch.hpp>

#include "core/pool_label.hpp"
#include "tests/integration/harness.hpp"
#include "tests/log_capture.hpp"

using namespace kvrelay::test;

namespace {

struct Outcome {
  grpc::StatusCode code;
  std::string reason;
};

template <class Response, class Request, class Open>
Outcome open_and_finish(const Request& request, Open open) {
  StreamReader<Response> reader(request, open);
  while (reader.next()) {
  }
  const grpc::Status status = reader.finish();
  return {status.error_code(), reader.reason()};
}

Outcome catalog_outcome(TestRelay& relay, const v1::WatchKvPoolCatalogRequest& request) {
  return open_and_finish<v1::KvPoolCatalogUpdate>(
      request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().WatchKvPoolCatalog(c, r); });
}

Outcome pool_outcome(TestRelay& relay, const v1::SubscribeKvPoolRequest& request) {
  return open_and_finish<v1::FilterUpdate>(
      request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeKvPool(c, r); });
}

v1::ProducerIdentity materialize_one_pool(TestRelay& relay) {
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(endpoint_ref("prod", "backend"), 1));
  return await_single_pool(*catalog);
}

}  // namespace

namespace {

v1::RelayInfo relay_info(TestRelay& relay, grpc_compression_algorithm compression = GRPC_COMPRESS_NONE) {
  grpc::ClientContext context;
  context.set_compression_algorithm(compression);
  v1::RelayInfoRequest request;
  request.set_contract_marker(kMarker);
  v1::RelayInfo info;
  const grpc::Status status = relay.wan().GetRelayInfo(&context, request, &info);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return info;
}

}  // namespace

TEST_CASE("without --instance-id, drt_instance_id is 63 bits that a restart keeps, and the incarnation is new",
          "[contract]") {
  kvrelay::RelayOptions options = loopback_options();
  options.instance_id.reset();
  v1::RelayIdentity first;
  {
    TestRelay relay(options);
    first = relay_info(relay).relay();
  }
  TestRelay restarted(options);
  const v1::RelayIdentity second = relay_info(restarted).relay();
  CHECK(second.drt_instance_id() == first.drt_instance_id());
  CHECK(first.drt_instance_id() <= 0x7FFFFFFFFFFFFFFFULL);
  CHECK(first.drt_instance_id() != 7);  // not the tests' fixed id
  CHECK(second.relay_incarnation() != first.relay_incarnation());
}

TEST_CASE("a request compressed with gzip is answered (docs/protocol/decisions.md#d7)", "[contract]") {
  TestRelay relay;
  CHECK(relay_info(relay, GRPC_COMPRESS_GZIP).contract_marker() == kMarker);
}

TEST_CASE("GetRelayInfo answers the envelope and rejects a wrong marker", "[contract]") {
  TestRelay relay;
  {
    grpc::ClientContext context;
    v1::RelayInfoRequest request;
    request.set_contract_marker(kMarker);
    v1::RelayInfo info;
    REQUIRE(relay.wan().GetRelayInfo(&context, request, &info).ok());
    CHECK(info.protocol_version() == 1);
    CHECK(info.contract_marker() == kMarker);
    CHECK(info.relay().drt_instance_id() == 7);
    CHECK(info.relay().relay_incarnation() == relay.runtime().relay_incarnation());
    CHECK(info.relay().relay_incarnation() <= 0x7FFFFFFFFFFFFFFFULL);
  }
  grpc::ClientContext context;
  v1::RelayInfo info;
  const auto status = relay.wan().GetRelayInfo(&context, v1::RelayInfoRequest{}, &info);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  const auto trailer = context.GetServerTrailingMetadata().find("kv-relay-error-reason");
  REQUIRE(trailer != context.GetServerTrailingMetadata().end());
  CHECK(std::string(trailer->second.data(), trailer->second.size()) == "RELAY_ERROR_REASON_CONTRACT_MISMATCH");
}

TEST_CASE("streaming requests: marker first, then subscriber_id", "[contract]") {
  TestRelay relay;
  v1::WatchKvPoolCatalogRequest request;
  request.set_subscriber_id("");  // two faults: the marker is reported
  auto outcome = catalog_outcome(relay, request);
  CHECK(outcome.code == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(outcome.reason == "RELAY_ERROR_REASON_CONTRACT_MISMATCH");

  request.set_contract_marker(kMarker);
  for (const std::string& bad :
       {std::string(), std::string(129, 'x'), std::string("tab\there"), std::string("c1\xC2\x85")}) {
    INFO(bad);
    request.set_subscriber_id(bad);
    outcome = catalog_outcome(relay, request);
    CHECK(outcome.code == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(outcome.reason == "RELAY_ERROR_REASON_INVALID_REQUEST");
  }
  request.set_subscriber_id(std::string(128, 'x'));  // exactly the limit is fine
  StreamReader<v1::KvPoolCatalogUpdate> accepted(
      request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().WatchKvPoolCatalog(c, r); });
  CHECK(accepted.next().has_value());
}

TEST_CASE("readiness and load streams validate like the catalog", "[contract]") {
  TestRelay relay;
  v1::SubscribeServingReadinessRequest readiness;
  readiness.set_contract_marker(kMarker);
  auto outcome = open_and_finish<v1::ServingReadinessUpdate>(
      readiness, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeServingReadiness(c, r); });
  CHECK(outcome.code == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(outcome.reason == "RELAY_ERROR_REASON_INVALID_REQUEST");

  v1::SubscribeKvPoolLoadRequest load;
  load.set_subscriber_id("ok");
  outcome = open_and_finish<v1::KvPoolLoadUpdate>(
      load, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeKvPoolLoad(c, r); });
  CHECK(outcome.code == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(outcome.reason == "RELAY_ERROR_REASON_CONTRACT_MISMATCH");
}

TEST_CASE("SubscribeKvPool: identity checks, unknown pools and stale generations", "[contract]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay;
  const v1::ProducerIdentity producer = materialize_one_pool(relay);
  v1::SubscribeKvPoolRequest request;
  request.set_subscriber_id("router-a");
  request.set_contract_marker(kMarker);

  SECTION("expected_producer absent") {
    const auto outcome = pool_outcome(relay, request);
    CHECK(outcome.code == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(outcome.reason == "RELAY_ERROR_REASON_INVALID_REQUEST");
  }
  SECTION("an unknown identity version is unsupported") {
    *request.mutable_expected_producer() = producer;
    request.mutable_expected_producer()->mutable_pool_id()->set_identity_version(2);
    const auto outcome = pool_outcome(relay, request);
    CHECK(outcome.code == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(outcome.reason == "RELAY_ERROR_REASON_UNSUPPORTED_FEATURE");
  }
  SECTION("layout_generation 0 is malformed") {
    *request.mutable_expected_producer() = producer;
    request.mutable_expected_producer()->set_layout_generation(0);
    const auto outcome = pool_outcome(relay, request);
    CHECK(outcome.code == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(outcome.reason == "RELAY_ERROR_REASON_INVALID_REQUEST");
  }
  SECTION("another dc_id is an unknown pool") {
    *request.mutable_expected_producer() = producer;
    request.mutable_expected_producer()->mutable_pool_id()->set_dc_id(producer.pool_id().dc_id() + 1);
    const auto outcome = pool_outcome(relay, request);
    CHECK(outcome.code == grpc::StatusCode::NOT_FOUND);
    CHECK(outcome.reason == "RELAY_ERROR_REASON_POOL_NOT_FOUND");
    // The log names the router and the pool it asked for, as kvrelay-cli catalog shows pools.
    CHECK(log.count({"[warning] refused SubscribeKvPool from ipv4:127.0.0.1:",
                     " subscriber_id=router-a pool=" + kvrelay::pool_label(request.expected_producer().pool_id()) +
                         " layout_generation=" + std::to_string(producer.layout_generation()) +
                         ": no active pool with that PoolId"}) == 1);
  }
  SECTION("a stale generation of a live pool") {
    *request.mutable_expected_producer() = producer;
    request.mutable_expected_producer()->set_layout_generation(producer.layout_generation() + 1);
    const auto outcome = pool_outcome(relay, request);
    CHECK(outcome.code == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(outcome.reason == "RELAY_ERROR_REASON_PRODUCER_CHANGED");
  }
}

// The stream RPCs are raw methods that parse their own request
// (docs/architecture.md#one-serialization-per-frame): bytes that are no request are refused
// like any malformed request, judged as far as they can be (docs/protocol/decisions.md#d46),
// and the relay goes on serving.
TEST_CASE("A stream request that does not parse is an invalid request", "[contract]") {
  TestRelay relay;
  const std::string method = GENERATE("WatchKvPoolCatalog", "SubscribeKvPool", "SubscribeServingReadiness",
                                      "SubscribeKvPoolLoad", "SubscribeServingLoad");
  INFO(method);
  // subscriber_id (field 1) of one byte that is not UTF-8, then contract_marker (field 127, fixed32).
  const auto not_utf8 = [](std::uint32_t marker) {
    std::string bytes = {0x0A, 0x01, '\xff', '\xfd', 0x07};
    for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>((marker >> shift) & 0xFF);
    return bytes;
  };
  struct Case {
    std::string bytes;
    grpc::StatusCode code;
    std::string reason;
    std::string message;
  };
  const Case refused = GENERATE_COPY(
      Case{std::string{0x0A, 0x05, 'a'},  // field 1 says 5 bytes follow; 1 does
           grpc::StatusCode::INVALID_ARGUMENT, "RELAY_ERROR_REASON_INVALID_REQUEST", "the request is not a"},
      Case{not_utf8(0x4B565231), grpc::StatusCode::INVALID_ARGUMENT, "RELAY_ERROR_REASON_INVALID_REQUEST",
           "subscriber_id: subscriber_id is not UTF-8"},
      Case{not_utf8(7), grpc::StatusCode::FAILED_PRECONDITION, "RELAY_ERROR_REASON_CONTRACT_MISMATCH",
           "contract_marker"});
  INFO(refused.message);
  grpc::Slice slice(refused.bytes.data(), refused.bytes.size());
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ClientContext context;
  const std::string path = "/dynamo.kvrelay.v1.KvEventRelay/" + method;  // RpcMethod keeps the pointer
  const grpc::internal::RpcMethod rpc(path.c_str(), grpc::internal::RpcMethod::SERVER_STREAMING);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(relay.wan_channel().get(), rpc, &context, request));
  grpc::ByteBuffer frame;
  CHECK_FALSE(reader->Read(&frame));
  const grpc::Status status = reader->Finish();
  CHECK(status.error_code() == refused.code);
  CHECK_THAT(status.error_message(), Catch::Contains(refused.message));
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto reason = trailers.find("kv-relay-error-reason");
  REQUIRE(reason != trailers.end());
  CHECK(std::string(reason->second.data(), reason->second.size()) == refused.reason);

  auto catalog = watch_catalog(relay);  // still serving
  CHECK(catalog->next().has_value());
}

// GetRelayInfo is a raw method too: gRPC would answer a request it cannot parse UNIMPLEMENTED.
TEST_CASE("A GetRelayInfo request that does not parse is an invalid request", "[contract]") {
  TestRelay relay;
  const char truncated[] = {0x0A, 0x05, 'a'};  // field 1 says 5 bytes follow; 1 does
  grpc::Slice slice(truncated, sizeof truncated);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  const grpc::internal::RpcMethod rpc("/dynamo.kvrelay.v1.KvEventRelay/GetRelayInfo",
                                      grpc::internal::RpcMethod::NORMAL_RPC);
  const grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      relay.wan_channel().get(), rpc, &context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(status.error_message(), Catch::Contains("the request is not a RelayInfoRequest"));
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto reason = trailers.find("kv-relay-error-reason");
  REQUIRE(reason != trailers.end());
  CHECK(std::string(reason->second.data(), reason->second.size()) == "RELAY_ERROR_REASON_INVALID_REQUEST");
}
