// System-level figures of the relay (issue #3): one publisher's apply rate with and without
// the gRPC ingest path (and what that path carries with nothing applied), event-to-wire
// latency, fan-out to 64 subscribers, cold snapshot delivery, and heap memory per live block.
// Prints one table; run through `make bench`.
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#ifdef KVRELAY_TCMALLOC
#include <gperftools/malloc_extension.h>
#else
#include <malloc.h>
#endif
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/pool_publisher.hpp"
#include "app/relay_runtime.hpp"
#include "bench/load/process_usage.hpp"
#include "bench/store_batches.hpp"
#include "core/cbi1.hpp"
#include "core/ckf.hpp"
#include "core/quantile.hpp"
#include "core/token_hashing.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "grpc_gateway/ingest_service.hpp"
#include "grpc_gateway/status.hpp"
#include "grpc_gateway/windowed_reader.hpp"
#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

using namespace kvrelay;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t kMarker = 0x4B565231;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double process_cpu_seconds() { return bench::process_usage(getpid()).value().cpu_seconds; }

long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A timed run's block stores per second, how many cores the whole process kept busy meanwhile
// (relay, clients and benchmark together: near the cores it may use, the run is bound by CPU;
// well below, by hand-offs between threads), and the pages it touched for the first time
// (minor faults: memory new to the process, docs/benchmarks.md#first-touch).
struct Throughput {
  double per_second = 0;
  double busy_cores = 0;
  long page_faults = 0;
};

// Times the span from construction to finish(`count`).
class ThroughputClock {
 public:
  Throughput finish(std::size_t count) const {
    const double elapsed = seconds_since(start_);
    return {static_cast<double>(count) / elapsed, (process_cpu_seconds() - cpu_start_) / elapsed,
            minor_page_faults() - faults_start_};
  }

 private:
  long faults_start_ = minor_page_faults();
  Clock::time_point start_ = Clock::now();
  double cpu_start_ = process_cpu_seconds();
};

// Heap bytes in use, by the allocator's own count (cmake/Allocator.cmake). Unlike resident
// pages it does not keep what an earlier phase freed, so a figure does not depend on what ran
// before.
std::size_t heap_in_use() {
#ifdef KVRELAY_TCMALLOC
  std::size_t bytes = 0;
  if (!MallocExtension::instance()->GetNumericProperty("generic.current_allocated_bytes", &bytes)) {
    throw std::runtime_error("tcmalloc does not report the bytes allocated");
  }
  return bytes;
#else
  const struct mallinfo2 info = mallinfo2();  // mmapped chunks included
  return info.uordblks + info.hblkhd;
#endif
}

ingest_v1::EndpointRef endpoint() {
  ingest_v1::EndpointRef ref;
  ref.set_namespace_("bench");
  ref.set_component("backend");
  ref.set_endpoint("generate");
  return ref;
}

// Counts batch outcomes as they come: wait() for all of them, which throws unless every one
// applied whole (a rate only counts block stores applied); wait_for() for the first `done`.
class CountingSink {
 public:
  explicit CountingSink(std::size_t expected) : expected_(expected) {}
  void batch_done(const BatchOutcome& outcome) {
    std::lock_guard lock(mutex_);
    ++done_;
    if (!outcome.applied || outcome.events_rejected > 0) ++failed_;
    finished_.notify_all();
  }
  void wait() {
    wait_for(expected_);
    std::lock_guard lock(mutex_);
    if (failed_ > 0) throw std::runtime_error(fmt::format("{} of {} batches did not apply whole", failed_, expected_));
  }
  void wait_for(std::size_t done) {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return done_ >= done; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  std::size_t expected_;
  std::size_t done_ = 0;
  std::size_t failed_ = 0;
};

// ---- one publisher, no transport ----
// A pool whose workers declare their KV capacity (`declared`) has its tables made room for it
// when it is created; one that does not grows them as the blocks come.
Throughput publisher_apply_rate(std::size_t batches, int events, int blocks, bool declared) {
  caf::actor_system_config config;
  configure_actor_scheduler(config, kDefaultActorThreads);  // as the relay runs its publishers
  caf::actor_system system(config);
  PublisherConfig publisher;
  publisher.spec.bucket_count = *ckf::bucket_count_for(batches * events * blocks);
  publisher.spec.seed = ckf::kDefaultSeed;
  publisher.semantics = {16, hashing::HashFormat::kStandard};
  if (declared) publisher.expected_blocks = {batches * events * blocks, {{{1, 0}, batches * events * blocks}}};
  auto actor = system.spawn(pool_publisher, publisher);
  const auto input = bench::store_batches(batches, events, blocks, 1, endpoint());
  auto sink = std::make_shared<CountingSink>(batches);
  const ThroughputClock clock;
  // As a PublishKvEvents stream feeds its publisher: at most a read window of batches not yet
  // answered (grpc_gateway/windowed_reader.hpp), never the whole input queued at once.
  const std::size_t window = gateway::IngestServiceConfig{}.read_window;
  std::size_t sent = 0;
  for (const auto& batch : input) {
    if (sent >= window) sink->wait_for(sent - window + 1);
    ++sent;
    auto reply = std::make_shared<Reply<BatchOutcome>>(
        [sink](const BatchOutcome& outcome) { sink->batch_done(outcome); }, BatchOutcome{.lost = true});
    // Handed on as the ingest gateway hands a batch it read: parsed into an arena of its own.
    auto request = gateway::make_arena_message<ingest_v1::KvEventBatch>();
    request->CopyFrom(batch);
    caf::anon_send(actor, atoms::apply_batch_atom_v, EventBatchPtr(std::move(request)), SourceReset::kNone,
                   std::move(reply), steady_now_ns());
  }
  sink->wait();
  const Throughput throughput = clock.finish(batches * events * blocks);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  return throughput;
}

struct Relay {
  std::unique_ptr<RelayRuntime> runtime;
  std::unique_ptr<ingest_v1::RelayIngest::Stub> ingest;
  std::shared_ptr<grpc::Channel> wan_channel;
  v1::ProducerIdentity producer;
};

Relay start_runtime(std::uint64_t expected_blocks, std::size_t queue_frames) {
  RelayOptions options;
  options.dc_id = "bench";
  options.listen = "127.0.0.1:0";
  options.ingest_listen = "127.0.0.1:0";
  options.expected_unique_blocks = expected_blocks;
  options.stream_queue_frames = queue_frames;
  Relay relay{RelayRuntime::start(options).value(), nullptr, nullptr, {}};
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  relay.ingest = ingest_v1::RelayIngest::NewStub(
      grpc::CreateCustomChannel(relay.runtime->ingest_address(), grpc::InsecureChannelCredentials(), args));
  relay.wan_channel = grpc::CreateCustomChannel(relay.runtime->wan_address(), grpc::InsecureChannelCredentials(), args);
  return relay;
}

// The bench's one worker, and its pool once the catalog shows it. A worker that declares its
// KV capacity (`total_kv_blocks` on its one rank; 0 is unknown, as in a card) gets a pool whose
// tables are made room for it at once.
void put_worker(Relay& relay, std::uint64_t total_kv_blocks = 0) {
  ingest_v1::PutWorkerRequest put;
  *put.mutable_endpoint() = endpoint();
  put.set_worker_id(1);
  put.mutable_card()->set_display_name("bench-model");
  put.mutable_card()->set_kv_cache_block_size(16);
  put.mutable_card()->set_worker_type(ingest_v1::WORKER_TYPE_AGGREGATED);
  put.mutable_card()->mutable_runtime_config()->set_total_kv_blocks(total_kv_blocks);
  put.add_kv_sources()->mutable_push();
  grpc::ClientContext context;
  ingest_v1::PutWorkerResponse response;
  relay.ingest->PutWorker(&context, put, &response);
  auto wan = v1::KvEventRelay::NewStub(relay.wan_channel);
  grpc::ClientContext catalog_context;
  v1::WatchKvPoolCatalogRequest watch;
  watch.set_subscriber_id("bench");
  watch.set_contract_marker(kMarker);
  auto catalog = wan->WatchKvPoolCatalog(&catalog_context, watch);
  v1::KvPoolCatalogUpdate update;
  while (catalog->Read(&update) && update.snapshot().pools_size() == 0) {
  }
  relay.producer = update.snapshot().pools(0).producer();
  catalog_context.TryCancel();
}

Relay start_relay(std::uint64_t expected_blocks, std::size_t queue_frames = 16) {
  Relay relay = start_runtime(expected_blocks, queue_frames);
  put_worker(relay);
  return relay;
}

// ---- the same through gRPC ingest ----
// Streams `input` on one PublishKvEvents call and returns the block stores per second, timed
// until the server answers (after its last read, and at a relay after the last apply).
struct Streamed {
  Throughput throughput;
  ingest_v1::PublishKvEventsResponse response;
};
Streamed stream_rate(ingest_v1::RelayIngest::Stub& ingest, const std::vector<ingest_v1::KvEventBatch>& input,
                     std::size_t block_stores) {
  const ThroughputClock clock;
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = ingest.PublishKvEvents(&context, &response);
  for (const auto& batch : input) writer->Write(batch);
  writer->WritesDone();
  if (const auto status = writer->Finish(); !status.ok()) {
    throw std::runtime_error("PublishKvEvents: " + status.error_message());
  }
  return {clock.finish(block_stores), std::move(response)};
}

Throughput ingest_apply_rate(std::size_t batches, int events, int blocks, bool declared) {
  Relay relay = start_runtime(batches * events * blocks, 16);
  put_worker(relay, declared ? batches * events * blocks : 0);
  const auto input = bench::store_batches(batches, events, blocks, 2, endpoint());
  const Streamed streamed = stream_rate(*relay.ingest, input, batches * events * blocks);
  // A rate only counts block stores the relay applied.
  if (streamed.response.batches_applied() != input.size()) {
    throw std::runtime_error(fmt::format("the relay applied {} of {} batches ({} rejected)",
                                         streamed.response.batches_applied(), input.size(),
                                         streamed.response.batches_rejected()));
  }
  return streamed.throughput;
}

// ---- the transport alone ----
// A PublishKvEvents server that parses each batch into an arena of its own, as the ingest
// gateway does, and drops it: what gRPC carries on these cores with nothing applied.
class ReadOnlyIngest final
    : public ingest_v1::RelayIngest::WithRawCallbackMethod_PublishKvEvents<ingest_v1::RelayIngest::CallbackService> {
  class Reader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
   public:
    Reader(std::atomic<std::size_t>& batches_read, grpc::ByteBuffer* response)
        : batches_read_(batches_read), response_(response) {
      StartRead(request_.target());
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        gateway::write_response(ingest_v1::PublishKvEventsResponse{}, response_);
        return Finish(grpc::Status::OK);
      }
      if (request_.take() != nullptr) ++batches_read_;
      StartRead(request_.target());
    }
    void OnDone() override { delete this; }

   private:
    std::atomic<std::size_t>& batches_read_;
    grpc::ByteBuffer* response_;
    gateway::ParsedRequests<ingest_v1::KvEventBatch> request_;
  };

 public:
  grpc::ServerReadReactor<grpc::ByteBuffer>* PublishKvEvents(grpc::CallbackServerContext*,
                                                             grpc::ByteBuffer* response) override {
    return new Reader(batches_read, response);
  }
  std::atomic<std::size_t> batches_read{0};
};

Throughput transport_rate(std::size_t batches, int events, int blocks) {
  ReadOnlyIngest service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  const auto server = builder.BuildAndStart();
  auto ingest = ingest_v1::RelayIngest::NewStub(
      grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()));
  const auto input = bench::store_batches(batches, events, blocks, 2, endpoint());
  const Throughput throughput = stream_rate(*ingest, input, batches * events * blocks).throughput;
  if (service.batches_read != batches) throw std::runtime_error("the read-only server missed batches");
  server->Shutdown();
  return throughput;
}

// A subscriber reading frames on its own thread until cancelled.
struct Subscriber {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::FilterUpdate>> reader;
  std::thread thread;
  std::atomic<std::size_t> frames{0};
  std::atomic<bool> snapshot_done{false};
  Clock::time_point snapshot_at;
  grpc::Status status;
};

void subscribe(Relay& relay, Subscriber& s, std::function<void(const v1::FilterUpdate&)> on_frame = {}) {
  auto wan = v1::KvEventRelay::NewStub(relay.wan_channel);
  v1::SubscribeKvPoolRequest request;
  request.set_subscriber_id("bench");
  *request.mutable_expected_producer() = relay.producer;
  request.set_contract_marker(kMarker);
  s.reader = wan->SubscribeKvPool(&s.context, request);
  const std::uint64_t chunks = cbi1::chunk_count_for(relay.producer.ckf_format().bucket_count());
  s.thread = std::thread([&s, chunks, on_frame] {
    v1::FilterUpdate frame;
    std::uint64_t chunk_frames = 0;
    while (s.reader->Read(&frame)) {
      ++s.frames;
      if (frame.kind() == v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK && ++chunk_frames == chunks) {
        s.snapshot_at = Clock::now();
        s.snapshot_done = true;
      }
      if (on_frame) on_frame(frame);
    }
    s.status = s.reader->Finish();
  });
}

// ---- event-to-wire latency, client-observed ----
// Every 1 ms one batch carries rate/1000 stored events of one new block each (engines flush
// their KV events per scheduler step). The subscriber matches delta images against each
// block's fingerprint in either candidate bucket: latency = batch written -> delta decoded.
std::pair<double, double> event_to_wire_ms(std::uint32_t events_per_second, double duration_s) {
  Relay relay = start_relay(1 << 22);
  const auto& format = relay.producer.ckf_format();
  const ckf::Addressing addressing(format.seed(), format.bucket_count());
  struct Sent {
    ckf::Probe probe;
    Clock::time_point at;
  };
  std::mutex mutex;
  // The first half second of sending warms up connections and thread pools; it is not measured.
  Clock::time_point measure_from;                       // under mutex; set before the first batch is sent
  std::map<std::uint64_t, Sent> sent;                   // block number -> probe and send time
  std::multimap<std::uint64_t, std::uint64_t> waiting;  // candidate bucket -> block number
  std::vector<double> latencies;
  Subscriber s;
  subscribe(relay, s, [&](const v1::FilterUpdate& frame) {
    if (frame.kind() != v1::FILTER_UPDATE_KIND_DELTA) return;
    const auto decoded = cbi1::decode(frame.payload(), {format.seed(), format.bucket_count()});
    const auto now = Clock::now();
    std::lock_guard lock(mutex);
    for (const auto& image : std::get<cbi1::DecodedDelta>(*decoded).images) {
      auto [first, last] = waiting.equal_range(image.bucket);
      std::vector<std::uint64_t> arrived;
      for (auto it = first; it != last; ++it) {
        if (ckf::bucket_holds(image.word, sent.at(it->second).probe.fingerprint)) arrived.push_back(it->second);
      }
      for (std::uint64_t block : arrived) {  // forget both candidate buckets of an arrived block
        const Sent& entry = sent.at(block);
        if (entry.at >= measure_from) {
          latencies.push_back(std::chrono::duration<double, std::milli>(now - entry.at).count());
        }
        for (std::uint64_t bucket : {entry.probe.bucket_a, entry.probe.bucket_b}) {
          auto [b, e] = waiting.equal_range(bucket);
          for (auto it = b; it != e; ++it) {
            if (it->second == block) {
              waiting.erase(it);
              break;
            }
          }
        }
        sent.erase(block);
      }
    }
  });
  while (!s.snapshot_done) std::this_thread::yield();
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = relay.ingest->PublishKvEvents(&context, &response);
  std::mt19937_64 rng(3);
  const std::uint32_t per_batch = std::max(1u, events_per_second / 1000);
  std::uint64_t next_block = 0;
  const auto start = Clock::now();
  {
    std::lock_guard lock(mutex);
    measure_from = start + std::chrono::milliseconds(500);
  }
  for (std::uint64_t tick = 0; seconds_since(start) < duration_s; ++tick) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(tick));
    ingest_v1::KvEventBatch batch;
    *batch.mutable_endpoint() = endpoint();
    batch.set_worker_id(1);
    batch.set_sequence(tick);
    std::vector<ckf::Probe> probes;
    for (std::uint32_t e = 0; e < per_batch; ++e) {
      const std::uint64_t hash = rng();
      auto* block = batch.add_events()->mutable_stored()->add_blocks();
      block->set_block_hash(rng());
      block->set_tokens_hash(hash);
      probes.push_back(addressing.probe(hash));
    }
    {
      std::lock_guard lock(mutex);
      const auto now = Clock::now();
      for (const auto& probe : probes) {
        const std::uint64_t block = next_block++;
        sent.emplace(block, Sent{probe, now});
        waiting.emplace(probe.bucket_a, block);
        waiting.emplace(probe.bucket_b, block);
      }
    }
    writer->Write(batch);
  }
  writer->WritesDone();
  writer->Finish();
  s.context.TryCancel();
  s.thread.join();
  std::sort(latencies.begin(), latencies.end());
  auto at = [&](double q) { return nearest_rank_quantile(latencies, q); };
  if (std::getenv("BENCH_LOG"))
    fmt::print("  p90 {:.3f} p95 {:.3f} p999 {:.3f} max {:.3f} n {}\n", at(0.9), at(0.95), at(0.999), at(1.0),
               latencies.size());
  return {at(0.5), at(0.99)};
}

// ---- 64 subscribers at a steady event rate ----
std::pair<std::size_t, std::size_t> fan_out(std::size_t subscribers, std::uint32_t events_per_second,
                                            double duration_s) {
  Relay relay = start_relay(1 << 20);
  std::vector<std::unique_ptr<Subscriber>> subs;
  for (std::size_t i = 0; i < subscribers; ++i) {
    subs.push_back(std::make_unique<Subscriber>());
    subscribe(relay, *subs.back());
  }
  for (auto& s : subs) {
    while (!s->snapshot_done) std::this_thread::yield();
  }
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = relay.ingest->PublishKvEvents(&context, &response);
  const std::size_t per_tick = events_per_second / 1000;  // 1 ms ticks, one batch each
  const auto start = Clock::now();
  std::uint64_t sequence = 0;
  for (std::uint64_t tick = 0; seconds_since(start) < duration_s; ++tick) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(tick));
    auto batch = bench::store_batches(1, static_cast<int>(per_tick), 1, tick + 10, endpoint(), 1, sequence++).front();
    writer->Write(batch);
  }
  writer->WritesDone();
  writer->Finish();
  relay.runtime->shutdown(std::chrono::milliseconds(2000));
  std::size_t lagged = 0, frames = 0;
  for (auto& s : subs) {
    s->thread.join();
    lagged += s->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    frames += s->frames;
  }
  return {lagged, frames};
}

// ---- cold snapshot delivery ----
double cold_snapshot_ms(std::uint64_t bucket_count, std::size_t subscribers) {
  Relay relay = start_relay(bucket_count * 16 / 5);  // sizes the filter to exactly bucket_count
  std::vector<std::unique_ptr<Subscriber>> subs;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < subscribers; ++i) {
    subs.push_back(std::make_unique<Subscriber>());
    subscribe(relay, *subs.back());
  }
  double slowest = 0;
  for (auto& s : subs) {
    while (!s->snapshot_done) std::this_thread::yield();
    slowest = std::max(slowest, std::chrono::duration<double, std::milli>(s->snapshot_at - start).count());
    s->context.TryCancel();
    s->thread.join();
  }
  return slowest;
}

// ---- heap memory for 1 M live blocks, then 16 subscribers on top ----
struct MemoryFigures {
  double pool_mib;         // the pool when it is made: its filter, and the tables made room for
  double blocks_mib;       // then 1 M live blocks: lineage and owners as they fill (or grow)
  double filter_mib;       // of those, the filter's lane and touched-bucket bitmap
  double subscribers_mib;  // 16 subscribers holding the complete snapshot
};

// A pool whose worker declares its capacity (`declared`) takes part of its tables' memory when
// it is made, so the pool is measured too.
MemoryFigures memory_figures(bool declared) {
  constexpr std::size_t kBlocks = 1'000'000;
  Relay relay = start_runtime(kBlocks, 16);
  const std::size_t no_pool = heap_in_use();
  put_worker(relay, declared ? kBlocks : 0);
  const std::size_t empty = heap_in_use();
  grpc::ClientContext context;
  ingest_v1::PublishKvEventsResponse response;
  auto writer = relay.ingest->PublishKvEvents(&context, &response);
  // One batch at a time, so that the client's batches are not counted as the relay's.
  for (std::size_t i = 0; i < kBlocks / 256; ++i)
    writer->Write(bench::store_batches(1, 16, 16, 9 + i, endpoint(), 1, i).front());
  writer->WritesDone();
  writer->Finish();
  const std::size_t loaded = heap_in_use();
  std::vector<std::unique_ptr<Subscriber>> subs;
  for (int i = 0; i < 16; ++i) {
    subs.push_back(std::make_unique<Subscriber>());
    subscribe(relay, *subs.back());
  }
  for (auto& s : subs) {
    while (!s->snapshot_done) std::this_thread::yield();
  }
  const std::size_t subscribed = heap_in_use();
  for (auto& s : subs) {
    s->context.TryCancel();
    s->thread.join();
  }
  auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  const std::uint64_t buckets = *ckf::bucket_count_for(kBlocks);
  return {mib(empty - no_pool), mib(loaded - empty), mib(buckets * sizeof(std::uint64_t) + buckets / 8),
          mib(subscribed - loaded)};
}

// With arguments, only the named groups run (kGroups): a profile of one part does not sample the
// others.
int run(int argc, char** argv) {
  spdlog::set_level(std::getenv("BENCH_LOG") ? spdlog::level::info : spdlog::level::warn);
  const std::vector<std::string_view> groups(argv + 1, argv + argc);
  constexpr std::array<std::string_view, 9> kGroups{"publisher",       "publisher-declared", "ingest",
                                                    "ingest-declared", "transport",          "latency",
                                                    "fanout",          "snapshot",           "memory"};
  for (const std::string_view group : groups) {
    if (std::ranges::count(kGroups, group) == 0) {
      fmt::print(stderr, "relay_bench: unknown group {}; the groups are {}\n", group, fmt::join(kGroups, ", "));
      return 2;
    }
  }
  auto runs = [&](const std::string& group) {
    if (std::ranges::count(kGroups, group) == 0) throw std::logic_error("relay_bench runs no group " + group);
    return groups.empty() || std::ranges::count(groups, group) > 0;
  };
  fmt::print("| Measurement | Result |\n| --- | --- |\n");
  auto print_throughput = [](std::string_view measurement, const Throughput& throughput) {
    fmt::print("| {} | {:.2f} M block stores/s (process busy {:.2f} cores, {} page faults) |\n", measurement,
               throughput.per_second / 1e6, throughput.busy_cores, throughput.page_faults);
  };
  // Each fill runs twice: the first into memory new to this process, which the kernel (and on
  // a virtual machine, its host) maps in page by page; the next into the memory the allocator
  // kept from the fills before, as in a relay that has been running a while.
  int fills = 0;
  auto print_fills = [&](std::string_view measurement, auto fill) {
    for (int round = 0; round < 2; ++round) {
      const Throughput throughput = fill();
      print_throughput(fmt::format("{}, fill {} of this process", measurement, ++fills), throughput);
    }
  };
  // Each into a pool whose worker declares no KV capacity, then (the -declared groups) into one
  // that declares what the fill stores.
  for (const bool declared : {false, true}) {
    const std::string suffix = declared ? "-declared" : "";
    const char* pool = declared ? ", capacity declared" : "";
    if (runs("publisher" + suffix)) {
      print_fills(fmt::format("Publisher apply rate, no transport (256-block batches{})", pool),
                  [=] { return publisher_apply_rate(4096, 16, 16, declared); });
    }
    if (runs("ingest" + suffix)) {
      print_fills(fmt::format("Apply rate through gRPC PublishKvEvents (256-block batches{})", pool),
                  [=] { return ingest_apply_rate(4096, 16, 16, declared); });
    }
  }
  if (runs("transport")) {
    print_throughput("The same client into a server that only parses (256-block batches)",
                     transport_rate(4096, 16, 16));
  }
  if (runs("latency")) {
    for (std::uint32_t rate : {10'000u, 100'000u}) {
      const auto [p50, p99] = event_to_wire_ms(rate, 3.0);
      fmt::print("| Event-to-wire latency at {} k events/s (client-observed) | p50 {:.3f} ms, p99 {:.3f} ms |\n",
                 rate / 1000, p50, p99);
    }
  }
  if (runs("fanout")) {
    for (std::uint32_t rate : {10'000u, 100'000u}) {
      const auto [lagged, frames] = fan_out(64, rate, 5.0);
      fmt::print("| 64 subscribers, {} k events/s for 5 s | {} of 64 lagged; {} frames delivered |\n", rate / 1000,
                 lagged, frames);
    }
  }
  if (runs("snapshot")) {
    for (std::uint64_t buckets : {std::uint64_t{1} << 19, std::uint64_t{1} << 22}) {
      for (std::size_t subscribers : {1, 16}) {
        fmt::print("| Cold snapshot, 2^{} buckets, {} subscriber(s) | {:.1f} ms until the last one holds it |\n",
                   std::countr_zero(buckets), subscribers, cold_snapshot_ms(buckets, subscribers));
      }
    }
  }
  if (runs("memory")) {
    for (const bool declared : {false, true}) {
      const auto memory = memory_figures(declared);
      const auto per_block = [](double mib) { return mib * (1 << 20) / 1e6; };
      const double whole = memory.pool_mib + memory.blocks_mib;
      fmt::print(
          "| Heap added by a pool{} when made, then by its 1 M live blocks | {:.1f} + {:.1f} MiB ({:.0f} bytes "
          "per block in all, {:.0f} without the filter) |\n",
          declared ? " that declares its capacity" : "", memory.pool_mib, memory.blocks_mib, per_block(whole),
          per_block(whole - memory.filter_mib));
      fmt::print(
          "| ... then 16 subscribers holding the complete snapshot (relay and clients, one process) | +{:.1f} MiB |\n",
          memory.subscribers_mib);
    }
  }
  return 0;
}

}  // namespace

// A run that cannot measure what it set out to (a batch not applied, a call that failed) stops
// with why, not with an uncaught exception's abort.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    fmt::print(stderr, "relay_bench: {}\n", error.what());
    return 1;
  }
}
