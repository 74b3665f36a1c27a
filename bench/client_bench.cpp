// The consumer library's hot paths on one core: applying deltas to a replica, installing a
// snapshot, and the router's overlap query (a 64-block prompt across 16 pools). Run through
// `make bench`.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "client/lib/pool_replica.hpp"
#include "client/lib/query.hpp"
#include "core/cbi1.hpp"
#include "core/ckf.hpp"
#include "core/quantile.hpp"
#include "tests/client/wire_builders.hpp"

using namespace kvrelay;
namespace v1 = ::dynamo::kvrelay::v1;
namespace test = ::kvrelay::test;

namespace {

constexpr std::uint64_t kDcId = 0xDC;

v1::ProducerIdentity identity(std::uint64_t bucket_count) { return test::producer(1, 1, kDcId, bucket_count); }

std::vector<v1::FilterUpdate> snapshot(const v1::ProducerIdentity& producer, const std::vector<std::uint64_t>& words) {
  const cbi1::FilterFormat format{test::kSeed, words.size()};
  auto chunks = cbi1::encode_snapshot(format, kDcId, 0, words);
  std::vector<v1::FilterUpdate> frames;
  for (auto& chunk : *chunks) {
    frames.push_back(test::frame(producer, v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, 0, 0, std::move(chunk)));
  }
  return frames;
}

std::vector<std::uint64_t> half_full(std::uint64_t bucket_count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> words(bucket_count);
  for (auto& word : words) word = rng() & 0x00000000FFFFFFFF;  // two of four slots taken
  return words;
}

// Deltas of `images` distinct buckets each, applied back to back onto a replica of 2^range(1)
// buckets: 4 MiB fits this host's L3, 32 MiB does not.
void BM_ReplicaDeltaApply(benchmark::State& state) {
  const auto images = static_cast<std::uint64_t>(state.range(0));
  const std::uint64_t buckets = std::uint64_t{1} << state.range(1);
  const auto producer = identity(buckets);
  std::mt19937_64 rng(3);
  constexpr int kDeltas = 64;
  std::vector<v1::FilterUpdate> deltas;
  std::size_t payload_bytes = 0;
  for (int d = 0; d < kDeltas; ++d) {
    std::vector<BucketImage> delta;
    const std::uint64_t start = rng() % buckets;
    for (std::uint64_t i = 0; i < images; ++i) delta.push_back({(start + i * 7919) % buckets, rng()});
    auto payload = cbi1::encode_delta({test::kSeed, buckets}, kDcId, d, d + 1, delta);
    payload_bytes += payload->size();
    deltas.push_back(test::frame(producer, v1::FILTER_UPDATE_KIND_DELTA, d, d + 1, std::move(*payload)));
  }
  const auto chunks = snapshot(producer, half_full(buckets, 1));
  std::size_t applied = 0;
  for (auto _ : state) {
    client::PoolReplica replica(producer, test::relay_identity());  // installing it is not timed
    for (const auto& chunk : chunks) replica.apply(chunk);
    const auto start = std::chrono::steady_clock::now();
    for (const auto& delta : deltas) {
      if (replica.apply(delta)) state.SkipWithError("delta rejected");
    }
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    applied += kDeltas;
  }
  state.counters["frames/s"] = benchmark::Counter(static_cast<double>(applied), benchmark::Counter::kIsRate);
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(applied * images), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * payload_bytes));
}
BENCHMARK(BM_ReplicaDeltaApply)
    ->Args({64, 19})
    ->Args({4096, 19})
    ->Args({349525, 19})
    ->Args({4096, 22})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Decoding, assembling and installing a complete snapshot of 2^k buckets.
void BM_ReplicaSnapshotInstall(benchmark::State& state) {
  const std::uint64_t buckets = std::uint64_t{1} << state.range(0);
  const auto producer = identity(buckets);
  const auto chunks = snapshot(producer, half_full(buckets, 2));
  std::size_t bytes = 0;
  for (const auto& chunk : chunks) bytes += chunk.payload().size();
  for (auto _ : state) {
    client::PoolReplica replica(producer, test::relay_identity());
    for (const auto& chunk : chunks) replica.apply(chunk);
    if (!replica.installed()) state.SkipWithError("snapshot not installed");
    benchmark::DoNotOptimize(replica.sequence());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_ReplicaSnapshotInstall)->Arg(19)->Arg(22)->Unit(benchmark::kMillisecond);

// A 64-block prompt against 16 pools of 2^19 buckets at 50 % slot load, each holding a different
// prefix of the prompt (pool i: 4i blocks). Per query: hashing once per distinct semantics and
// 16 prefix probes. p50/p99 come from timing every query.
void BM_OverlapQuery16Pools(benchmark::State& state) {
  constexpr std::uint64_t kBuckets = std::uint64_t{1} << 19;
  constexpr std::uint32_t kBlock = 16;
  std::vector<std::uint32_t> tokens(64 * kBlock);
  std::mt19937_64 rng(4);
  for (auto& token : tokens) token = static_cast<std::uint32_t>(rng() % 150000);
  const client::QuerySemantics semantics{kBlock, hashing::HashFormat::kStandard, ""};
  client::PromptHashes reference(tokens);
  const auto hashes = reference.sequence_hashes(semantics);
  std::vector<ckf::Filter> pools;
  for (int p = 0; p < 16; ++p) {
    ckf::Filter filter(kBuckets);
    std::vector<ckf::BucketWrite> writes;
    for (std::uint64_t i = 0; i < kBuckets * 2; ++i) filter.insert(rng(), writes);
    for (int b = 0; b < 4 * p; ++b) filter.insert(hashes[b], writes);
    pools.push_back(std::move(filter));
  }
  std::vector<double> latencies_us;
  std::size_t total_depth = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    client::PromptHashes prompt(tokens);
    for (const auto& pool : pools) {
      total_depth += client::prefix_depth(pool.words(), pool.addressing(), prompt.sequence_hashes(semantics));
    }
    latencies_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  benchmark::DoNotOptimize(total_depth);
  std::ranges::sort(latencies_us);
  state.counters["p50_us"] = nearest_rank_quantile(latencies_us, 0.5);
  state.counters["p99_us"] = nearest_rank_quantile(latencies_us, 0.99);
}
BENCHMARK(BM_OverlapQuery16Pools)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
