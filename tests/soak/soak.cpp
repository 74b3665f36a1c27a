// Soak: minutes of random churn against one in-process relay. Workers join and leave,
// generations swap, consumers connect, stall, cancel and reconnect while ingest runs at a
// steady rate. Every quiet phase checks each live consumer's replica against GetState's
// filter_digest at the same sequence; at the end every permit must be back and resident
// memory must be flat after warm-up. Usage: soak [SECONDS] (default 600). Run by `make soak`.
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "app/relay_runtime.hpp"
#include "core/cbi1.hpp"
#include "core/xxh3.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

using namespace kvrelay;
using Clock = std::chrono::steady_clock;
namespace v1 = dynamo::kvrelay::v1;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

constexpr std::uint32_t kMarker = 0x4B565231;
constexpr int kEndpoints = 3;
constexpr int kConsumers = 6;

std::size_t resident_mib() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) >> 20;
}

ingest_v1::EndpointRef endpoint(int i) {
  ingest_v1::EndpointRef ref;
  ref.set_namespace_("soak");
  ref.set_component("backend-" + std::to_string(i));
  ref.set_endpoint("generate");
  return ref;
}

struct Totals {
  std::atomic<std::uint64_t> digest_checks{0}, digest_mismatches{0}, subscriptions{0}, lagged{0}, cancelled{0},
      ended_by_relay{0}, batches{0}, churn_events{0};
};

struct Shared {
  std::atomic<bool> stop{false};
  std::atomic<bool> quiet{false};  // ingest and churn pause; consumers compare digests
  std::mutex state_mutex;
  std::map<std::uint64_t, ingest_v1::PoolState> pools_by_generation;  // GetState at the quiet point
  std::atomic<std::uint64_t> quiet_epoch{0};
  // The quiet phase's hand-offs, under phase_mutex: the main thread sets quiet and stop there.
  std::mutex phase_mutex;
  std::condition_variable phase_changed;
  bool driver_paused = false;           // the driver's stream is closed: every batch it wrote applied
  std::uint64_t checks_this_epoch = 0;  // consumers that compared their replica at the current epoch
};

// Ingest and membership churn.
void drive(const std::string& ingest_address, Shared& shared, Totals& totals) {
  auto stub = ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(ingest_address, grpc::InsecureChannelCredentials()));
  std::mt19937_64 rng(1);
  std::map<int, std::uint64_t> sequence, epoch;
  auto put = [&](int e, bool with_source) {
    ingest_v1::PutWorkerRequest request;
    *request.mutable_endpoint() = endpoint(e);
    request.set_worker_id(1);
    request.mutable_card()->set_display_name("model-" + std::to_string(e));
    request.mutable_card()->set_kv_cache_block_size(16);
    request.mutable_card()->set_worker_type(ingest_v1::WORKER_TYPE_AGGREGATED);
    if (with_source) request.add_kv_sources()->mutable_push();
    grpc::ClientContext context;
    ingest_v1::PutWorkerResponse response;
    stub->PutWorker(&context, request, &response);
    epoch[e] = rng();
    sequence[e] = 0;
  };
  for (int e = 0; e < kEndpoints; ++e) put(e, true);
  std::unique_ptr<grpc::ClientContext> context;
  ingest_v1::PublishKvEventsResponse response;
  std::unique_ptr<grpc::ClientWriter<ingest_v1::KvEventBatch>> writer;
  auto open = [&] {
    context = std::make_unique<grpc::ClientContext>();
    writer = stub->PublishKvEvents(context.get(), &response);
  };
  auto close = [&] {
    writer->WritesDone();
    writer->Finish();
  };
  open();
  std::map<int, std::vector<std::uint64_t>> held;
  while (!shared.stop) {
    if (shared.quiet) {
      close();  // Finish returns once every batch written was applied
      std::unique_lock lock(shared.phase_mutex);
      shared.driver_paused = true;
      shared.phase_changed.notify_all();
      shared.phase_changed.wait(lock, [&] { return !shared.quiet || shared.stop; });
      shared.driver_paused = false;
      lock.unlock();
      open();
      continue;
    }
    const int e = static_cast<int>(rng() % kEndpoints);
    if (rng() % 400 == 0) {  // churn: a generation swap (sources off, then on) or a worker leaving
      ++totals.churn_events;
      close();
      if (rng() % 2 == 0) {
        put(e, false);
      } else {
        grpc::ClientContext c;
        ingest_v1::RemoveWorkerRequest remove;
        *remove.mutable_endpoint() = endpoint(e);
        remove.set_worker_id(1);
        ingest_v1::RemoveWorkerResponse r;
        stub->RemoveWorker(&c, remove, &r);
      }
      held[e].clear();
      put(e, true);
      open();
      continue;
    }
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = endpoint(e);
    batch.set_worker_id(1);
    batch.set_source_epoch(epoch[e]);
    batch.set_sequence(sequence[e]++);
    for (int i = 0; i < 16; ++i) {
      auto& blocks = held[e];
      if (blocks.size() > 3000 || (!blocks.empty() && rng() % 3 == 0)) {
        const std::size_t victim = rng() % blocks.size();
        batch.add_events()->mutable_removed()->add_block_hashes(blocks[victim]);
        blocks.erase(blocks.begin() + static_cast<long>(victim));
      } else {
        auto* block = batch.add_events()->mutable_stored()->add_blocks();
        block->set_block_hash(rng());
        block->set_tokens_hash(rng() % 20000);
        blocks.push_back(block->block_hash());
      }
    }
    writer->Write(batch);
    ++totals.batches;
    std::this_thread::sleep_for(std::chrono::microseconds(500));  // pacing: ~2000 batches/s
  }
  close();
}

// One consumer: subscribe to a random pool, keep a replica, stall or cancel at random.
void consume(int id, const std::string& wan_address, Shared& shared, Totals& totals) {
  std::mt19937_64 rng(100 + id);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub =
      v1::KvEventRelay::NewStub(grpc::CreateCustomChannel(wan_address, grpc::InsecureChannelCredentials(), args));
  while (!shared.stop) {
    grpc::ClientContext catalog_context;
    v1::WatchKvPoolCatalogRequest watch;
    watch.set_subscriber_id(fmt::format("soak-{}", id));
    watch.set_contract_marker(kMarker);
    auto catalog = stub->WatchKvPoolCatalog(&catalog_context, watch);
    v1::KvPoolCatalogUpdate update;
    if (!catalog->Read(&update) || update.snapshot().pools_size() == 0) {
      catalog_context.TryCancel();
      catalog->Finish();
      continue;
    }
    catalog_context.TryCancel();
    catalog->Finish();
    const auto producer = update.snapshot().pools(static_cast<int>(rng() % update.snapshot().pools_size())).producer();
    grpc::ClientContext context;
    v1::SubscribeKvPoolRequest request;
    request.set_subscriber_id(fmt::format("soak-{}", id));
    *request.mutable_expected_producer() = producer;
    request.set_contract_marker(kMarker);
    auto reader = stub->SubscribeKvPool(&context, request);
    ++totals.subscriptions;
    const cbi1::FilterFormat format{producer.ckf_format().seed(), producer.ckf_format().bucket_count()};
    cbi1::SnapshotAssembly assembly(format.bucket_count);
    RandomAccessWords words;
    std::uint64_t sequence = 0;
    std::uint64_t checked_epoch = shared.quiet_epoch;
    const auto leave_at = Clock::now() + std::chrono::milliseconds(500 + rng() % 5000);
    v1::FilterUpdate frame;
    bool cancelled = false;
    while (!shared.stop && reader->Read(&frame)) {
      if (frame.kind() != v1::FILTER_UPDATE_KIND_HEARTBEAT) {
        const auto decoded = cbi1::decode(frame.payload(), format);
        if (!decoded) break;
        if (frame.kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK) {
          auto done = assembly.absorb(*decoded);
          if (done && *done) {
            words = std::move((*done)->words);
            sequence = (*done)->epoch;
          }
        } else {
          for (const auto& image : std::get<cbi1::DecodedDelta>(*decoded).images) words[image.bucket] = image.word;
          sequence = frame.sequence();
        }
      }
      if (shared.quiet && shared.quiet_epoch != checked_epoch && !words.empty()) {
        bool checked = false;
        {
          std::lock_guard lock(shared.state_mutex);
          const auto pool = shared.pools_by_generation.find(producer.layout_generation());
          if (pool != shared.pools_by_generation.end() && pool->second.sequence() == sequence) {
            checked_epoch = shared.quiet_epoch;
            checked = true;
            ++totals.digest_checks;
            if (xxh3(words.data(), words.size() * 8, 0) != pool->second.filter_digest()) ++totals.digest_mismatches;
          }
        }
        if (checked) {
          std::lock_guard lock(shared.phase_mutex);
          ++shared.checks_this_epoch;
          shared.phase_changed.notify_all();
        }
      }
      if (rng() % 2000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1500));  // a stall
      if (Clock::now() > leave_at) {
        cancelled = true;
        context.TryCancel();
        break;
      }
    }
    if (shared.stop) context.TryCancel();
    const auto status = reader->Finish();
    if (cancelled) {
      ++totals.cancelled;
    } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++totals.lagged;
    } else {
      ++totals.ended_by_relay;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 600;
  spdlog::set_level(spdlog::level::warn);
  RelayOptions options;
  options.dc_id = "soak";
  options.listen = "127.0.0.1:0";
  options.ingest_listen = "127.0.0.1:0";
  options.expected_unique_blocks = 65536;
  options.pool_heartbeat_ms = 200;
  auto relay = RelayRuntime::start(options).value();
  Shared shared;
  Totals totals;
  std::thread driver([&] { drive(relay->ingest_address(), shared, totals); });
  std::vector<std::thread> consumers;
  for (int i = 0; i < kConsumers; ++i)
    consumers.emplace_back([&, i] { consume(i, relay->wan_address(), shared, totals); });

  auto ingest =
      ingest_v1::RelayIngest::NewStub(grpc::CreateChannel(relay->ingest_address(), grpc::InsecureChannelCredentials()));
  const auto start = Clock::now();
  std::size_t rss_min = SIZE_MAX, rss_max = 0;
  while (Clock::now() - start < std::chrono::seconds(seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // an active phase
    {
      std::unique_lock lock(shared.phase_mutex);
      shared.quiet = true;
      if (!shared.phase_changed.wait_for(lock, std::chrono::seconds(30), [&] { return shared.driver_paused; })) {
        fmt::print("soak: FAIL (the driver did not pause within 30 s)\n");
        std::_Exit(1);
      }
      shared.checks_this_epoch = 0;
    }
    grpc::ClientContext context;
    ingest_v1::RelayState state;
    ingest->GetState(&context, ingest_v1::GetStateRequest{}, &state);
    {
      std::lock_guard lock(shared.state_mutex);
      shared.pools_by_generation.clear();
      for (const auto& pool : state.pools()) shared.pools_by_generation[pool.layout_generation()] = pool;
      ++shared.quiet_epoch;
    }
    {
      // Every consumer compares once its replica reaches the state's sequence; one that is
      // stalled, resubscribing or between pools may not, so the phase ends after at most 2 s.
      std::unique_lock lock(shared.phase_mutex);
      shared.phase_changed.wait_for(lock, std::chrono::seconds(2),
                                    [&] { return shared.checks_this_epoch >= static_cast<std::uint64_t>(kConsumers); });
      shared.quiet = false;
    }
    shared.phase_changed.notify_all();
    if (Clock::now() - start > std::chrono::seconds(seconds) / 5) {  // after warm-up
      const std::size_t rss = resident_mib();
      rss_min = std::min(rss_min, rss);
      rss_max = std::max(rss_max, rss);
    }
  }
  {
    std::lock_guard lock(shared.phase_mutex);
    shared.stop = true;
  }
  shared.phase_changed.notify_all();
  for (auto& consumer : consumers) consumer.join();
  driver.join();
  bool permits_back = true;
  for (const char* kind : {"catalog", "readiness", "load", "pool", "hubs"}) {
    permits_back = permits_back && relay->await_open_streams_at_most(kind, 0, std::chrono::seconds(10));
  }
  const std::uint64_t rss_growth = rss_max - rss_min;
  fmt::print("| Soak ({} s) | Result |\n| --- | --- |\n", seconds);
  fmt::print("| batches ingested / churn events | {} / {} |\n", totals.batches.load(), totals.churn_events.load());
  fmt::print("| subscriptions: cancelled / lagged / ended by the relay | {}: {} / {} / {} |\n",
             totals.subscriptions.load(), totals.cancelled.load(), totals.lagged.load(), totals.ended_by_relay.load());
  fmt::print("| replica digest checks at equal sequences / mismatches | {} / {} |\n", totals.digest_checks.load(),
             totals.digest_mismatches.load());
  fmt::print("| every permit back after all consumers left | {} |\n", permits_back ? "yes" : "NO");
  fmt::print("| resident memory after warm-up, min / max | {} / {} MiB |\n", rss_min, rss_max);
  relay->shutdown(std::chrono::milliseconds(2000));
  const bool ok = totals.digest_mismatches == 0 && totals.digest_checks > 0 && permits_back && rss_growth < 64;
  fmt::print("soak: {}\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
