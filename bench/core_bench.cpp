// Throughput of the core formats: CKF insert / contains / remove at a fixed load, the
// prefix query, CBI1 snapshot and delta encoding, and a pool's re-layout into twice the
// buckets. Run through `make bench`.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>

#include "core/cbi1.hpp"
#include "core/ckf.hpp"
#include "core/pool_index.hpp"
#include "core/pool_tables.hpp"
#include "core/token_hashing.hpp"

using namespace kvrelay;

namespace {

constexpr std::uint64_t kBuckets = std::uint64_t{1} << 19;
constexpr std::uint64_t kSlots = kBuckets * ckf::kSlotsPerBucket;

std::vector<std::uint64_t> random_keys(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> keys(count);
  for (auto& key : keys) key = rng();
  return keys;
}

// The engine id of the n-th block a benchmark stores. Engines number blocks by hash (vLLM's and
// SGLang's ids are block hashes), so the ids look random; one SplitMix64 step from n, a
// bijection, makes them so while a benchmark still names blocks by their order.
std::uint64_t engine_id(std::uint64_t n) { return ckf::SplitMix64(n).next(); }

ckf::Filter filled_to(double load, std::span<const std::uint64_t> keys) {
  ckf::Filter filter(kBuckets);
  std::vector<ckf::BucketWrite> writes;
  const auto count = static_cast<std::size_t>(load * kSlots);
  for (std::size_t i = 0; i < count; ++i) filter.insert(keys[i], writes);
  return filter;
}

// Inserts the keys that raise the load from (load - 2 %) to load, on a fresh copy each time.
void BM_CkfInsert(benchmark::State& state) {
  const double load = static_cast<double>(state.range(0)) / 100.0;
  const auto keys = random_keys(kSlots, 1);
  const auto base = filled_to(load - 0.02, keys);
  const auto first = static_cast<std::size_t>((load - 0.02) * kSlots);
  const auto batch = std::span(keys).subspan(first, static_cast<std::size_t>(0.02 * kSlots));
  std::vector<ckf::BucketWrite> writes;
  for (auto _ : state) {
    ckf::Filter filter = base;
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t key : batch) benchmark::DoNotOptimize(filter.insert(key, writes));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch.size()));
}

// Removes 2 % of the slots' worth of resident keys from a filter at `load`.
void BM_CkfRemove(benchmark::State& state) {
  const double load = static_cast<double>(state.range(0)) / 100.0;
  const auto keys = random_keys(kSlots, 1);
  const auto base = filled_to(load, keys);
  const auto batch = std::span(keys).first(static_cast<std::size_t>(0.02 * kSlots));
  for (auto _ : state) {
    ckf::Filter filter = base;
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t key : batch) benchmark::DoNotOptimize(filter.remove(key));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch.size()));
}

// Lookups at `load`, half of them for resident keys and half for absent ones.
void BM_CkfContains(benchmark::State& state) {
  const double load = static_cast<double>(state.range(0)) / 100.0;
  const auto keys = random_keys(kSlots, 1);
  const auto filter = filled_to(load, keys);
  auto probes = random_keys(1 << 16, 2);
  for (std::size_t i = 0; i < probes.size(); i += 2) probes[i] = keys[i % static_cast<std::size_t>(load * kSlots)];
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(filter.contains(probes[i]));
    i = (i + 1) & (probes.size() - 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

// How many leading blocks of a 64-block prompt are cached, in a filter at 50 % load.
void BM_PrefixQuery64(benchmark::State& state) {
  const auto keys = random_keys(kSlots, 1);
  ckf::Filter filter = filled_to(0.5, keys);
  std::mt19937_64 rng(3);
  std::vector<std::vector<std::uint64_t>> prompts(256);
  std::vector<ckf::BucketWrite> writes;
  for (auto& prompt : prompts) {
    std::vector<std::uint64_t> local(64);
    for (auto& h : local) h = rng();
    prompt = hashing::sequence_hashes(local);
    const std::size_t cached = rng() % 65;  // a random cached prefix
    for (std::size_t b = 0; b < cached; ++b) filter.insert(prompt[b], writes);
  }
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(filter.prefix_hits(prompts[i]));
    i = (i + 1) % prompts.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

std::vector<std::uint64_t> lane_words(std::uint64_t bucket_count) {
  std::mt19937_64 rng(4);
  std::vector<std::uint64_t> words(bucket_count);
  for (auto& word : words) word = rng() & 0xFFFF0000FFFFFFFF;
  return words;
}

void BM_SnapshotEncode(benchmark::State& state) {
  const auto bucket_count = static_cast<std::uint64_t>(state.range(0));
  const auto words = lane_words(bucket_count);
  const auto format = *cbi1::FilterFormat::make(ckf::kDefaultSeed, bucket_count);
  for (auto _ : state) {
    for (std::uint32_t c = 0; c < cbi1::chunk_count_for(bucket_count); ++c) {
      benchmark::DoNotOptimize(cbi1::encode_snapshot_chunk(format, 1, 1, c, words));
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bucket_count * 8));
}

void BM_SnapshotDecode(benchmark::State& state) {
  const auto bucket_count = static_cast<std::uint64_t>(state.range(0));
  const auto format = *cbi1::FilterFormat::make(ckf::kDefaultSeed, bucket_count);
  const auto chunks = *cbi1::encode_snapshot(format, 1, 1, lane_words(bucket_count));
  for (auto _ : state) {
    for (const auto& chunk : chunks) benchmark::DoNotOptimize(cbi1::decode(chunk, format));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bucket_count * 8));
}

void BM_DeltaEncode(benchmark::State& state) {
  const auto image_count = static_cast<std::size_t>(state.range(0));
  const auto format = *cbi1::FilterFormat::make(ckf::kDefaultSeed, kBuckets);
  std::mt19937_64 rng(5);
  std::vector<BucketImage> images(image_count);
  for (auto& image : images) image = {rng() % kBuckets, rng()};
  for (auto _ : state) benchmark::DoNotOptimize(cbi1::encode_delta(format, 1, 1, 2, images));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * image_count));
}

}  // namespace

BENCHMARK(BM_CkfInsert)->Arg(50)->Arg(80)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CkfRemove)->Arg(50)->Arg(80)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CkfContains)->Arg(50)->Arg(80);
BENCHMARK(BM_PrefixQuery64);
BENCHMARK(BM_SnapshotEncode)->Arg(1 << 19)->Arg(1 << 24)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SnapshotDecode)->Arg(1 << 19)->Arg(1 << 24)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeltaEncode)->Arg(16)->Arg(4096);

// What a user gets from a filter too large for the caches: random keys into 2^range(0)
// buckets, timed from range(1) % to range(2) % of the slots (the fill up to range(1) is not
// timed), one insert at a time (range(3) == 0) or as one batch with prefetching (1). A fresh
// filter each iteration.
void BM_CkfFill(benchmark::State& state) {
  const std::uint64_t buckets = std::uint64_t{1} << state.range(0);
  const auto slots = static_cast<double>(buckets * ckf::kSlotsPerBucket);
  const auto from = static_cast<std::size_t>(static_cast<double>(state.range(1)) / 100.0 * slots);
  const auto to = static_cast<std::size_t>(static_cast<double>(state.range(2)) / 100.0 * slots);
  const bool batched = state.range(3) != 0;
  const auto keys = random_keys(to, 11);
  const auto timed = std::span(keys).subspan(from, to - from);
  std::vector<ckf::BucketWrite> writes;
  std::size_t failed = 0;
  for (auto _ : state) {
    ckf::Filter filter(buckets);
    filter.insert_each(std::span(keys).first(from), filter.max_kicks(), writes, [](auto...) {});
    const auto start = std::chrono::steady_clock::now();
    if (batched) {
      filter.insert_each(timed, filter.max_kicks(), writes, [&](std::size_t, ckf::InsertOutcome outcome, const auto&) {
        failed += outcome != ckf::InsertOutcome::kInserted;
      });
    } else {
      for (std::uint64_t key : timed) failed += filter.insert(key, writes) != ckf::InsertOutcome::kInserted;
    }
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * timed.size()));
  state.counters["failed"] = static_cast<double>(failed) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_CkfFill)
    ->ArgNames({"log2_buckets", "from", "to", "batch"})
    ->ArgsProduct({{19, 22}, {0}, {50}, {0, 1}})
    ->Args({22, 50, 80, 1})
    ->Args({22, 80, 95, 1})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

// Random lookups over a whole 2^range(0)-bucket filter at 50 % load, half resident keys, half
// absent: one at a time (range(1) == 0) or a batch with prefetching (1).
void BM_CkfLookup(benchmark::State& state) {
  const std::uint64_t buckets = std::uint64_t{1} << state.range(0);
  const auto resident = static_cast<std::size_t>(0.5 * static_cast<double>(buckets * ckf::kSlotsPerBucket));
  const auto keys = random_keys(resident, 12);
  ckf::Filter filter(buckets);
  std::vector<ckf::BucketWrite> writes;
  filter.insert_each(keys, filter.max_kicks(), writes, [](auto...) {});
  auto probes = random_keys(resident, 13);
  std::mt19937_64 rng(14);
  for (std::size_t i = 0; i < probes.size(); i += 2) probes[i] = keys[rng() % keys.size()];
  std::size_t hits = 0;
  for (auto _ : state) {
    if (state.range(1) != 0) {
      filter.contains_each(probes, [&](std::size_t, bool hit) { hits += hit; });
    } else {
      for (std::uint64_t probe : probes) hits += filter.contains(probe);
    }
  }
  benchmark::DoNotOptimize(hits);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * probes.size()));
}
BENCHMARK(BM_CkfLookup)
    ->ArgNames({"log2_buckets", "batch"})
    ->ArgsProduct({{19, 22}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// A pool of 2^range buckets at the re-layout load (0.85 of its slots, one source, one-block
// stores), re-laid out into twice the buckets: the time a publisher is busy re-placing every
// live block. Each iteration rebuilds the full pool first (untimed).
void BM_PoolRelayout(benchmark::State& state) {
  const std::uint64_t buckets = std::uint64_t{1} << state.range(0);
  const auto live = static_cast<std::size_t>(0.85 * static_cast<double>(buckets * ckf::kSlotsPerBucket));
  const auto keys = random_keys(live, 5);
  for (auto _ : state) {
    PoolIndex index({buckets});
    for (std::size_t i = 0; i < live; ++i) {
      const StoredBlockRef block{engine_id(i), keys[i]};
      index.store({1, 0}, std::nullopt, std::nullopt, std::span(&block, 1));
    }
    const auto started = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(index.relayout(buckets * 2));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  state.counters["live_blocks"] = static_cast<double>(live);
  state.counters["blocks_per_s"] =
      benchmark::Counter(static_cast<double>(live), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PoolRelayout)->Arg(19)->Arg(22)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

// One stored event of `blocks` chained blocks into a fresh pool sized for them: the time the
// publisher spends on one event, from a scheduler step's handful of blocks up to the largest
// event --max-event-blocks lets in. Each iteration builds a fresh pool first (untimed).
void BM_PoolStoreEvent(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto keys = random_keys(count, 6);
  std::vector<StoredBlockRef> blocks(count);
  for (std::size_t i = 0; i < count; ++i) blocks[i] = {engine_id(i), keys[i]};
  const std::uint64_t buckets = std::max<std::uint64_t>(1024, std::bit_ceil(count));
  for (auto _ : state) {
    PoolIndex index({buckets});
    const auto started = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(index.store({1, 0}, std::nullopt, std::nullopt, blocks));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  state.counters["blocks_per_s"] =
      benchmark::Counter(static_cast<double>(count), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PoolStoreEvent)->Arg(16)->Arg(1024)->Arg(65536)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A pool filled from empty to 2^range blocks in 16-block events, as relay_bench's publisher
// fills one (its tables grow the whole way): the index's share of that figure, no actor.
void BM_PoolFill(benchmark::State& state) {
  constexpr std::size_t kEventBlocks = 16;
  const auto total = std::size_t{1} << state.range(0);
  const auto keys = random_keys(total, 9);
  std::vector<StoredBlockRef> blocks(total);
  for (std::size_t i = 0; i < total; ++i) blocks[i] = {engine_id(i), keys[i]};
  for (auto _ : state) {
    PoolIndex index({*ckf::bucket_count_for(total)});
    const auto started = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < total; at += kEventBlocks) {
      benchmark::DoNotOptimize(
          index.store({1, 0}, std::nullopt, std::nullopt, std::span(blocks).subspan(at, kEventBlocks)));
    }
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  state.counters["block_stores_per_s"] =
      benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PoolFill)->Arg(20)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

// The longest single insert while one source's lineage table grows past 2^range entries:
// the insert that rebuilds the table, a pause in that pool's publisher.
void BM_LineageRebuildPause(benchmark::State& state) {
  const auto total = (std::size_t{1} << state.range(0)) * 5 / 4;  // past the rebuild near 2^range
  const auto keys = random_keys(total, 11);
  for (auto _ : state) {
    LineageTable table;
    std::chrono::steady_clock::duration longest{};
    for (std::size_t i = 0; i < total; ++i) {
      const auto started = std::chrono::steady_clock::now();
      table.set_owner(table.find_or_add(keys[i]).first, static_cast<OwnerTable::Id>(i));
      longest = std::max(longest, std::chrono::steady_clock::now() - started);
    }
    state.SetIterationTime(std::chrono::duration<double>(longest).count());
  }
}
BENCHMARK(BM_LineageRebuildPause)->Arg(20)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

// A pool in its steady state: 2^range live blocks (one source, 16-block events, the filter at
// half load), then per iteration one new 16-block event stored and the oldest one removed, as a
// serving engine's cache turns over. Its tables are far larger than the cache, as a busy
// pool's are: what a publisher sustains, not a fill from empty.
void BM_PoolChurn(benchmark::State& state) {
  constexpr std::size_t kEventBlocks = 16;
  const auto live = std::size_t{1} << state.range(0);
  PoolIndex index({std::bit_ceil(live) / 2});
  std::mt19937_64 rng(7);
  std::uint64_t next_id = 0;
  std::vector<StoredBlockRef> event(kEventBlocks);
  auto store_next = [&] {
    for (auto& block : event) block = {engine_id(next_id++), rng()};
    return index.store({1, 0}, std::nullopt, std::nullopt, event);
  };
  while (next_id < live) store_next();
  std::vector<std::uint64_t> oldest(kEventBlocks);
  std::uint64_t oldest_id = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(store_next());
    for (auto& id : oldest) id = engine_id(oldest_id++);
    benchmark::DoNotOptimize(index.remove({1, 0}, oldest));
  }
  if (index.unique_blocks() != live || index.unknown_removals() != 0) state.SkipWithError("the churn lost its blocks");
  state.counters["block_stores_per_s"] =
      benchmark::Counter(static_cast<double>(kEventBlocks), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PoolChurn)->Arg(16)->Arg(20)->Unit(benchmark::kMicrosecond);

// Writing 64 MiB of memory new to the process, in 4 KiB pages or advised for huge pages
// (range 1), faulted in page by page by the writes or mapped in first in one call (range 0 or
// 1): what a table growing into fresh memory pays per byte beyond the write itself
// (core/huge_pages.hpp maps its arrays in first).
void BM_FirstTouch(benchmark::State& state) {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  const bool huge = state.range(0) != 0;
  const bool populate = state.range(1) != 0;
  for (auto _ : state) {
    void* memory = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return state.SkipWithError("mmap failed");
    if (huge) madvise(memory, kBytes, MADV_HUGEPAGE);
    const auto started = std::chrono::steady_clock::now();
    if (populate && madvise(memory, kBytes, MADV_POPULATE_WRITE) != 0) {
      munmap(memory, kBytes);
      return state.SkipWithError("this kernel cannot populate memory in advance");
    }
    std::memset(memory, 1, kBytes);
    benchmark::DoNotOptimize(memory);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    munmap(memory, kBytes);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_FirstTouch)
    ->ArgNames({"huge", "populate"})
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Args({1, 1})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
