// The ingest API with --ingest-token-file (docs/protocol/ingest.md#authentication), over real
// gRPC: every RelayIngest call needs the file's token, unary or streaming; a rotated file
// applies without a restart; health and the WAN API are unaffected.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <grpcpp/impl/codegen/client_unary_call.h>

#include "kvrelay_test/standard_services.pb.h"
#include "tests/integration/harness.hpp"
#include "tests/integration/scrape.hpp"

using namespace kvrelay::test;

namespace {

// A token file of the test's own, replaced by a rename as a Kubernetes Secret update does.
class TokenFile {
 public:
  explicit TokenFile(const std::string& name)
      : path_(
            (std::filesystem::temp_directory_path() / ("kv-relay-" + std::to_string(getpid()) + "-" + name)).string()) {
  }
  ~TokenFile() { std::filesystem::remove(path_); }

  const std::string& path() const { return path_; }
  void write(const std::string& content) const {
    std::ofstream(path_ + ".next", std::ios::trunc) << content;
    std::filesystem::rename(path_ + ".next", path_);
  }

 private:
  std::string path_;
};

kvrelay::RelayOptions options_with(const TokenFile& file) {
  kvrelay::RelayOptions options = loopback_options();
  options.ingest_token_file = file.path();
  return options;
}

grpc::Status put_worker(ingest_v1::RelayIngest::Stub& client) {
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  return client.PutWorker(&context, put_worker_request(kBackend, 1), &response);
}

grpc::Status get_state(ingest_v1::RelayIngest::Stub& client) {
  grpc::ClientContext context;
  ingest_v1::RelayState state;
  return client.GetState(&context, {}, &state);
}

// A PublishKvEvents stream of one batch, closed: the status it ends with.
grpc::Status publish(ingest_v1::RelayIngest::Stub& client) {
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = client.PublishKvEvents(&context, &response);
  writer->Write(stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}}));  // may fail: the relay refuses at once
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status report_load(ingest_v1::RelayIngest::Stub& client) {
  grpc::ClientContext context;
  ingest_v1::ReportLoadResponse response;
  auto writer = client.ReportLoad(&context, &response);
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status set_frontends(ingest_v1::RelayIngest::Stub& client) {
  grpc::ClientContext context;
  ingest_v1::SetFrontendsRequest request;
  request.set_namespace_("prod");
  ingest_v1::SetFrontendsResponse response;
  return client.SetFrontends(&context, request, &response);
}

void require_unauthenticated(const grpc::Status& status, const std::string& text) {
  INFO(status.error_message());
  CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(status.error_message(), Catch::Contains(text));
}

constexpr const char* kMissing = "needs credentials: send the metadata 'authorization: Bearer <token>'";
constexpr const char* kInvalid = "the ingest credentials are not valid";

kvrelay::test::HealthCheckResponse::ServingStatus ingest_health(TestRelay& relay) {
  const auto channel = grpc::CreateChannel(relay.runtime().ingest_address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC,
                                         channel);
  kvrelay::test::HealthCheckRequest request;
  request.set_service("kvrelay.ingest.v1.RelayIngest");
  kvrelay::test::HealthCheckResponse response;
  REQUIRE(grpc::internal::BlockingUnaryCall(channel.get(), method, &context, request, &response).ok());
  return response.status();
}

}  // namespace

TEST_CASE("ingest auth: every ingest call needs the file's token, unary or streaming", "[ingest][auth]") {
  TokenFile token("every-call");
  token.write("  s3cret-one\n");
  TestRelay relay(options_with(token));
  auto anonymous = relay.ingest_client(std::nullopt);
  auto guessing = relay.ingest_client("Bearer s3cret-two");
  auto malformed = relay.ingest_client("s3cret-one");

  SECTION("unary calls") {
    require_unauthenticated(put_worker(*anonymous), kMissing);
    require_unauthenticated(put_worker(*guessing), kInvalid);
    require_unauthenticated(put_worker(*malformed), kInvalid);
    require_unauthenticated(get_state(*anonymous), kMissing);
    require_unauthenticated(set_frontends(*guessing), kInvalid);
    // Nothing of a refused call applied; the relay's own client (the file's token) is served.
    CHECK(relay.get_state().endpoints_size() == 0);
    relay.put_worker(put_worker_request(kBackend, 1));
    CHECK(relay.get_state().endpoints_size() == 1);
  }
  SECTION("client streams are refused before anything is read") {
    relay.put_worker(put_worker_request(kBackend, 1));
    require_unauthenticated(publish(*anonymous), kMissing);
    require_unauthenticated(publish(*guessing), kInvalid);
    require_unauthenticated(report_load(*anonymous), kMissing);
    CHECK(relay.get_state().pools(0).unique_blocks() == 0);
    CHECK(relay.publish({stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}})}).batches_applied() == 1);
    CHECK(relay.get_state().pools(0).unique_blocks() == 1);
  }
  SECTION("health and the WAN API need no token") {
    CHECK(ingest_health(relay) == kvrelay::test::HealthCheckResponse::SERVING);
    auto catalog = watch_catalog(relay);
    CHECK(catalog->next().has_value());
  }
}

TEST_CASE("ingest auth: a rotated token file applies from the next call, without a restart", "[ingest][auth]") {
  TokenFile token("rotated");
  token.write("old-token\n");
  auto options = options_with(token);
  options.metrics_listen = "127.0.0.1:0";  // every refusal is counted
  TestRelay relay(options);
  auto old_client = relay.ingest_client("Bearer old-token");
  auto new_client = relay.ingest_client("Bearer new-token");
  REQUIRE(put_worker(*old_client).ok());
  require_unauthenticated(put_worker(*new_client), kInvalid);

  token.write("new-token\n");
  require_unauthenticated(put_worker(*old_client), kInvalid);
  require_unauthenticated(publish(*old_client), kInvalid);
  CHECK(put_worker(*new_client).ok());
  CHECK(publish(*new_client).ok());

  // A botched rotation (an empty file) keeps the last good token in force.
  token.write("\n");
  CHECK(put_worker(*new_client).ok());
  require_unauthenticated(put_worker(*old_client), kInvalid);
  require_unauthenticated(get_state(*relay.ingest_client(std::nullopt)), kMissing);

  const Scrape s = scrape(relay);
  CHECK(s.value("kv_relay_ingest_auth_failures_total", {{"reason", "invalid"}}) == 4);
  CHECK(s.value("kv_relay_ingest_auth_failures_total", {{"reason", "missing"}}) == 1);
}

TEST_CASE("ingest auth: a rotated token ends the streams opened with the old one at their next message",
          "[ingest][auth]") {
  TokenFile token("rotated-stream");
  token.write("old-token\n");
  auto options = options_with(token);
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto old_client = relay.ingest_client("Bearer old-token");
  auto catalog = watch_catalog(relay);
  REQUIRE(put_worker(*old_client).ok());
  auto pool = subscribe_pool(relay, await_single_pool(*catalog));
  REQUIRE(pool->next().has_value());  // the empty snapshot

  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = old_client->PublishKvEvents(&context, &response);
  REQUIRE(writer->Write(stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}})));
  const auto applied = pool->next();  // the first batch is in while the old token is in force
  REQUIRE(applied.has_value());
  CHECK(applied->kind() == v1::FILTER_UPDATE_KIND_DELTA);

  token.write("new-token\n");
  CHECK(put_worker(*relay.ingest_client("Bearer new-token")).ok());  // a call reads the new file
  writer->Write(stored_batch(kBackend, 1, 0, 1, 1, {{2, 22}}));      // may fail: the relay ends the stream
  writer->WritesDone();
  require_unauthenticated(writer->Finish(), kInvalid);
  CHECK(only_pool(relay).unique_blocks() == 1);  // the second batch was not applied
  CHECK(scrape(relay).value("kv_relay_ingest_auth_failures_total", {{"reason", "invalid"}}) == 1);
}

TEST_CASE("ingest auth: a relay whose token file is missing or empty does not start", "[ingest][auth]") {
  TokenFile token("unusable");
  auto missing = kvrelay::RelayRuntime::start(options_with(token));
  REQUIRE_FALSE(missing.has_value());
  CHECK_THAT(missing.error().message, Catch::StartsWith("--ingest-token-file: cannot read " + token.path()));
  token.write(" \n");
  auto empty = kvrelay::RelayRuntime::start(options_with(token));
  REQUIRE_FALSE(empty.has_value());
  CHECK_THAT(empty.error().message, Catch::Contains(token.path() + " holds no token"));
}
