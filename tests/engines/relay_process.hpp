#pragma once
// A kv-relay process for the engine tests, with clients of both its APIs and of /metrics.
#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/bearer_token.hpp"
#include "ingest/http_scrape.hpp"
#include "tests/app/process.hpp"
#include "tests/integration/harness.hpp"

namespace kvrelay::test {

// One relay process and clients of both its APIs.
class RelayProcess {
 public:
  RelayProcess(const std::string& name, const std::string& topology, std::vector<std::string> extra_args = {})
      : relay_(name,
               {"--metrics-listen", "127.0.0.1:0", "--drain-timeout-ms", "500", "--topology", topology,
                "--load-window-ms", "100", "--dc-id", "dc-engines-test"},
               extra_args),
        ingest_address_(relay_.address("ingest")),
        wan_address_(relay_.address("wan")),
        metrics_(relay_.address("metrics")) {
    ingest_ = ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(ingest_address_, grpc::InsecureChannelCredentials()));
    wan_ = v1::KvEventRelay::NewStub(grpc::CreateChannel(wan_address_, grpc::InsecureChannelCredentials()));
  }

  const std::string& wan_address() const { return wan_address_; }
  const std::string& ingest_address() const { return ingest_address_; }
  // For a relay started with --ingest-token-file: its ingest calls carry `token`.
  void send_ingest_token(std::string token) { authorization_ = bearer::metadata_value(token); }

  ingest_v1::RelayState state() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (authorization_) context.AddMetadata(std::string(bearer::kMetadataKey), *authorization_);
    ingest_v1::RelayState state;
    REQUIRE(ingest_->GetState(&context, {}, &state).ok());
    return state;
  }

  // GetState, asked again until `accept` accepts it (REQUIREd within 30 s).
  ingest_v1::RelayState state_until(const std::function<bool(const ingest_v1::RelayState&)>& accept) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      auto s = state();
      if (accept(s)) return s;
      INFO(s.DebugString());
      INFO("the relay's log: " << relay_.log_path());
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
  }

  // The whole /metrics page; REQUIREs it.
  std::string metrics_page() {
    const auto page = kvrelay::engine_io::http_get("http://" + metrics_ + "/metrics", std::chrono::seconds(5));
    REQUIRE(page.ok);
    return page.body;
  }

  // The value of one sample of /metrics, e.g. `kv_relay_pools_materialized`; REQUIREs it.
  double sample(const std::string& series) {
    const std::string page = metrics_page();
    const auto at = page.find("\n" + series + " ");
    INFO(series);
    REQUIRE(at != std::string::npos);
    return std::stod(page.substr(at + series.size() + 2));
  }

  // The first pool-load window that `accept` accepts.
  v1::KvPoolLoadUpdate load_until(const std::function<bool(const v1::KvPoolLoadUpdate&)>& accept) {
    return window_until<v1::SubscribeKvPoolLoadRequest, v1::KvPoolLoadUpdate>(
        accept, [&](grpc::ClientContext* c, const auto& r) { return wan_->SubscribeKvPoolLoad(c, r); });
  }
  // The first serving-load window that `accept` accepts.
  v1::ServingLoadUpdate serving_load_until(const std::function<bool(const v1::ServingLoadUpdate&)>& accept) {
    return window_until<v1::SubscribeServingLoadRequest, v1::ServingLoadUpdate>(
        accept, [&](grpc::ClientContext* c, const auto& r) { return wan_->SubscribeServingLoad(c, r); });
  }

 private:
  template <class Request, class Update, class Open>
  Update window_until(const std::function<bool(const Update&)>& accept, Open open) {
    Request request;
    request.set_subscriber_id("test");
    request.set_contract_marker(kMarker);
    StreamReader<Update> windows(request, open);
    std::optional<Update> last;  // what the stream last showed, for a failure to say
    while (auto window = windows.next()) {
      if (accept(*window)) {
        windows.cancel();
        return *window;
      }
      last = std::move(window);
    }
    const grpc::Status status = windows.finish();
    INFO("stream ended: " << status.error_message() << "; last update: " << (last ? last->ShortDebugString() : "none"));
    FAIL("the stream ended before an update was accepted");
    return {};
  }

  RelayChild relay_;
  std::string ingest_address_, wan_address_, metrics_;
  std::unique_ptr<ingest_v1::RelayIngest::Stub> ingest_;
  std::unique_ptr<v1::KvEventRelay::Stub> wan_;
  std::optional<std::string> authorization_;
};

}  // namespace kvrelay::test
