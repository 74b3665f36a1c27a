// The ingest limits (docs/protocol/limits.md#ingest-limits), over real gRPC: a request above a
// size limit is INVALID_ARGUMENT, a count of live things past its limit RESOURCE_EXHAUSTED,
// each naming its flag and value, counted in kv_relay_ingest_limit_refusals_total, and nothing
// of a refused request applies.
#include <catch2/catch.hpp>

#include "tests/integration/harness.hpp"
#include "tests/integration/scrape.hpp"
#include "tests/log_capture.hpp"

using namespace kvrelay::test;

namespace {

const auto kOther = endpoint_ref("prod", "other");

// Small limits, so that the requests at and past them stay small; metrics to see them counted.
kvrelay::RelayOptions limited_options() {
  kvrelay::RelayOptions options = loopback_options();
  options.metrics_listen = "127.0.0.1:0";
  options.max_batch_events = 4;
  options.max_event_blocks = 3;
  options.max_event_tokens = 8;
  options.max_ingest_string_bytes = 32;
  options.max_serving_endpoints = 2;
  options.max_workers_per_endpoint = 2;
  options.max_kv_sources = 5;
  options.max_ingest_streams = 2;
  return options;
}

// One PublishKvEvents stream carrying `batches`, closed: the status it ends with. A write after
// the relay ended the stream fails, which is what such a feeder sees.
grpc::Status publish_status(TestRelay& relay, const std::vector<ingest_v1::KvEventBatch>& batches) {
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = relay.ingest().PublishKvEvents(&context, &response);
  for (const auto& batch : batches) writer->Write(batch);
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status report_load_status(TestRelay& relay, const ingest_v1::LoadReport& report) {
  grpc::ClientContext context;
  ingest_v1::ReportLoadResponse response;
  auto writer = relay.ingest().ReportLoad(&context, &response);
  writer->Write(report);
  writer->WritesDone();
  return writer->Finish();
}

void require_refusal(const grpc::Status& status, grpc::StatusCode code, const std::string& message) {
  INFO(status.error_message());
  CHECK(status.error_code() == code);
  CHECK_THAT(status.error_message(), Catch::Contains(message));
}

// A batch whose one event stores `blocks` token blocks of 4 tokens (the pool's block size).
ingest_v1::KvEventBatch token_batch(std::uint64_t sequence, std::uint32_t blocks) {
  auto batch = stored_batch(kBackend, 1, 0, 1, sequence, {});
  auto* stored = batch.mutable_events(0)->mutable_stored();
  for (std::uint32_t b = 0; b < blocks; ++b) {
    auto* block = stored->add_blocks();
    block->set_block_hash(100 + b);
    for (std::uint32_t t = 0; t < 4; ++t) block->mutable_tokens()->add_token_ids(4 * b + t);
  }
  return batch;
}

double refusals(const Scrape& scrape, const std::string& limit) {
  return scrape.count("kv_relay_ingest_limit_refusals_total", {{"limit", limit}});
}

}  // namespace

TEST_CASE("ingest limits: a request above a size limit is INVALID_ARGUMENT naming the flag", "[ingest][limits]") {
  CapturedLog log;  // first: it outlives the relay's threads
  TestRelay relay(limited_options());
  relay.put_worker(put_worker_request(kBackend, 1));
  const std::string long_name(33, 'n');

  require_refusal(relay.put_worker_status(put_worker_request(endpoint_ref("prod", long_name), 2)),
                  grpc::StatusCode::INVALID_ARGUMENT,
                  "endpoint.component: 33 bytes exceed --max-ingest-string-bytes (32)");
  // The log names the caller, so that the feeder sending it can be found.
  CHECK(log.count({"[warning] refused PutWorkerRequest from ipv4:127.0.0.1:",
                   ": endpoint.component: 33 bytes exceed --max-ingest-string-bytes (32)"}) == 1);
  {
    ingest_v1::FrontendLoadReport report;
    report.set_namespace_("prod");
    report.set_frontend_id(7);
    report.set_sequence(1);
    report.add_models()->set_canonical_model_id(long_name);
    grpc::ClientContext context;
    ingest_v1::ReportFrontendLoadResponse response;
    require_refusal(relay.ingest().ReportFrontendLoad(&context, report, &response), grpc::StatusCode::INVALID_ARGUMENT,
                    "models[0].canonical_model_id: 33 bytes exceed --max-ingest-string-bytes (32)");
  }
  ingest_v1::LoadReport load;
  *load.mutable_endpoint() = endpoint_ref(long_name, "backend");
  require_refusal(report_load_status(relay, load), grpc::StatusCode::INVALID_ARGUMENT,
                  "endpoint.namespace: 33 bytes exceed --max-ingest-string-bytes (32)");

  // On a stream, the batches before the oversized one apply; the stream ends with it.
  auto five_events = stored_batch(kBackend, 1, 0, 1, 1, {{2, 12}});
  for (int i = 0; i < 4; ++i) five_events.add_events()->mutable_cleared();
  require_refusal(publish_status(relay, {stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}}), five_events}),
                  grpc::StatusCode::INVALID_ARGUMENT, "events: 5 events exceed --max-batch-events (4)");
  require_refusal(publish_status(relay, {stored_batch(kBackend, 1, 0, 1, 1, {{2, 12}, {3, 13}, {4, 14}, {5, 15}})}),
                  grpc::StatusCode::INVALID_ARGUMENT,
                  "events[0].stored.blocks: 4 blocks exceed --max-event-blocks (3)");
  require_refusal(publish_status(relay, {token_batch(1, 3)}), grpc::StatusCode::INVALID_ARGUMENT,
                  "events[0].stored: 12 token ids exceed --max-event-tokens (8)");

  // At the limits everything is taken: a batch of 4 events, an event of 2 token blocks (8 tokens).
  auto four_events = stored_batch(kBackend, 1, 0, 1, 1, {{2, 12}});
  for (int i = 0; i < 3; ++i) four_events.add_events()->mutable_removed()->add_block_hashes(2);
  const auto tally = relay.publish({four_events, token_batch(2, 2)});
  CHECK(tally.batches_applied() == 2);
  CHECK(tally.source_resets() == 0);  // the refused batches never moved the source's sequence
  // Block 1 of the batch before the oversized one, and the two token blocks: nothing of a
  // refused batch, and block 2 stored and removed again.
  CHECK(only_pool(relay).unique_blocks() == 3);

  const auto state = relay.get_state();
  CHECK(state.endpoints_size() == 1);
  const Scrape s = scrape(relay);
  CHECK(refusals(s, "string_bytes") == 3);
  CHECK(refusals(s, "batch_events") == 1);
  CHECK(refusals(s, "event_blocks") == 1);
  CHECK(refusals(s, "event_tokens") == 1);
  CHECK(s.value("kv_relay_serving_load_reports_total", {{"source", "frontend"}, {"outcome", "invalid"}}) == 1);
}

TEST_CASE("ingest limits: a count of live things past its limit is RESOURCE_EXHAUSTED naming the flag",
          "[ingest][limits]") {
  TestRelay relay(limited_options());
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.put_worker(put_worker_request(kBackend, 2));

  require_refusal(relay.put_worker_status(put_worker_request(kBackend, 3)), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/backend/generate: it has 2 workers, the most --max-workers-per-endpoint (2) allows");
  relay.put_worker(put_worker_request(kBackend, 2));  // a worker replacing itself adds none

  relay.put_worker(put_worker_request(kOther, 1));
  require_refusal(relay.put_worker_status(put_worker_request(endpoint_ref("prod", "third"), 1)),
                  grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/third/generate: the relay holds 2 serving endpoints, the most "
                  "--max-serving-endpoints (2) allows");

  WorkerShape two_ranks;
  two_ranks.dp_size = 2;
  relay.put_worker(put_worker_request(kOther, 1, two_ranks));  // 4 KV sources in all
  WorkerShape three_ranks;
  three_ranks.dp_size = 3;
  require_refusal(relay.put_worker_status(put_worker_request(kOther, 2, three_ranks)),
                  grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/other/generate worker 2: its 3 KV sources (or data-parallel ranks, if more) would "
                  "make 7 in all, above --max-kv-sources (5)");
  // Ranks count as sources do where a worker declares more of them: held and walked all the same.
  WorkerShape sourceless_ranks;
  sourceless_ranks.dp_size = 3;
  sourceless_ranks.push_sources = false;
  require_refusal(relay.put_worker_status(put_worker_request(kOther, 2, sourceless_ranks)),
                  grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/other/generate worker 2: its 3 KV sources (or data-parallel ranks, if more) would "
                  "make 7 in all, above --max-kv-sources (5)");

  // Nothing of a refused call applied, and what is withdrawn makes room again.
  auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 2);
  CHECK(state.endpoints(0).worker_ids_size() == 2);
  CHECK(state.endpoints(1).worker_ids_size() == 1);
  relay.remove_worker(kBackend, 1);
  relay.put_worker(put_worker_request(kBackend, 3));

  // Open ingest streams: PublishKvEvents and ReportLoad together.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<ingest_v1::PublishKvEventsResponse> responses(2);
  std::vector<std::unique_ptr<grpc::ClientWriter<ingest_v1::KvEventBatch>>> held;
  for (auto& response : responses) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    held.push_back(relay.ingest().PublishKvEvents(contexts.back().get(), &response));
  }
  REQUIRE(relay.runtime().await_open_streams_at_least("ingest", 2));
  const std::string streams = "the relay has 2 open ingest streams, the most --max-ingest-streams (2) allows";
  require_refusal(publish_status(relay, {}), grpc::StatusCode::RESOURCE_EXHAUSTED, streams);
  ingest_v1::LoadReport load;
  *load.mutable_endpoint() = kBackend;
  require_refusal(report_load_status(relay, load), grpc::StatusCode::RESOURCE_EXHAUSTED, streams);
  // A stream's permit is back before its client sees the end: the next stream is admitted at once.
  held[0]->WritesDone();
  REQUIRE(held[0]->Finish().ok());
  CHECK(publish_status(relay, {stored_batch(kBackend, 2, 0, 1, 0, {{1, 11}})}).ok());
  held[1]->WritesDone();
  REQUIRE(held[1]->Finish().ok());

  const Scrape s = scrape(relay);
  CHECK(refusals(s, "workers_per_endpoint") == 1);
  CHECK(refusals(s, "serving_endpoints") == 1);
  CHECK(refusals(s, "kv_sources") == 2);
  CHECK(refusals(s, "ingest_streams") == 2);
}

TEST_CASE("ingest limits: the names a catalog update carries stay within half of --max-message-bytes",
          "[ingest][limits]") {
  // Past the limit, every catalog update would exceed the largest message: gRPC would fail
  // every WatchKvPoolCatalog write, and routers could not read any pool.
  kvrelay::RelayOptions options = loopback_options();  // --max-message-bytes 8 MiB: 4 MiB of names
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  // 600 aliases of 4 000 bytes each: 2.4 MB, within the limit; twice that is not.
  auto worker = [](std::uint64_t id, int aliases) {
    auto request = put_worker_request(kBackend, id);
    for (int i = 0; i < aliases; ++i) {
      request.mutable_card()->add_aliases(fmt::format("{:04}{}", i, std::string(3996, 'a')));
    }
    return request;
  };
  relay.put_worker(worker(1, 600));
  CHECK(await_catalog(*catalog, 1).snapshot().pools(0).registrations(0).aliases_size() == 600);
  // Another worker of the same endpoint with the same aliases adds no names; one with twice as many would.
  relay.put_worker(worker(2, 600));
  require_refusal(relay.put_worker_status(worker(3, 1200)), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/backend/generate worker 3: its models' names would make the catalog's ");
  CHECK(relay.get_state().endpoints(0).worker_ids_size() == 2);  // nothing of the refused call applied

  // A name two endpoints claim drops out of both their registrations, aliases and all; each
  // endpoint still counts what it would carry alone, so the catalog cannot grow past the limit
  // by way of names that become unambiguous again when a worker leaves.
  WorkerShape claims_llama;
  claims_llama.model = "other";
  auto claimant = put_worker_request(endpoint_ref("prod", "claimant"), 5, claims_llama);
  claimant.mutable_card()->add_aliases("llama");
  relay.put_worker(claimant);
  WorkerShape third_model;
  third_model.model = "third";
  auto third = put_worker_request(endpoint_ref("prod", "third"), 6, third_model);
  for (int i = 0; i < 600; ++i) third.mutable_card()->add_aliases(fmt::format("t{:04}{}", i, std::string(3995, 'b')));
  require_refusal(relay.put_worker_status(third), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/third/generate worker 6: its models' names would make the catalog's ");
  const Scrape s = scrape(relay);
  CHECK(refusals(s, "catalog_bytes") == 2);
}

TEST_CASE("ingest limits: availability kept for endpoints without workers is bounded by --max-serving-endpoints",
          "[ingest][limits]") {
  TestRelay relay(limited_options());
  const auto third = endpoint_ref("prod", "third");
  relay.set_availability(kBackend, {1});  // neither endpoint has a worker yet: both sets are kept
  relay.set_availability(kOther, {1});
  require_refusal(relay.set_availability_status(third, {1}), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/third/generate: it has no worker, and the relay holds availability for 2 endpoints "
                  "without workers, the most --max-serving-endpoints (2) allows");
  relay.set_availability(kOther, {2});  // a set already kept is replaced, never refused

  auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 2);
  CHECK(state.endpoints(0).endpoint().component() == "backend");
  CHECK(state.endpoints(1).endpoint().component() == "other");
  CHECK(state.endpoints(1).live_worker_ids(0) == 2);

  // A worker arriving makes its endpoint count among those with workers, which makes room.
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.set_availability(third, {1});
  state = relay.get_state();
  REQUIRE(state.endpoints_size() == 3);
  CHECK(state.endpoints(0).worker_ids_size() == 1);
  CHECK(state.endpoints(2).endpoint().component() == "third");
  CHECK(refusals(scrape(relay), "serving_endpoints") == 1);
}

TEST_CASE("ingest limits: a live set names at most --max-workers-per-endpoint workers", "[ingest][limits]") {
  TestRelay relay(limited_options());
  relay.put_worker(put_worker_request(kBackend, 1));
  relay.set_availability(kBackend, {1});
  // Ids are counted once however often they are named: two distinct ids are within the limit.
  CHECK(relay.set_availability_status(kBackend, {1, 2, 2, 1}).ok());
  require_refusal(relay.set_availability_status(kBackend, {1, 2, 3}), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/backend/generate: its live set names 3 workers, the most "
                  "--max-workers-per-endpoint (2) allows");
  require_refusal(relay.set_availability_status(kOther, {7, 8, 9}), grpc::StatusCode::RESOURCE_EXHAUSTED,
                  "endpoint prod/other/generate: its live set names 3 workers");

  // The refused sets changed nothing: the backend keeps its last set, the other endpoint has none.
  const auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 1);
  CHECK(std::vector<std::uint64_t>(state.endpoints(0).live_worker_ids().begin(),
                                   state.endpoints(0).live_worker_ids().end()) == std::vector<std::uint64_t>{1, 2});
  CHECK(refusals(scrape(relay), "workers_per_endpoint") == 2);
}
