// kvrelay-cli as an operator runs it, against a kv-relay subprocess on the demo deployment.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <sstream>

#include "core/cbi1.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"
#include "tests/app/demo_topology.hpp"
#include "tests/app/process.hpp"

using namespace kvrelay::test;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

// The relay on the demo deployment fed by push (no generated workload: the test sends the events).
class DemoRelay {
 public:
  explicit DemoRelay(const std::string& name, const std::vector<std::string>& extra_args = {})
      : relay_("cli-" + name,
               {"--metrics-listen", "off", "--dc-id", "dc-cli-test", "--topology",
                write_demo_topology("cli-" + name, fed_by_push)},
               extra_args),
        wan_(relay_.address("wan")),
        ingest_(relay_.address("ingest")) {}
  const std::string& wan() const { return wan_; }
  const std::string& ingest() const { return ingest_; }

 private:
  RelayChild relay_;
  std::string wan_, ingest_;
};

// The whitespace-separated cells of every line of a table.
using Row = std::vector<std::string>;
std::vector<Row> rows_of(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    rows.emplace_back(std::istream_iterator<std::string>(cells), std::istream_iterator<std::string>());
  }
  return rows;
}

std::vector<std::uint32_t> prompt_tokens() {
  std::vector<std::uint32_t> tokens(200);
  for (std::uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 1000 + 13 * i;
  return tokens;
}

// Stores the first `blocks` blocks of the prompt on one rank, as token blocks the relay hashes.
ingest_v1::KvEventBatch store_prompt(const std::string& component, std::uint64_t worker, std::uint32_t block_size,
                                     std::size_t blocks, const std::string& lora = "") {
  ingest_v1::KvEventBatch batch;
  batch.mutable_endpoint()->set_namespace_("prod");
  batch.mutable_endpoint()->set_component(component);
  batch.mutable_endpoint()->set_endpoint("generate");
  batch.set_worker_id(worker);
  auto* stored = batch.add_events()->mutable_stored();
  stored->set_lora_name(lora);
  const auto tokens = prompt_tokens();
  for (std::size_t b = 0; b < blocks; ++b) {
    auto* block = stored->add_blocks();
    block->set_block_hash(worker * 1000 + b + (lora.empty() ? 0 : 500));
    for (std::size_t t = b * block_size; t < (b + 1) * block_size; ++t)
      block->mutable_tokens()->add_token_ids(tokens[t]);
  }
  return batch;
}

void publish(const std::string& ingest, const std::vector<ingest_v1::KvEventBatch>& batches) {
  auto stub = ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(ingest, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = stub->PublishKvEvents(&context, &response);
  for (const auto& batch : batches) REQUIRE(writer->Write(batch));
  writer->WritesDone();
  REQUIRE(writer->Finish().ok());
  REQUIRE(response.batches_applied() == batches.size());
}

std::map<std::string, nlohmann::json> overlap_by_endpoint(const std::string& wan, const std::string& model,
                                                          const std::string& tokens_file) {
  const auto [output, exit_code] =
      run_to_end(KVRELAY_CLI, {"overlap", "--model", model, "--tokens", tokens_file, "--target", wan, "--json"});
  INFO(output);
  REQUIRE(exit_code == 0);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& row : nlohmann::json::parse(output)) rows[row["endpoint"].get<std::string>()] = row;
  return rows;
}

}  // namespace

TEST_CASE("kvrelay-cli reads a running relay as tables or JSON, and fails clearly when it cannot", "[binary][cli]") {
  DemoRelay relay("cli");
  const auto [info, info_exit] = run_to_end(KVRELAY_CLI, {"info", "--target", relay.wan(), "--json"});
  CHECK(info_exit == 0);
  CHECK_THAT(info, Catch::Contains("\"relayIncarnation\""));
  const auto [catalog, catalog_exit] = run_to_end(KVRELAY_CLI, {"catalog", "--target", relay.wan()});
  CHECK(catalog_exit == 0);
  CHECK_THAT(catalog, Catch::Contains("catalog revision") && Catch::Contains("prod/qwen-decode/generate") &&
                          Catch::Contains("tenant-a(lora)"));
  const auto [readiness, readiness_exit] = run_to_end(KVRELAY_CLI, {"readiness", "--target", relay.wan()});
  CHECK(readiness_exit == 0);
  CHECK_THAT(readiness, Catch::Contains("meta/llama-3-8b") && Catch::Contains("tenant-a=READY"));
  const auto [top, top_exit] = run_to_end(KVRELAY_CLI, {"top", "--target", relay.wan(), "--iterations", "1"});
  CHECK(top_exit == 0);
  CHECK_THAT(top, Catch::Contains("prod/llama/generate") && Catch::Contains("installed") && Catch::Contains("READY"));
  // How long ago each plane's and each installed replica's last message was applied.
  CHECK_THAT(top,
             Catch::Matches(R"([\s\S]*catalog rev \d+ \(\d+\.\ds ago\)  readiness rev \d+ \(\d+\.\ds ago\)[\s\S]*)"));
  CHECK_THAT(top,
             Catch::Matches(
                 R"([\s\S]*LAST FRAME[\s\S]*prod/llama/generate +\S+ +installed +\d+ +[\d.]+ +\d+\.\ds ago [\s\S]*)"));

  const auto [unreachable, unreachable_exit] = run_to_end(KVRELAY_CLI, {"info", "--target", "127.0.0.1:1"});
  CHECK(unreachable_exit == 1);
  CHECK_THAT(unreachable, Catch::StartsWith("kvrelay-cli: 127.0.0.1:1: relay unreachable"));
  const auto [usage, usage_exit] = run_to_end(KVRELAY_CLI, {"bogus"});
  CHECK(usage_exit == 2);
  CHECK_THAT(usage, Catch::Contains("unknown command 'bogus'"));
  const auto [help, help_exit] = run_to_end(KVRELAY_CLI, {"overlap", "--help"});
  CHECK(help_exit == 0);
  CHECK_THAT(help, Catch::Contains("overlap --model NAME --tokens FILE"));
  const auto [missing, missing_exit] = run_to_end(KVRELAY_CLI, {"overlap", "--target", relay.wan()});
  CHECK(missing_exit == 2);
  CHECK_THAT(missing, Catch::Contains("--model NAME and --tokens FILE"));
}

TEST_CASE("kvrelay-cli state lists every endpoint with its workers, its pool and its conflicts", "[binary][cli]") {
  // A budget of 1 byte holds no pool: every endpoint is declared, none is published.
  DemoRelay refused("cli-budget", {"--memory-budget-bytes", "1"});
  const auto [table, exit_code] = run_to_end(KVRELAY_CLI, {"state", "--target", refused.ingest()});
  INFO(table);
  CHECK(exit_code == 0);
  CHECK_THAT(table, Catch::Contains("3 endpoints, 0 pools"));
  // ENDPOINT WORKERS LIVE POOL SOURCES CONFLICTS: the demo's llama endpoint has two workers of
  // two ranks each, live as their topology entry declares.
  const Row refused_llama{"prod/llama/generate", "2", "2", "no", "4", "1"};
  CHECK(std::ranges::count(rows_of(table), refused_llama) == 1);
  for (const std::string component : {"llama", "qwen-prefill", "qwen-decode"}) {
    CHECK(lines_with(table, {"prod/" + component + "/generate conflict: PoolMaterialization: memory budget: needs "}) ==
          1);
  }

  DemoRelay served("cli-state");
  const auto [served_table, served_exit] = run_to_end(KVRELAY_CLI, {"state", "--target", served.ingest()});
  INFO(served_table);
  CHECK(served_exit == 0);
  CHECK_THAT(served_table, Catch::Contains("3 endpoints, 3 pools") && !Catch::Contains("conflict:"));
  const Row served_llama{"prod/llama/generate", "2", "2", "yes", "4", "0"};
  CHECK(std::ranges::count(rows_of(served_table), served_llama) == 1);
}

TEST_CASE("kvrelay-cli overlap gives the depths of the blocks each pool was sent", "[binary][cli]") {
  DemoRelay relay("overlap");
  publish(relay.ingest(), {store_prompt("llama", 101, 16, 5), store_prompt("llama", 102, 16, 3, "tenant-a"),
                           store_prompt("qwen-prefill", 201, 32, 2)});
  std::string text;
  for (auto token : prompt_tokens()) text += std::to_string(token) + (token % 3 ? " " : ",\n");
  const auto tokens_file = write_file("overlap-tokens.txt", text);

  const auto llama = overlap_by_endpoint(relay.wan(), "llama", tokens_file);  // by alias
  REQUIRE(llama.size() == 1);
  CHECK(llama.at("prod/llama/generate")["cached_blocks"] == 5);  // the LoRA blocks are other cache keys
  CHECK(llama.at("prod/llama/generate")["prompt_blocks"] == 200 / 16);
  CHECK(llama.at("prod/llama/generate")["readiness"] == "READY");
  const auto adapter = overlap_by_endpoint(relay.wan(), "tenant-a", tokens_file);
  CHECK(adapter.at("prod/llama/generate")["cached_blocks"] == 3);
  CHECK(adapter.at("prod/llama/generate")["adapter"] == "tenant-a");
  const auto qwen = overlap_by_endpoint(relay.wan(), "Qwen/Qwen3-32B", tokens_file);
  REQUIRE(qwen.size() == 2);
  CHECK(qwen.at("prod/qwen-prefill/generate")["cached_blocks"] == 2);
  CHECK(qwen.at("prod/qwen-decode/generate")["cached_blocks"] == 0);
  CHECK(qwen.at("prod/qwen-decode/generate")["readiness"] == "READY");

  const auto [unknown, unknown_exit] =
      run_to_end(KVRELAY_CLI, {"overlap", "--model", "nope", "--tokens", tokens_file, "--target", relay.wan()});
  CHECK(unknown_exit == 1);
  CHECK_THAT(unknown, Catch::Contains("no pool serves 'nope'"));
  const auto bad_tokens = write_file("bad-tokens.txt", "1 2 three");
  const auto [bad, bad_exit] =
      run_to_end(KVRELAY_CLI, {"overlap", "--model", "llama", "--tokens", bad_tokens, "--target", relay.wan()});
  CHECK(bad_exit == 4);
  CHECK_THAT(bad, Catch::Contains("'three'"));
}

TEST_CASE("kvrelay-cli hash reproduces the specification's worked example", "[cli]") {
  const auto tokens = write_file("hash-tokens.txt", "0,1,2,3,4,5,6,7");
  const auto [output, exit_code] = run_to_end(KVRELAY_CLI, {"hash", "--block-size", "4", "--tokens", tokens, "--json"});
  REQUIRE(exit_code == 0);
  const auto json = nlohmann::json::parse(output);
  REQUIRE(json["blocks"].size() == 2);
  CHECK(json["blocks"][0]["block_hash"].get<std::uint64_t>() == 0x7EE2CBEDC694AB46);
  CHECK(json["blocks"][1]["block_hash"].get<std::uint64_t>() == 0xA8416CFD935BDB13);
  CHECK(json["blocks"][1]["sequence_hash"].get<std::uint64_t>() == 0x83FB702F20E2AD65);
  const auto [lora, lora_exit] =
      run_to_end(KVRELAY_CLI, {"hash", "--block-size", "4", "--lora", "a", "--tokens", tokens});
  CHECK(lora_exit == 0);
  CHECK_THAT(lora, Catch::Contains("lora a") && !Catch::Contains("0x7ee2cbedc694ab46"));
  // The specification's vector for LoRA "tenant-a" under cache namespace "tenant-ns".
  const auto [salted, salted_exit] =
      run_to_end(KVRELAY_CLI, {"hash", "--block-size", "4", "--lora", "tenant-a", "--cache-namespace", "tenant-ns",
                               "--tokens", tokens, "--json"});
  REQUIRE(salted_exit == 0);
  const auto salted_json = nlohmann::json::parse(salted);
  CHECK(salted_json["seed"].get<std::uint64_t>() == 0x61EC37649AE78004);
  CHECK(salted_json["cache_namespace"] == "tenant-ns");
  const auto [usage, usage_exit] = run_to_end(KVRELAY_CLI, {"hash", "--tokens", tokens});
  CHECK(usage_exit == 2);
  // "help" as a value is that value, not a request for the usage text.
  const auto [named_help, named_help_exit] =
      run_to_end(KVRELAY_CLI, {"hash", "--block-size", "4", "--lora", "help", "--tokens", tokens});
  CHECK(named_help_exit == 0);
  CHECK_THAT(named_help, Catch::Contains("lora help") && !Catch::Contains("Usage:"));
}

TEST_CASE("kvrelay-cli refuses a flag its command does not read, and a refresh period of 0", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{{"state", "--watch"},
                                                                {"info", "--watch"},
                                                                {"top", "--json"},
                                                                {"hash", "--target", "localhost:1"},
                                                                {"overlap", "--block-size", "16"},
                                                                {"decode-frame", "--interval-ms", "5"}}) {
    const auto [output, exit_code] = run_to_end(KVRELAY_CLI, args);
    INFO(output);
    CHECK(exit_code == 2);
    CHECK_THAT(output, Catch::StartsWith("kvrelay-cli: " + args[1] + " does not apply to " + args[0]));
  }
  const auto [zero, zero_exit] = run_to_end(KVRELAY_CLI, {"top", "--interval-ms", "0"});
  CHECK(zero_exit == 2);
  CHECK_THAT(zero, Catch::StartsWith("kvrelay-cli: --interval-ms needs at least 1"));
  const auto [help, help_exit] = run_to_end(KVRELAY_CLI, {"help"});
  CHECK(help_exit == 0);
  CHECK_THAT(help, Catch::StartsWith("Usage: kvrelay-cli COMMAND"));
}

TEST_CASE("kvrelay-cli decode-frame describes valid CBI1 frames and names the fault of broken ones", "[cli]") {
  const kvrelay::cbi1::FilterFormat format{0x5DEECE66D1B54A33, 1024};
  const auto delta =
      kvrelay::cbi1::encode_delta(format, 0xDC, 41, 42, std::vector<kvrelay::BucketImage>{{7, 0x1234}, {9, 0x5}});
  REQUIRE(delta);
  const auto [output, exit_code] = run_to_end(KVRELAY_CLI, {"decode-frame", write_file("delta.cbi1", *delta)});
  CHECK(exit_code == 0);
  CHECK_THAT(output, Catch::Contains("valid CBI1 delta") &&
                         Catch::Contains("delta from sequence 41: 2 bucket images") && Catch::Contains("1024 buckets"));
  const auto chunks = kvrelay::cbi1::encode_snapshot(format, 0xDC, 5, std::vector<std::uint64_t>(1024, 0));
  const auto [chunk, chunk_exit] =
      run_to_end(KVRELAY_CLI, {"decode-frame", write_file("chunk.cbi1", chunks->at(0)), "--json"});
  CHECK(chunk_exit == 0);
  CHECK(nlohmann::json::parse(chunk)["kind"] == "snapshot_chunk");
  std::string corrupt = *delta;
  corrupt.back() ^= 0x1;
  const auto [broken, broken_exit] = run_to_end(KVRELAY_CLI, {"decode-frame", write_file("corrupt.cbi1", corrupt)});
  CHECK(broken_exit == 4);
  CHECK_THAT(broken, Catch::Contains("invalid CBI1 frame: Checksum"));
}
