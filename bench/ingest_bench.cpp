// Block stores per second through both ingest paths, with many pools fed at once (issues #12
// and #15): `sources` sources, one worker each, spread over `pools` pools, every source sending
// at once. push: one PublishKvEvents stream per source, batches built before the clock starts,
// timed until every stream's answer (each batch applied). zmq: in-process fake vLLM engines
// publish pre-encoded batches in vLLM's wire format over loopback TCP; the relay decodes,
// hashes the tokens, canonicalizes and applies them; timed until GetState shows every block.
// Run it under `taskset` to see how the rate follows the cores the relay may use.
// Usage: ingest_bench [total blocks per scenario, default 2097152]
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <random>
#include <thread>

#include "app/relay_runtime.hpp"
#include "bench/pool_endpoint.hpp"
#include "bench/store_batches.hpp"
#include "ingest/fake_engine.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

using namespace kvrelay;
using Clock = std::chrono::steady_clock;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

constexpr std::uint32_t kBlockSize = 16;
constexpr int kEventsPerBatch = 16;
constexpr int kBlocksPerEvent = 16;
constexpr int kBlocksPerBatch = kEventsPerBatch * kBlocksPerEvent;

enum class Transport { kPush, kZmq };

// vLLM payloads of `batches` batches, each of kEventsPerBatch fresh chains of kBlocksPerEvent blocks.
std::vector<std::shared_ptr<const std::string>> encoded_batches(std::size_t batches, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::shared_ptr<const std::string>> payloads;
  payloads.reserve(batches);
  std::vector<std::uint32_t> tokens(kBlockSize * kBlocksPerEvent);
  for (std::size_t b = 0; b < batches; ++b) {
    std::vector<demo::EngineEvent> events;
    for (int e = 0; e < kEventsPerBatch; ++e) {
      for (auto& token : tokens) token = static_cast<std::uint32_t>(rng() % 32000);
      demo::BlockStored stored;
      stored.block_size = kBlockSize;
      for (int i = 0; i < kBlocksPerEvent; ++i) stored.block_hashes.push_back(rng());
      stored.token_ids = tokens;
      events.emplace_back(std::move(stored));
    }
    payloads.push_back(std::make_shared<const std::string>(demo::encode_vllm_batch(0.0, events, 0)));
  }
  return payloads;
}

ingest_v1::RelayState relay_state(ingest_v1::RelayIngest::Stub& ingest) {
  grpc::ClientContext context;
  ingest_v1::RelayState state;
  if (!ingest.GetState(&context, {}, &state).ok()) throw std::runtime_error("GetState failed");
  return state;
}

std::uint64_t blocks_held(ingest_v1::RelayIngest::Stub& ingest) {
  const ingest_v1::RelayState state = relay_state(ingest);
  std::uint64_t blocks = 0;
  for (const auto& pool : state.pools()) blocks += pool.unique_blocks();
  return blocks;
}

// Every source's PublishKvEvents stream on a connection of its own, all writing at once.
void push_all(const std::string& address, std::vector<std::vector<ingest_v1::KvEventBatch>>& batches) {
  std::vector<std::thread> feeders;
  for (std::size_t s = 0; s < batches.size(); ++s) {
    feeders.emplace_back([&address, &input = batches[s], s] {
      grpc::ChannelArguments arguments;
      arguments.SetInt("kvrelay.bench.connection", static_cast<int>(s));  // no shared subchannel
      auto ingest = ingest_v1::RelayIngest::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments));
      grpc::ClientContext context;
      ingest_v1::PublishKvEventsResponse response;
      auto writer = ingest->PublishKvEvents(&context, &response);
      for (const auto& batch : input) writer->Write(batch);
      writer->WritesDone();
      const grpc::Status status = writer->Finish();
      if (!status.ok() || response.batches_applied() != input.size()) {
        throw std::runtime_error("PublishKvEvents: " + status.error_message());
      }
    });
  }
  for (auto& feeder : feeders) feeder.join();
}

// `sources` sources, one worker each, spread over `pools` endpoints; returns block stores/s.
double block_stores_per_second(Transport transport, std::size_t sources, std::size_t pools, std::size_t total_blocks) {
  const std::size_t batches_per_source = total_blocks / sources / kBlocksPerBatch;
  const std::uint64_t blocks = std::uint64_t{batches_per_source} * sources * kBlocksPerBatch;
  std::vector<std::unique_ptr<demo::FakeEngine>> engines;
  std::vector<std::vector<std::shared_ptr<const std::string>>> payloads;
  std::vector<std::vector<ingest_v1::KvEventBatch>> pushed;
  for (std::size_t s = 0; s < sources; ++s) {
    if (transport == Transport::kPush) {
      pushed.push_back(bench::store_batches(batches_per_source, kEventsPerBatch, kBlocksPerEvent, s + 1,
                                            bench::pool_endpoint(s % pools), s + 1));
      continue;
    }
    demo::FakeEngineOptions options;
    options.replay_endpoint.reset();  // nothing is lost on loopback: a gap would show as missing blocks
    engines.push_back(std::make_unique<demo::FakeEngine>(options));
    payloads.push_back(encoded_batches(batches_per_source, s + 1));
  }

  RelayOptions options;
  options.dc_id = "bench";
  options.listen = "127.0.0.1:0";
  options.ingest_listen = "127.0.0.1:0";
  options.expected_unique_blocks = blocks / pools + blocks / pools / 4;
  auto runtime = RelayRuntime::start(options).value();
  auto ingest = ingest_v1::RelayIngest::NewStub(
      grpc::CreateChannel(runtime->ingest_address(), grpc::InsecureChannelCredentials()));
  for (std::size_t s = 0; s < sources; ++s) {
    ingest_v1::PutWorkerRequest put;
    *put.mutable_endpoint() = bench::pool_endpoint(s % pools);
    put.set_worker_id(s + 1);
    put.mutable_card()->set_display_name("bench-model");
    put.mutable_card()->set_kv_cache_block_size(kBlockSize);
    put.mutable_card()->set_worker_type(ingest_v1::WORKER_TYPE_AGGREGATED);
    if (transport == Transport::kPush) {
      put.add_kv_sources()->mutable_push();
    } else {
      put.add_kv_sources()->mutable_zmq()->set_endpoint(engines[s]->pub_endpoint());
    }
    grpc::ClientContext context;
    ingest_v1::PutWorkerResponse response;
    if (!ingest->PutWorker(&context, put, &response).ok()) throw std::runtime_error("PutWorker failed");
  }
  for (auto& engine : engines) {
    if (!engine->await_subscribers(1, std::chrono::seconds(10))) throw std::runtime_error("no subscriber");
  }
  // Engine pools materialize once their sources connect; time only the events.
  while (true) {
    const ingest_v1::RelayState state = relay_state(*ingest);
    std::size_t connected = 0;
    for (const auto& endpoint : state.endpoints()) {
      for (const auto& source : endpoint.sources()) connected += source.connected() ? 1 : 0;
    }
    if (state.pools_size() == static_cast<int>(pools) && connected == sources) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  const auto start = Clock::now();
  if (transport == Transport::kPush) {
    push_all(runtime->ingest_address(), pushed);
  } else {
    for (std::size_t b = 0; b < batches_per_source; ++b) {
      for (std::size_t s = 0; s < sources; ++s) engines[s]->publish_payload(payloads[s][b]);
    }
    // GetState scans and hashes every filter: asked every 10 ms, it costs the relay little and
    // adds at most 10 ms to a measurement of seconds.
    while (blocks_held(*ingest) < blocks) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (blocks_held(*ingest) != blocks) throw std::runtime_error("the pools do not hold every block sent");
  runtime->shutdown();
  return static_cast<double>(blocks) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(std::getenv("BENCH_LOG") ? spdlog::level::info : spdlog::level::warn);
  const std::size_t total = argc > 1 ? std::stoull(argv[1]) : std::size_t{1} << 21;
  fmt::print(
      "| Ingest ({}-block batches, {} blocks, every source at once) | push (PublishKvEvents) | zmq (vLLM "
      "msgpack) |\n| --- | --- | --- |\n",
      kBlocksPerBatch, total);
  for (const auto& [sources, pools] : {std::pair<std::size_t, std::size_t>{1, 1}, {16, 1}, {16, 4}, {16, 16}}) {
    const double push = block_stores_per_second(Transport::kPush, sources, pools, total);
    const double zmq = block_stores_per_second(Transport::kZmq, sources, pools, total);
    fmt::print("| {} source{}, {} pool{} | {:.2f} M block stores/s | {:.2f} M block stores/s |\n", sources,
               sources == 1 ? "" : "s", pools, pools == 1 ? "" : "s", push / 1e6, zmq / 1e6);
  }
  return 0;
}
