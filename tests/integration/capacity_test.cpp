// Filters that size and grow themselves (docs/protocol/capacity.md), through real gRPC: a pool
// sized for 64 blocks takes tens of thousands, re-laying out through several generations with
// no block omitted and no source reset; a consumer of an old generation is ended and the
// catalog leads to the new one; and the memory budget refuses a pool it cannot hold while
// every other pool goes on.
#include <catch2/catch.hpp>

#include <set>

#include "core/capacity.hpp"
#include "core/ckf.hpp"
#include "core/token_hashing.hpp"
#include "tests/integration/harness.hpp"
#include "tests/integration/replica.hpp"
#include "tests/integration/scrape.hpp"

using namespace kvrelay;
using namespace kvrelay::test;

namespace {

// A worker of two data-parallel ranks with `blocks` KV blocks each.
WorkerShape two_ranks_of(std::uint64_t blocks) {
  WorkerShape shape;
  shape.dp_size = 2;
  shape.total_kv_blocks = blocks;
  return shape;
}

constexpr std::size_t kBlocksPerEvent = 64;
constexpr std::size_t kEvents = 625;  // 40 000 unique blocks

// kEvents stores of kBlocksPerEvent chained blocks each, every chain from its own root, one
// event per batch; returns the batches and the sequence hashes they hold.
std::pair<std::vector<ingest_v1::KvEventBatch>, std::vector<std::uint64_t>> unique_chains(
    const ingest_v1::EndpointRef& endpoint) {
  std::vector<ingest_v1::KvEventBatch> batches;
  std::vector<std::uint64_t> sequence_hashes;
  std::uint64_t engine_id = 1;
  for (std::size_t event = 0; event < kEvents; ++event) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;
    std::vector<std::uint64_t> local;
    for (std::size_t i = 0; i < kBlocksPerEvent; ++i, ++engine_id) {
      local.push_back(engine_id * 0x9E3779B97F4A7C15ULL);
      blocks.emplace_back(engine_id, local.back());
    }
    for (std::uint64_t hash : hashing::sequence_hashes(local)) sequence_hashes.push_back(hash);
    batches.push_back(stored_batch(endpoint, 1, 0, 1, event, blocks));
  }
  return {std::move(batches), std::move(sequence_hashes)};
}

}  // namespace

TEST_CASE("capacity: a pool sized for 64 blocks grows through re-layouts and omits none of 40 000",
          "[capacity][relayout]") {
  auto options = loopback_options();
  options.expected_unique_blocks = 64;
  options.relayout_min_interval_ms = 0;
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  const auto endpoint = endpoint_ref("ns", "backend");
  relay.put_worker(put_worker_request(endpoint, 1));
  const v1::ProducerIdentity first = await_single_pool(*catalog);
  REQUIRE(first.ckf_format().bucket_count() == 32);
  auto old_stream = subscribe_pool(relay, first, "first-generation");
  REQUIRE(old_stream->next().has_value());  // its snapshot

  const auto [batches, sequence_hashes] = unique_chains(endpoint);
  const auto tally = relay.publish(batches);
  CHECK(tally.batches_applied() == kEvents);
  CHECK(tally.source_resets() == 0);

  // The old generation's consumer is told to go back to the catalog.
  CHECK(old_stream->ending() ==
        std::pair{grpc::StatusCode::UNAVAILABLE, std::string("RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE")});

  // The catalog names ever larger generations of the same pool until one holds every block.
  const std::uint64_t needed = ckf::bucket_count_for(sequence_hashes.size()).value();
  std::set<std::pair<std::uint64_t, std::uint64_t>> generations{
      {first.layout_generation(), first.ckf_format().bucket_count()}};
  const auto grown = catalog->until([&](const v1::KvPoolCatalogUpdate& update) {
    REQUIRE(update.snapshot().pools_size() == 1);
    const auto& producer = update.snapshot().pools(0).producer();
    CHECK(producer.pool_id().SerializeAsString() == first.pool_id().SerializeAsString());
    generations.emplace(producer.layout_generation(), producer.ckf_format().bucket_count());
    return producer.ckf_format().bucket_count() == needed;
  });
  REQUIRE(grown.has_value());
  CHECK(generations.size() >= 3);
  std::uint64_t previous_buckets = 0;
  for (const auto& [generation, buckets] : generations) {  // ascending generation, ascending size
    CHECK(buckets > previous_buckets);
    previous_buckets = buckets;
  }

  const v1::ProducerIdentity last = grown->snapshot().pools(0).producer();
  const Replica replica = replicate(relay, last);
  const ckf::Addressing addressing(last.ckf_format().seed(), last.ckf_format().bucket_count());
  std::size_t missing = 0;
  for (std::uint64_t hash : sequence_hashes) missing += ckf::contains(replica.words(), addressing.probe(hash)) ? 0 : 1;
  CHECK(missing == 0);

  const auto state = relay.get_state();
  const auto& pool = only_pool(state);
  CHECK(pool.unique_blocks() == sequence_hashes.size());
  CHECK(pool.omitted_blocks() == 0);
  CHECK(pool.relayouts() >= generations.size() - 1);
  CHECK(pool.filter_digest() == replica.digest());
  REQUIRE(state.endpoints_size() == 1);
  REQUIRE(state.endpoints(0).sources_size() == 1);
  CHECK(state.endpoints(0).sources(0).resets() == 0);  // a re-layout resets no source
  const Labels series{{"pool", "ns/backend/generate"}};
  const Scrape s = scrape_until(relay, [&](const Scrape& now) {
    return now.count("kv_relay_pool_relayouts_total", series) == static_cast<double>(pool.relayouts());
  });
  CHECK(s.count("kv_relay_pool_relayouts_total", series) == static_cast<double>(pool.relayouts()));
  CHECK(s.value("kv_relay_pool_omitted_blocks", series) == 0);
  CHECK(s.count("kv_relay_pool_growth_refusals_total") == 0);
  // The tables of 40 000 live blocks: at least their 10-byte owner entries and a slot in each
  // table (5 and 13 bytes), at most what the budget charges them
  // (docs/protocol/pools.md#index-layout).
  const double index_bytes = s.value("kv_relay_pool_index_bytes", series).value_or(0);
  CHECK(index_bytes >= 28.0 * static_cast<double>(sequence_hashes.size()));
  CHECK(index_bytes <= static_cast<double>(capacity::kBytesPerLiveBlock * sequence_hashes.size() + (2 << 10)));
  // The publication window: a bit per bucket, and a list of at most every bucket (16 bytes
  // each), with room for up to twice that as it grows (docs/operations.md#memory).
  const double buckets = s.value("kv_relay_pool_bucket_count", series).value_or(0);
  REQUIRE(buckets == static_cast<double>(generations.rbegin()->second));
  const double window_bytes = s.value("kv_relay_pool_publication_window_bytes", series).value_or(0);
  CHECK(window_bytes >= buckets / 8);
  CHECK(window_bytes <= buckets / 8 + 2 * 16 * buckets);
}

TEST_CASE("capacity: a pool whose workers declare their capacity has its tables made room for it at once",
          "[capacity][tables]") {
  auto options = loopback_options();
  options.expected_unique_blocks.reset();  // auto: each layout from its pool's declared capacity
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  const auto declared = endpoint_ref("prod", "declared");
  const auto undeclared = endpoint_ref("prod", "undeclared");
  relay.put_worker(put_worker_request(declared, 1, two_ranks_of(20'000)));
  WorkerShape unknown = two_ranks_of(0);
  unknown.total_kv_blocks.reset();
  relay.put_worker(put_worker_request(undeclared, 1, unknown));
  // One block on rank 0 of each: the declared pool's owner index holds room for 40 000 owners
  // and rank 0's lineage for its 20 000 blocks; the other's tables hold what one block needs.
  for (const auto& endpoint : {declared, undeclared}) {
    REQUIRE(relay.publish({stored_batch(endpoint, 1, 0, 1, 0, {{1, 11}})}).batches_applied() == 1);
  }
  const Labels declared_pool{{"pool", "prod/declared/generate"}};
  const Labels undeclared_pool{{"pool", "prod/undeclared/generate"}};
  const Scrape s = scrape_until(relay, [&](const Scrape& now) {
    return now.value("kv_relay_pool_index_bytes", declared_pool).value_or(0) > 0 &&
           now.value("kv_relay_pool_index_bytes", undeclared_pool).value_or(0) > 0;
  });
  const double made_room = s.value("kv_relay_pool_index_bytes", declared_pool).value_or(0);
  CHECK(made_room >= 40'000 * 5 + 20'000 * 13);
  // Within what the budget charges its layout.
  CHECK(made_room <= static_cast<double>(capacity::kBytesPerLiveBlock) * 40'000 * 1.1);
  CHECK(s.value("kv_relay_pool_index_bytes", undeclared_pool).value_or(0) < 4096);
}

TEST_CASE("capacity: a pool the memory budget cannot hold is refused with a conflict, others go on",
          "[capacity][budget]") {
  auto options = loopback_options();
  options.expected_unique_blocks = 64;  // 32 buckets: 512 + 108 x 36 bytes, 4 400 in all
  options.memory_budget_bytes = 6'000;
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  const auto first = endpoint_ref("ns", "first");
  const auto second = endpoint_ref("ns", "second");
  CHECK(relay.put_worker(put_worker_request(first, 1)).conflicts_size() == 0);
  const std::string first_pool = await_single_pool(*catalog).pool_id().SerializeAsString();
  WorkerShape other;
  other.model = "other";
  const auto refused = relay.put_worker(put_worker_request(second, 2, other));
  REQUIRE(refused.conflicts_size() == 1);
  CHECK(refused.conflicts(0) ==
        "PoolMaterialization: memory budget: needs 4400 bytes, 1600 of --memory-budget-bytes 6000 are left");

  const auto state = relay.get_state();
  REQUIRE(state.endpoints_size() == 2);
  for (const auto& e : state.endpoints()) {
    CHECK(e.pool_materialized() == (e.endpoint().component() == "first"));
    CHECK(e.conflicts_size() == (e.endpoint().component() == "first" ? 0 : 1));
  }
  const Scrape refused_scrape =
      scrape_until(relay, [](const Scrape& now) { return now.count("kv_relay_pools_over_budget") == 1; });
  CHECK(refused_scrape.count("kv_relay_pools_over_budget") == 1);
  CHECK(refused_scrape.value("kv_relay_memory_budget_bytes") == 6'000);
  CHECK(refused_scrape.value("kv_relay_memory_charged_bytes") == 4'400);
  // The first pool is served as before; once it goes, the budget holds the second.
  relay.publish({stored_batch(first, 1, 0, 1, 0, {{1, 0x11}})});
  CHECK(only_pool(relay.get_state()).unique_blocks() == 1);
  relay.remove_worker(first, 1);
  REQUIRE(catalog->until([&](const v1::KvPoolCatalogUpdate& update) {
    return update.snapshot().pools_size() == 1 &&
           update.snapshot().pools(0).producer().pool_id().SerializeAsString() != first_pool;
  }));
  const auto after = relay.get_state();
  REQUIRE(after.endpoints_size() == 1);
  CHECK(after.endpoints(0).conflicts_size() == 0);
  CHECK(only_pool(after).serving_endpoint().component() == "second");
  CHECK(scrape_until(relay, [](const Scrape& now) {
          return now.count("kv_relay_pools_over_budget") == 0;
        }).count("kv_relay_pools_over_budget") == 0);
}

TEST_CASE("capacity: a re-layout the memory budget cannot hold is refused and the omissions are counted",
          "[capacity][budget]") {
  auto options = loopback_options();
  options.expected_unique_blocks = 64;  // 32 buckets, charged 4 400 bytes; 64 buckets would be 8 836
  options.memory_budget_bytes = 6'000;
  options.relayout_min_interval_ms = 0;
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  const auto endpoint = endpoint_ref("ns", "backend");
  relay.put_worker(put_worker_request(endpoint, 1));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;
  for (std::uint64_t id = 1; id <= 200; ++id) blocks.emplace_back(id, id * 0x9E3779B97F4A7C15ULL);
  std::vector<ingest_v1::KvEventBatch> batches;
  for (std::uint64_t sequence = 0; sequence < blocks.size(); ++sequence) {
    batches.push_back(stored_batch(endpoint, 1, 0, 1, sequence, {blocks[sequence]}));
  }
  CHECK(relay.publish(batches).batches_applied() == blocks.size());

  const auto state = relay.get_state();
  const auto& pool = only_pool(state);
  CHECK(pool.bucket_count() == 32);
  CHECK(pool.relayouts() == 0);
  CHECK(pool.unique_blocks() == 200);
  CHECK(pool.omitted_blocks() == 200 - pool.occupied_slots());
  CHECK(pool.omitted_blocks() >= 200 - 128);
  CHECK(pool.growth_refusal() == "memory budget: needs 4436 bytes, 1600 of --memory-budget-bytes 6000 are left");
  const Labels series{{"pool", "ns/backend/generate"}};
  const Scrape s = scrape_until(relay, [&](const Scrape& now) {
    return now.value("kv_relay_pool_omitted_blocks", series) == static_cast<double>(pool.omitted_blocks());
  });
  CHECK(s.value("kv_relay_pool_omitted_blocks", series) == static_cast<double>(pool.omitted_blocks()));
  CHECK(s.count("kv_relay_pool_growth_refusals_total") >= 1);
  CHECK(s.count("kv_relay_pool_relayouts_total", series) == 0);
}

TEST_CASE("capacity: auto sizing follows the declared capacity as workers join, and never shrinks",
          "[capacity][sizing]") {
  auto options = loopback_options();
  options.expected_unique_blocks = std::nullopt;  // auto
  options.expected_unique_blocks_fallback = 100'000;
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  const auto endpoint = endpoint_ref("ns", "backend");
  const WorkerShape shape = two_ranks_of(4096);
  relay.put_worker(put_worker_request(endpoint, 1, shape));
  // 2 ranks x 4 096 blocks: 8 192 x 1.25 slots / 4 per bucket = 2 560, the next power of two.
  const v1::ProducerIdentity first = await_single_pool(*catalog);
  CHECK(first.ckf_format().bucket_count() == 4096);
  relay.publish({stored_batch(endpoint, 1, 0, 1, 0, {{1, 0x11}, {2, 0x22}})});

  // Which layout the catalog names once it has `buckets` buckets.
  const auto layout_with = [&](std::uint64_t buckets) {
    const auto update = catalog->until([&](const v1::KvPoolCatalogUpdate& u) {
      return u.snapshot().pools_size() == 1 && u.snapshot().pools(0).producer().ckf_format().bucket_count() == buckets;
    });
    REQUIRE(update.has_value());
    const v1::ProducerIdentity producer = update->snapshot().pools(0).producer();
    CHECK(producer.pool_id().SerializeAsString() == first.pool_id().SerializeAsString());
    return producer;
  };
  // A second worker doubles the sum: 16 384 blocks need 5 120 buckets.
  relay.put_worker(put_worker_request(endpoint, 2, shape));
  const auto second = layout_with(8192);
  CHECK(second.layout_generation() > first.layout_generation());
  // A worker of unknown capacity sizes the pool for the fallback: 100 000 x 1.25 / 4 = 31 250.
  WorkerShape unknown = shape;
  unknown.total_kv_blocks = std::nullopt;
  relay.put_worker(put_worker_request(endpoint, 3, unknown));
  const auto third = layout_with(32768);
  CHECK(third.layout_generation() > second.layout_generation());

  // Workers leaving shrink nothing; the live blocks and the first worker's source went through.
  relay.remove_worker(endpoint, 3);
  relay.remove_worker(endpoint, 2);
  relay.publish({stored_batch(endpoint, 1, 0, 1, 1, {{3, 0x33}})});
  const auto state = relay.get_state();
  const auto& pool = only_pool(state);
  CHECK(pool.bucket_count() == 32768);
  CHECK(pool.layout_generation() == third.layout_generation());
  CHECK(pool.unique_blocks() == 3);
  CHECK(pool.omitted_blocks() == 0);
  CHECK(pool.relayouts() == 2);
  REQUIRE(state.endpoints_size() == 1);
  REQUIRE(state.endpoints(0).sources_size() == 2);  // the first worker's two ranks
  for (const auto& source : state.endpoints(0).sources()) CHECK(source.resets() == 0);
}

TEST_CASE(
    "capacity: a declared capacity the budget cannot hold is refused once, shown, and asked again when it changes",
    "[capacity][sizing][budget]") {
  auto options = loopback_options();
  options.expected_unique_blocks = std::nullopt;  // auto
  // 4 096 buckets are charged 594 724 bytes, 8 192 buckets 1 189 448, 1 024 buckets 148 662.
  options.memory_budget_bytes = 1'000'000;
  options.metrics_listen = "127.0.0.1:0";
  TestRelay relay(options);
  auto catalog = watch_catalog(relay);
  const auto endpoint = endpoint_ref("ns", "backend");
  const WorkerShape shape = two_ranks_of(4096);
  relay.put_worker(put_worker_request(endpoint, 1, shape));
  CHECK(await_single_pool(*catalog).ckf_format().bucket_count() == 4096);
  relay.put_worker(put_worker_request(endpoint, 2, shape));  // 16 384 blocks want 8 192 buckets
  const auto refused = only_pool(relay);
  CHECK(refused.bucket_count() == 4096);
  CHECK_THAT(refused.growth_refusal(), Catch::Contains("of --memory-budget-bytes 1000000 are left"));

  // Calls for other endpoints reconcile membership again: the refusal stands, uncounted.
  WorkerShape small = two_ranks_of(100);
  small.model = "other-a";
  relay.put_worker(put_worker_request(endpoint_ref("ns", "a"), 3, small));
  small.model = "other-b";
  relay.put_worker(put_worker_request(endpoint_ref("ns", "b"), 4, small));
  CHECK(scrape(relay).value("kv_relay_pool_growth_refusals_total") == 1);

  // A third worker of the endpoint changes what it wants (32 768 blocks: 16 384 buckets):
  // asked again, and refused again.
  relay.put_worker(put_worker_request(endpoint, 5, two_ranks_of(8192)));
  CHECK(scrape(relay).value("kv_relay_pool_growth_refusals_total") == 2);
}
