// docs/reliability.md's tables: every kind of bad input kv-relay has been shown, sent for real
// (gRPC on loopback, or the decoder that takes those bytes), with the answer it got. The test
// builds the tables from what the relay answers now and fails when the committed document
// differs; KVRELAY_UPDATE_DOCS=1 writes the new tables instead (then review the diff). Each
// answer is also held to the verdict the contract gives that input, which no rewrite changes.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <msgpack.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <sstream>

#include "core/cbi1.hpp"
#include "core/ckf.hpp"
#include "core/engine_events.hpp"
#include "core/engine_frames.hpp"
#include "core/prometheus_text.hpp"
#include "ingest/topology_file.hpp"
#include "tests/integration/harness.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

struct Row {
  std::string plane;
  std::string input;
  std::string answer;
};

std::string code_name(grpc::StatusCode code) {
  static const std::map<grpc::StatusCode, std::string> names{{grpc::OK, "OK"},
                                                             {grpc::INVALID_ARGUMENT, "INVALID_ARGUMENT"},
                                                             {grpc::NOT_FOUND, "NOT_FOUND"},
                                                             {grpc::FAILED_PRECONDITION, "FAILED_PRECONDITION"},
                                                             {grpc::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
                                                             {grpc::UNAUTHENTICATED, "UNAUTHENTICATED"},
                                                             {grpc::UNAVAILABLE, "UNAVAILABLE"},
                                                             {grpc::UNIMPLEMENTED, "UNIMPLEMENTED"}};
  const auto it = names.find(code);
  return it == names.end() ? std::to_string(static_cast<int>(code)) : it->second;
}

// "CODE / REASON: message", the reason without its prefix.
std::string answer_of(const grpc::Status& status, const std::string& reason) {
  std::string answer = "`" + code_name(status.error_code());
  if (!reason.empty()) answer += " / " + reason.substr(std::string("RELAY_ERROR_REASON_").size());
  answer += "`";
  if (!status.error_message().empty()) answer += ": " + status.error_message();
  return answer;
}

std::string trailer_reason(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find("kv-relay-error-reason");
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

template <class Response, class Request, class Open>
std::string stream_answer(const Request& request, Open open) {
  StreamReader<Response> reader(request, open);
  while (reader.next()) {
  }
  const grpc::Status status = reader.finish();
  return answer_of(status, reader.reason());
}

// PublishKvEvents with `batches` on `stub`: the status, or the tally when it is OK.
std::string publish_answer(ingest_v1::RelayIngest::Stub& stub, const std::vector<ingest_v1::KvEventBatch>& batches) {
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = stub.PublishKvEvents(&context, &response);
  for (const auto& batch : batches) {
    if (!writer->Write(batch)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return answer_of(status, trailer_reason(context));
  return fmt::format("`OK`: {} batches applied, {} rejected (counted in `kv_relay_ingest_batches_total`)",
                     response.batches_applied(), response.batches_rejected());
}

std::string put_worker_answer(ingest_v1::RelayIngest::Stub& stub, const ingest_v1::PutWorkerRequest& request) {
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  const grpc::Status status = stub.PutWorker(&context, request, &response);
  if (!status.ok() || response.conflicts_size() == 0) return answer_of(status, trailer_reason(context));
  return "`OK` with the conflict: " + response.conflicts(0);
}

std::string token_file(const std::string& token) {
  // In the build tree, so that the normal and sanitizer suites never share it.
  const auto path = std::filesystem::path(KVRELAY_TEST_TMP_DIR) / "reliability-token";
  std::ofstream(path) << token << "\n";
  return path.string();
}

std::vector<Row> wan_rows() {
  auto options = loopback_options();
  options.max_catalog_subscribers = 1;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  relay.put_worker(put_worker_request(endpoint_ref("prod", "backend"), 1));
  const v1::ProducerIdentity producer = await_single_pool(*catalog);
  auto pool_answer = [&](const v1::SubscribeKvPoolRequest& request) {
    return stream_answer<v1::FilterUpdate>(
        request, [&](grpc::ClientContext* c, const auto& r) { return relay.wan().SubscribeKvPool(c, r); });
  };
  v1::SubscribeKvPoolRequest subscribe;
  subscribe.set_subscriber_id("router-a");
  subscribe.set_contract_marker(kMarker);
  *subscribe.mutable_expected_producer() = producer;

  std::vector<Row> rows;
  auto wrong_marker = subscribe;
  wrong_marker.set_contract_marker(kMarker + 1);
  rows.push_back({"WAN", "`SubscribeKvPool` with a wrong `contract_marker`", pool_answer(wrong_marker)});
  auto no_subscriber = subscribe;
  no_subscriber.clear_subscriber_id();
  rows.push_back({"WAN", "`SubscribeKvPool` with an empty `subscriber_id`", pool_answer(no_subscriber)});
  auto other_dc = subscribe;
  other_dc.mutable_expected_producer()->mutable_pool_id()->set_dc_id(producer.pool_id().dc_id() + 1);
  rows.push_back({"WAN", "`SubscribeKvPool` for a pool this relay does not serve", pool_answer(other_dc)});
  auto stale = subscribe;
  stale.mutable_expected_producer()->set_layout_generation(producer.layout_generation() + 1);
  rows.push_back({"WAN", "`SubscribeKvPool` naming another generation of a served pool", pool_answer(stale)});
  auto future = subscribe;
  future.mutable_expected_producer()->mutable_pool_id()->set_identity_version(2);
  rows.push_back({"WAN", "`SubscribeKvPool` with an unknown pool identity version", pool_answer(future)});
  v1::WatchKvPoolCatalogRequest watch;
  watch.set_subscriber_id("router-b");
  watch.set_contract_marker(kMarker);
  rows.push_back({"WAN", "a second `WatchKvPoolCatalog` with `--max-catalog-subscribers 1`",
                  stream_answer<v1::KvPoolCatalogUpdate>(watch, [&](grpc::ClientContext* c, const auto& r) {
                    return relay.wan().WatchKvPoolCatalog(c, r);
                  })});
  return rows;
}

std::vector<Row> ingest_rows() {
  auto options = loopback_options();
  options.ingest_token_file = token_file("s3cret");
  options.max_batch_events = 4;
  options.max_workers_per_endpoint = 1;
  options.expected_unique_blocks = 64;
  options.memory_budget_bytes = 6'000;
  TestRelay relay(options);
  const auto endpoint = endpoint_ref("prod", "backend");
  relay.put_worker(put_worker_request(endpoint, 1));
  auto anonymous = relay.ingest_client(std::nullopt);
  auto wrong = relay.ingest_client("Bearer guess");
  auto& ingest = relay.ingest();

  std::vector<Row> rows;
  rows.push_back({"ingest", "a call without `authorization` (with `--ingest-token-file`)",
                  put_worker_answer(*anonymous, put_worker_request(endpoint, 2))});
  rows.push_back(
      {"ingest", "a call with the wrong bearer token", put_worker_answer(*wrong, put_worker_request(endpoint, 2))});
  rows.push_back({"ingest", "`PublishKvEvents` without `authorization`",
                  publish_answer(*anonymous, {stored_batch(endpoint, 1, 0, 1, 0, {{1, 0x11}})})});
  auto no_endpoint = put_worker_request(endpoint, 2);
  no_endpoint.clear_endpoint();
  rows.push_back({"ingest", "`PutWorker` without an endpoint", put_worker_answer(ingest, no_endpoint)});
  rows.push_back({"ingest", "`PutWorker` past `--max-workers-per-endpoint 1`",
                  put_worker_answer(ingest, put_worker_request(endpoint, 2))});
  WorkerShape other_model;
  other_model.model = "other";
  rows.push_back({"ingest", "`PutWorker` of a pool the memory budget (6 000 bytes) cannot hold",
                  put_worker_answer(ingest, put_worker_request(endpoint_ref("prod", "other"), 3, other_model))});
  auto oversized = stored_batch(endpoint, 1, 0, 1, 0, {{1, 0x11}});
  for (int i = 0; i < 4; ++i) *oversized.add_events() = oversized.events(0);
  rows.push_back(
      {"ingest", "a `KvEventBatch` of 5 events past `--max-batch-events 4`", publish_answer(ingest, {oversized})});
  rows.push_back({"ingest", "a `KvEventBatch` of a worker the relay does not know",
                  publish_answer(ingest, {stored_batch(endpoint, 99, 0, 1, 0, {{1, 0x11}})})});
  rows.push_back({"ingest", "a `KvEventBatch` whose sequence goes back",
                  publish_answer(ingest, {stored_batch(endpoint, 1, 0, 1, 5, {{1, 0x11}}),
                                          stored_batch(endpoint, 1, 0, 1, 4, {{2, 0x22}})})});
  return rows;
}

// The ingest limits (docs/protocol/limits.md#ingest-limits), each met by a request just past it.
std::vector<Row> ingest_limit_rows() {
  auto options = loopback_options();
  options.max_event_blocks = 3;
  options.max_event_tokens = 8;
  options.max_ingest_string_bytes = 32;
  options.max_serving_endpoints = 2;
  options.max_kv_sources = 3;
  options.max_ingest_streams = 1;
  TestRelay relay(options);
  const auto endpoint = endpoint_ref("prod", "backend");
  relay.put_worker(put_worker_request(endpoint, 1));
  auto& ingest = relay.ingest();

  std::vector<Row> rows;
  rows.push_back({"ingest", "`PutWorker` with a 33-byte component past `--max-ingest-string-bytes 32`",
                  put_worker_answer(ingest, put_worker_request(endpoint_ref("prod", std::string(33, 'n')), 2))});
  rows.push_back(
      {"ingest", "a stored event of 4 blocks past `--max-event-blocks 3`",
       publish_answer(ingest, {stored_batch(endpoint, 1, 0, 1, 0, {{1, 0x11}, {2, 0x22}, {3, 0x33}, {4, 0x44}})})});
  auto tokens = stored_batch(endpoint, 1, 0, 1, 0, {});
  for (std::uint32_t b = 0; b < 3; ++b) {
    auto* block = tokens.mutable_events(0)->mutable_stored()->add_blocks();
    block->set_block_hash(100 + b);
    for (std::uint32_t t = 0; t < 4; ++t) block->mutable_tokens()->add_token_ids(4 * b + t);
  }
  rows.push_back(
      {"ingest", "a stored event of 12 token ids past `--max-event-tokens 8`", publish_answer(ingest, {tokens})});
  WorkerShape three_ranks;
  three_ranks.dp_size = 3;
  rows.push_back({"ingest", "`PutWorker` whose ranks would make 4 KV sources, past `--max-kv-sources 3`",
                  put_worker_answer(ingest, put_worker_request(endpoint, 2, three_ranks))});
  relay.put_worker(put_worker_request(endpoint_ref("prod", "second"), 3));
  rows.push_back({"ingest", "`PutWorker` of a third endpoint past `--max-serving-endpoints 2`",
                  put_worker_answer(ingest, put_worker_request(endpoint_ref("prod", "third"), 4))});
  {
    grpc::ClientContext held_context;
    ingest_v1::PublishKvEventsResponse held_response;
    auto held = ingest.PublishKvEvents(&held_context, &held_response);
    REQUIRE(relay.runtime().await_open_streams_at_least("ingest", 1));
    rows.push_back({"ingest", "a second open ingest stream past `--max-ingest-streams 1`", publish_answer(ingest, {})});
    held->WritesDone();
    REQUIRE(held->Finish().ok());
  }
  return rows;
}

std::string cbi1_answer(std::string frame) {
  const auto decoded = cbi1::decode(frame, cbi1::FilterFormat{ckf::kDefaultSeed, 1024});
  if (decoded) return "accepted";
  const auto& error = decoded.error();
  return fmt::format("`{}`{}", cbi1::to_string(error.kind), error.detail.empty() ? "" : ": " + error.detail);
}

std::vector<Row> decoder_rows() {
  const cbi1::FilterFormat format{ckf::kDefaultSeed, 1024};
  const std::vector<std::uint64_t> words(1024, 0);
  const std::string good = cbi1::encode_snapshot(format, 7, 1, words).value().front();
  std::vector<Row> rows;
  rows.push_back({"CBI1 (consumer)", "a frame cut to 10 bytes", cbi1_answer(good.substr(0, 10))});
  std::string magic = good;
  magic[0] = 'X';
  rows.push_back({"CBI1 (consumer)", "a frame with another magic", cbi1_answer(magic)});
  std::string flipped = good;
  flipped[flipped.size() - 1] ^= 1;
  rows.push_back({"CBI1 (consumer)", "a frame with one body bit flipped", cbi1_answer(flipped)});
  const std::string other_size =
      cbi1::encode_snapshot({ckf::kDefaultSeed, 2048}, 7, 1, std::vector<std::uint64_t>(2048)).value().front();
  rows.push_back({"CBI1 (consumer)", "a snapshot of 2048 buckets where 1024 are expected", cbi1_answer(other_size)});
  std::string version = good;
  version[4] = 2;  // wire_version, little-endian u16 at offset 4
  rows.push_back({"CBI1 (consumer)", "a frame of wire version 2", cbi1_answer(version)});
  std::string both_kinds = good;
  both_kinds[6] = 3;  // flags: chunk and delta at once
  rows.push_back({"CBI1 (consumer)", "a frame flagged both snapshot chunk and delta", cbi1_answer(both_kinds)});
  rows.push_back({"CBI1 (consumer)", "a frame one byte past the largest a frame can be",
                  cbi1_answer(good + std::string(cbi1::kMaxFrameBytes + 1 - good.size(), '\0'))});

  const std::string seq(8, '\0');
  const std::array<std::byte, 3> topic{std::byte{'k'}, std::byte{'v'}, std::byte{'s'}};
  const std::array<engine::Frame, 2> two_frames{engine::Frame(topic), engine::Frame(topic)};
  const auto live = engine::parse_live(two_frames);
  rows.push_back({"ZeroMQ engine", "a live message of 2 frames", live ? "accepted" : live.error()});
  engine::EventDecoder decoder({16, hashing::HashFormat::kStandard, 0});
  ingest_v1::KvEventBatch batch;
  const std::array<std::byte, 2> not_msgpack{std::byte{0xc1}, std::byte{0x00}};
  const auto decoded = decoder.decode(not_msgpack, batch);
  rows.push_back(
      {"ZeroMQ engine", "a payload that is not msgpack",
       decoded.batch == engine::DecodeResult::Batch::kMalformed ? "malformed batch: " + decoded.detail : "decoded"});
  msgpack::sbuffer forged_tag;  // [ts, [[tag, [1]]], nil]: one event with a tag that breaks the log line
  msgpack::packer<msgpack::sbuffer> pack(forged_tag);
  pack.pack_array(3);
  pack.pack_double(0.0);
  pack.pack_array(1);
  pack.pack_array(2);
  pack.pack(std::string("BlockEvicted\nERROR a forged log line"));
  pack.pack_array(1);
  pack.pack_uint64(1);
  pack.pack_nil();
  ingest_v1::KvEventBatch forged_batch;
  const auto forged = decoder.decode(std::as_bytes(std::span(forged_tag.data(), forged_tag.size())), forged_batch);
  rows.push_back({"ZeroMQ engine", "an event whose type tag holds a line break", forged.detail});
  const auto page = prometheus_text::parse("vllm:num_requests_running{engine=\"0\" 1\n");
  rows.push_back({"engine metrics page", "a sample with an unclosed label set", page ? "accepted" : page.error()});
  const auto topology = parse_topology("endpoints: [ {namespace: a");
  rows.push_back({"topology file", "YAML cut off mid-flow", topology ? "accepted" : topology.error()});
  return rows;
}

std::string markdown(const std::vector<Row>& rows) {
  std::string table = "| Where | Bad input | What kv-relay answers |\n| --- | --- | --- |\n";
  for (const Row& row : rows) {
    std::string answer = row.answer;
    for (std::size_t at = 0; (at = answer.find('|', at)) != std::string::npos; at += 2) answer.replace(at, 1, "\\|");
    std::replace(answer.begin(), answer.end(), '\n', ' ');
    table += fmt::format("| {} | {} | {} |\n", row.plane, row.input, answer);
  }
  return table;
}

// What each row must answer: the contract's status and reason (docs/protocol/errors.md,
// limits.md), the CBI1 fault (cbi1-ckf.md), the decoder's or parser's complaint. Written here,
// not read off the relay: a regression is not written into the document.
const std::map<std::string_view, std::string_view>& verdicts() {
  static const std::map<std::string_view, std::string_view> kVerdicts{
      {"`SubscribeKvPool` with a wrong `contract_marker`", "`FAILED_PRECONDITION / CONTRACT_MISMATCH`"},
      {"`SubscribeKvPool` with an empty `subscriber_id`", "`INVALID_ARGUMENT / INVALID_REQUEST`"},
      {"`SubscribeKvPool` for a pool this relay does not serve", "`NOT_FOUND / POOL_NOT_FOUND`"},
      {"`SubscribeKvPool` naming another generation of a served pool", "`FAILED_PRECONDITION / PRODUCER_CHANGED`"},
      {"`SubscribeKvPool` with an unknown pool identity version", "`FAILED_PRECONDITION / UNSUPPORTED_FEATURE`"},
      {"a second `WatchKvPoolCatalog` with `--max-catalog-subscribers 1`", "`RESOURCE_EXHAUSTED / RESOURCE_LIMIT`"},
      {"a call without `authorization` (with `--ingest-token-file`)", "`UNAUTHENTICATED`"},
      {"a call with the wrong bearer token", "`UNAUTHENTICATED`"},
      {"`PublishKvEvents` without `authorization`", "`UNAUTHENTICATED`"},
      {"`PutWorker` without an endpoint", "`INVALID_ARGUMENT`"},
      {"`PutWorker` past `--max-workers-per-endpoint 1`", "`RESOURCE_EXHAUSTED`"},
      {"`PutWorker` of a pool the memory budget (6 000 bytes) cannot hold",
       "`OK` with the conflict: PoolMaterialization"},
      {"a `KvEventBatch` of 5 events past `--max-batch-events 4`", "`INVALID_ARGUMENT`"},
      {"a `KvEventBatch` of a worker the relay does not know", "`OK`: 0 batches applied, 1 rejected"},
      {"a `KvEventBatch` whose sequence goes back", "`OK`: 1 batches applied, 1 rejected"},
      {"`PutWorker` with a 33-byte component past `--max-ingest-string-bytes 32`", "`INVALID_ARGUMENT`"},
      {"a stored event of 4 blocks past `--max-event-blocks 3`", "`INVALID_ARGUMENT`"},
      {"a stored event of 12 token ids past `--max-event-tokens 8`", "`INVALID_ARGUMENT`"},
      {"`PutWorker` whose ranks would make 4 KV sources, past `--max-kv-sources 3`", "`RESOURCE_EXHAUSTED`"},
      {"`PutWorker` of a third endpoint past `--max-serving-endpoints 2`", "`RESOURCE_EXHAUSTED`"},
      {"a second open ingest stream past `--max-ingest-streams 1`", "`RESOURCE_EXHAUSTED`"},
      {"a frame cut to 10 bytes", "`Truncated`"},
      {"a frame with another magic", "`Magic`"},
      {"a frame with one body bit flipped", "`Checksum`"},
      {"a snapshot of 2048 buckets where 1024 are expected", "`Format.Mismatch`"},
      {"a frame of wire version 2", "`WireVersion`"},
      {"a frame flagged both snapshot chunk and delta", "`Flags`"},
      {"a frame one byte past the largest a frame can be", "`FrameTooLarge`"},
      {"a live message of 2 frames", "2 frames"},
      {"a payload that is not msgpack", "not a msgpack value"},
      {"an event whose type tag holds a line break", "unknown event type"},
      {"a sample with an unclosed label set", "expected ',' or '}'"},
      {"YAML cut off mid-flow", "end of map flow not found"},
  };
  return kVerdicts;
}

constexpr std::string_view kBegin = "<!-- begin: generated by tests/integration/reliability_test.cpp -->\n";
constexpr std::string_view kEnd = "<!-- end: generated -->\n";

}  // namespace

TEST_CASE("docs/reliability.md lists every bad input with the answer kv-relay gives now", "[reliability]") {
  std::vector<Row> rows = wan_rows();
  for (auto& row : ingest_rows()) rows.push_back(std::move(row));
  for (auto& row : ingest_limit_rows()) rows.push_back(std::move(row));
  for (auto& row : decoder_rows()) rows.push_back(std::move(row));
  std::set<std::string_view> inputs;
  for (const Row& row : rows) {
    INFO(row.input << ": " << row.answer);
    REQUIRE(inputs.insert(row.input).second);
    const auto verdict = verdicts().find(row.input);
    REQUIRE(verdict != verdicts().end());
    REQUIRE_THAT(row.answer, Catch::Contains(std::string(verdict->second)));
  }
  REQUIRE(inputs.size() == verdicts().size());  // every verdict has its row
  const std::string generated = markdown(rows);

  const std::string path = std::string(KVRELAY_SOURCE_DIR) + "/docs/reliability.md";
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::string doc = text.str();
  const auto begin = doc.find(kBegin);
  const auto end = doc.find(kEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string committed = doc.substr(begin + kBegin.size(), end - begin - kBegin.size());
  if (std::getenv("KVRELAY_UPDATE_DOCS") != nullptr && committed != generated) {
    doc.replace(begin + kBegin.size(), committed.size(), generated);
    std::ofstream(path) << doc;
    FAIL("docs/reliability.md rewritten: review the diff, then run the test again");
  }
  INFO("regenerate with KVRELAY_UPDATE_DOCS=1 build/bin/integration_tests '[reliability]'");
  CHECK(committed == generated);
}
