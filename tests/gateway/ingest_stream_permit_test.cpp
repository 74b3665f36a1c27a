// An ingest stream's admission permit (grpc_gateway/windowed_reader.hpp): a stream cut short
// keeps it while requests it handed on are unanswered, so a client that ends and reopens its
// stream cannot pile requests up in an actor's mailbox (docs/protocol/limits.md#ingest-limits).
#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpc_gateway/ingest_service.hpp"
#include "tests/gateway/loopback_server.hpp"

namespace kvrelay::gateway {
namespace {

constexpr auto kAwait = std::chrono::seconds(30);

// The load reports a load window was sent and has not answered yet.
class HeldReports {
 public:
  void hold(LoadReportBatch batch) {
    {
      std::lock_guard lock(mutex_);
      held_.push_back(std::move(batch));
    }
    changed_.notify_all();
  }
  bool await_held(std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kAwait, [&] { return held_.size() >= count; });
  }
  void answer_all() {
    std::vector<LoadReportBatch> answering;
    {
      std::lock_guard lock(mutex_);
      answering.swap(held_);
    }
    for (auto& batch : answering) (*batch.reply)(LoadOutcome{1, 0});
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<LoadReportBatch> held_;
};

// A load window that keeps every report unanswered until the test answers it.
LoadWindowActor::behavior_type holding_load_window(std::shared_ptr<HeldReports> held) {
  return {
      [](atoms::load_pools_atom, const std::vector<LoadPool>&) {},
      [held](atoms::report_atom, const LoadReportBatch& batch) { held->hold(batch); },
      [](atoms::forget_load_atom, const EndpointKey&, std::uint64_t) {},
      [](atoms::forget_reports_atom, const EndpointKey&, std::uint64_t) {},
      [](atoms::subscribe_atom, const UpdateStreamActor<LoadBroadcast>&) {},
      [](atoms::shutdown_atom, const RpcStatus&) {},
      [](atoms::tick_atom) {},
      [](atoms::sample_atom) {},
  };
}

ingest_v1::LoadReport load_report(std::string ns = "prod") {
  ingest_v1::LoadReport report;
  report.mutable_endpoint()->set_namespace_(std::move(ns));
  report.mutable_endpoint()->set_component("backend");
  report.mutable_endpoint()->set_endpoint("generate");
  report.set_worker_id(1);
  report.set_kv_used_blocks(10);
  return report;
}

}  // namespace

TEST_CASE("ingest stream: a stream cut short keeps its permit until what it handed on is answered",
          "[gateway][ingest]") {
  caf::actor_system_config config;
  caf::actor_system system(config);
  auto held = std::make_shared<HeldReports>();
  IngestPeers peers;
  peers.system = &system;
  peers.load = system.spawn(holding_load_window, held);
  IngestServiceConfig service_config;
  service_config.max_streams = 1;
  IngestService service(peers, service_config, nullptr);
  const auto loopback = serve_on_loopback(service);
  const auto stub = ingest_v1::RelayIngest::NewStub(loopback.channel);

  {
    grpc::ClientContext context;
    ingest_v1::ReportLoadResponse response;
    auto writer = stub->ReportLoad(&context, &response);
    for (int i = 0; i < 3; ++i) REQUIRE(writer->Write(load_report()));
    REQUIRE(held->await_held(3));
    // A namespace above --max-ingest-string-bytes ends the stream at once, its three reports
    // still unanswered.
    writer->Write(load_report(std::string(service_config.limits.max_string_bytes + 1, 'n')));
    writer->WritesDone();
    CHECK(writer->Finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  // The server finished the call before the client saw its status: the permit is still out.
  CHECK(service.streams().in_use() == 1);

  held->answer_all();
  REQUIRE(service.streams().await_at_most(0, kAwait));
  grpc::ClientContext context;
  ingest_v1::ReportLoadResponse response;
  auto writer = stub->ReportLoad(&context, &response);
  REQUIRE(writer->Write(load_report()));
  REQUIRE(held->await_held(1));
  held->answer_all();
  writer->WritesDone();
  CHECK(writer->Finish().ok());
  CHECK(response.reports_applied() == 1);
  loopback.server->Shutdown();
}

}  // namespace kvrelay::gateway
