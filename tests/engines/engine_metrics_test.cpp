// Load from engines' Prometheus pages (docs/protocol/engine-sources.md#load): the relay scrapes
// tools/fake_engine.py's /metrics and publishes the worker's occupancy in its load windows.
#include <catch2/catch.hpp>

#include "tests/engines/engine_support.hpp"

using namespace kvrelay::test;

namespace {

using Json = nlohmann::json;

// The next load window whose pool entry satisfies `accept`.
v1::KvPoolLoadEntry await_load(StreamReader<v1::KvPoolLoadUpdate>& load,
                               const std::function<bool(const v1::KvPoolLoadEntry&)>& accept) {
  const auto window = load.until(
      [&](const v1::KvPoolLoadUpdate& update) { return update.pools_size() == 1 && accept(update.pools(0)); });
  REQUIRE(window.has_value());
  return window->pools(0);
}

// A fake engine whose metrics page reports 1 000 GPU blocks a rank, and a relay with 100 ms
// load windows scraping it for one worker of `dp_size` ranks (the events of ranks past 0 are
// published elsewhere), whose load the test watches.
struct ScrapedWorker {
  explicit ScrapedWorker(std::uint32_t dp_size = 1) : relay(fast_load_windows()) {
    WorkerShape shape;
    shape.total_kv_blocks = 1000;
    shape.dp_size = dp_size;
    worker = engine_worker(1, {&engine}, shape, engine.metrics());
    worker.mutable_card()->mutable_runtime_config()->set_data_parallel_size(dp_size);
    relay.put_worker(worker);
    load = watch_load(relay);
  }
  static kvrelay::RelayOptions fast_load_windows() {
    auto options = loopback_options();
    options.load_window_ms = 100;
    return options;
  }

  FakeEngineProcess engine{{"--metrics", "--num-gpu-blocks", "1000"}};
  TestRelay relay;
  ingest_v1::PutWorkerRequest worker;
  decltype(watch_load(relay)) load;
};

}  // namespace

TEST_CASE("engines: load comes from the engine's metrics page and goes unknown while scrapes fail", "[engines]") {
  ScrapedWorker scraped;
  auto& engine = scraped.engine;
  auto& load = scraped.load;

  engine.command({{"op", "metrics"}, {"usage", {{"0", 0.4567}}}});
  auto entry = await_load(*load, [](const auto& e) { return e.kv_observed_ranks() == 1 && e.kv_used_blocks() == 457; });
  CHECK(entry.total_kv_blocks() == 1000);
  CHECK(entry.kv_expected_ranks() == 1);

  SECTION("a page without vllm:cache_config_info") {
    engine.command({{"op", "metrics_text"},
                    {"text", "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"}});
  }
  SECTION("a page that is not Prometheus text") {
    engine.command({{"op", "metrics_text"}, {"text", "<html>not metrics</html>\n"}});
  }
  SECTION("an HTTP error") { engine.command({{"op", "metrics_status"}, {"code", 500}}); }
  SECTION("a server that went away") { engine.command({{"op", "metrics_down"}}); }

  // Three failed scrapes in a row: the worker's rank is unobserved, the pool's load incomplete.
  entry = await_load(*load, [](const auto& e) { return e.kv_observed_ranks() == 0; });
  CHECK(entry.kv_used_blocks() == 0);
  CHECK(entry.kv_expected_ranks() == 1);
}

TEST_CASE("engines: a scrape that succeeds again restores the worker's load", "[engines]") {
  ScrapedWorker scraped(2);  // two ranks on one page (vLLM's `engine` label)
  auto& engine = scraped.engine;
  auto& load = scraped.load;
  engine.command({{"op", "metrics"}, {"usage", {{"0", 0.1}, {"1", 0.2}}}});
  await_load(*load, [](const auto& e) { return e.kv_observed_ranks() == 2 && e.kv_used_blocks() == 300; });
  engine.command({{"op", "metrics_status"}, {"code", 503}});
  await_load(*load, [](const auto& e) { return e.kv_observed_ranks() == 0; });
  engine.command({{"op", "metrics_status"}, {"code", 200}});
  engine.command({{"op", "metrics"}, {"usage", {{"0", 0.5}, {"1", 0.25}}}});
  const auto entry =
      await_load(*load, [](const auto& e) { return e.kv_observed_ranks() == 2 && e.kv_used_blocks() == 750; });
  CHECK(entry.total_kv_blocks() == 2000);
}

TEST_CASE("engines: a worker that stops declaring its metrics page keeps no scraped load", "[engines]") {
  ScrapedWorker scraped;
  scraped.engine.command({{"op", "metrics"}, {"usage", {{"0", 0.25}}}});
  await_load(*scraped.load, [](const auto& e) { return e.kv_observed_ranks() == 1 && e.kv_used_blocks() == 250; });

  // The same worker, still registered, without engine_metrics: its last scraped value goes.
  scraped.worker.clear_engine_metrics();
  scraped.relay.put_worker(scraped.worker);
  const auto entry = await_load(*scraped.load, [](const auto& e) { return e.kv_observed_ranks() == 0; });
  CHECK(entry.kv_used_blocks() == 0);
  CHECK(entry.kv_expected_ranks() == 1);
}
