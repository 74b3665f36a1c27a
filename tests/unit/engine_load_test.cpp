// KV occupancy read from engine metrics pages (core/engine_load.hpp, docs/protocol/decisions.md#d26).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/engine_load.hpp"

using namespace kvrelay::engine_load;
using Catch::Matchers::Contains;

namespace Catch {
template <>
struct StringMaker<RankOccupancy> {
  static std::string convert(const RankOccupancy& entry) {
    return fmt::format("{{rank {}: {} blocks}}", entry.dp_rank, entry.kv_used_blocks);
  }
};
}  // namespace Catch

namespace {

using Occupancy = std::vector<RankOccupancy>;

kvrelay::prometheus_text::Page page_of(std::string_view text) {
  auto page = kvrelay::prometheus_text::parse(text);
  if (!page) FAIL(page.error());
  return *page;
}

OccupancyQuery vllm(std::uint32_t default_rank = 0) { return {EngineKind::kVllm, default_rank, 16}; }
OccupancyQuery sglang(std::uint32_t default_rank = 0, std::uint32_t block_size = 16) {
  return {EngineKind::kSglang, default_rank, block_size};
}

// As a scrape reads a page: only the engine's families kept, every line checked. The whole
// page, read first, must give the same.
Occupancy occupancy(std::string_view text, const OccupancyQuery& query) {
  auto result = read_page(text, query);
  if (!result) FAIL(result.error());
  CHECK(read_occupancy(page_of(text), query) == result);
  return *result;
}

std::string failure(std::string_view text, const OccupancyQuery& query) {
  const auto result = read_page(text, query);
  REQUIRE_FALSE(result.has_value());
  const auto whole = kvrelay::prometheus_text::parse(text);
  if (whole) CHECK(read_occupancy(*whole, query).error() == result.error());
  return result.error();
}

// A vLLM page with one usage gauge and one cache_config_info series, for the edge cases.
std::string vllm_page(std::string_view usage_labels, std::string_view usage, std::string_view config_labels) {
  return fmt::format(
      "# TYPE vllm:kv_cache_usage_perc gauge\n"
      "vllm:kv_cache_usage_perc{{{}}} {}\n"
      "# TYPE vllm:cache_config_info gauge\n"
      "vllm:cache_config_info{{{}}} 1.0\n",
      usage_labels, usage, config_labels);
}

std::string sglang_page(std::string_view labels, std::string_view used_tokens) {
  return fmt::format("# TYPE sglang:num_used_tokens gauge\nsglang:num_used_tokens{{{}}} {}\n", labels, used_tokens);
}

// vLLM 0.10 serving data-parallel ranks 2 and 3 (a worker whose data_parallel_start_rank is 2):
// every family labelled by model_name and engine, the deprecated usage name next to the current
// one, histograms, and cache_config_info once per engine with CacheConfig's fields as labels.
constexpr std::string_view kVllmDpPage = R"page(# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12873.0
python_gc_objects_collected_total{generation="1"} 3376.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="2",model_name="Qwen/Qwen3-32B"} 17.0
vllm:num_requests_running{engine="3",model_name="Qwen/Qwen3-32B"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="2",model_name="Qwen/Qwen3-32B"} 0.0
vllm:num_requests_waiting{engine="3",model_name="Qwen/Qwen3-32B"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="2",model_name="Qwen/Qwen3-32B"} 0.25
vllm:gpu_cache_usage_perc{engine="3",model_name="Qwen/Qwen3-32B"} 0.0732421875
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="2",model_name="Qwen/Qwen3-32B"} 0.25
vllm:kv_cache_usage_perc{engine="3",model_name="Qwen/Qwen3-32B"} 0.0732421875
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="2",model_name="Qwen/Qwen3-32B"} 981234.0
vllm:prefix_cache_queries_total{engine="3",model_name="Qwen/Qwen3-32B"} 771002.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="2",model_name="Qwen/Qwen3-32B"} 1.7523469411184993e+09
vllm:prefix_cache_queries_created{engine="3",model_name="Qwen/Qwen3-32B"} 1.752346941119201e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="2",finished_reason="stop",model_name="Qwen/Qwen3-32B"} 1021.0
vllm:request_success_total{engine="2",finished_reason="length",model_name="Qwen/Qwen3-32B"} 12.0
vllm:request_success_total{engine="3",finished_reason="stop",model_name="Qwen/Qwen3-32B"} 998.0
vllm:request_success_total{engine="3",finished_reason="length",model_name="Qwen/Qwen3-32B"} 7.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_sum{engine="2",model_name="Qwen/Qwen3-32B"} 4210.5
vllm:e2e_request_latency_seconds_bucket{engine="2",le="0.3",model_name="Qwen/Qwen3-32B"} 0.0
vllm:e2e_request_latency_seconds_bucket{engine="2",le="5.0",model_name="Qwen/Qwen3-32B"} 880.0
vllm:e2e_request_latency_seconds_bucket{engine="2",le="+Inf",model_name="Qwen/Qwen3-32B"} 1033.0
vllm:e2e_request_latency_seconds_count{engine="2",model_name="Qwen/Qwen3-32B"} 1033.0
vllm:e2e_request_latency_seconds_sum{engine="3",model_name="Qwen/Qwen3-32B"} 3977.25
vllm:e2e_request_latency_seconds_bucket{engine="3",le="0.3",model_name="Qwen/Qwen3-32B"} 0.0
vllm:e2e_request_latency_seconds_bucket{engine="3",le="5.0",model_name="Qwen/Qwen3-32B"} 851.0
vllm:e2e_request_latency_seconds_bucket{engine="3",le="+Inf",model_name="Qwen/Qwen3-32B"} 1005.0
vllm:e2e_request_latency_seconds_count{engine="3",model_name="Qwen/Qwen3-32B"} 1005.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="2",gpu_memory_utilization="0.9",is_attention_free="False",kv_sharing_fast_prefill="False",mamba_cache_dtype="auto",mamba_page_size_padded="None",num_cpu_blocks="None",num_gpu_blocks="8192",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="3",gpu_memory_utilization="0.9",is_attention_free="False",kv_sharing_fast_prefill="False",mamba_cache_dtype="auto",mamba_page_size_padded="None",num_cpu_blocks="None",num_gpu_blocks="8192",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
)page";

// SGLang with two data-parallel ranks under DP attention (tp 8, so the ranks' first schedulers are
// tp_rank 0 and 4): every scheduler family carries model_name, engine_type, tp_rank, pp_rank,
// moe_ep_rank and dp_rank.
constexpr std::string_view kSglangDpPage = R"page(# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 12.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="4",pp_rank="0",tp_rank="4"} 9.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1600.0
sglang:num_used_tokens{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="4",pp_rank="0",tp_rank="4"} 1601.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.01
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="4",pp_rank="0",tp_rank="4"} 0.01
# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 160000.0
sglang:max_total_num_tokens{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="4",pp_rank="0",tp_rank="4"} 160000.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="deepseek-ai/DeepSeek-V3"} 210.25
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="deepseek-ai/DeepSeek-V3"} 40.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="deepseek-ai/DeepSeek-V3"} 512.0
sglang:time_to_first_token_seconds_count{model_name="deepseek-ai/DeepSeek-V3"} 512.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="deepseek-ai/DeepSeek-V3"} 2.048e+06
)page";

}  // namespace

TEST_CASE("engine_load: vLLM with two data-parallel ranks", "[engine_load]") {
  // 0.25 and 600/8192 of 8192 blocks.
  CHECK(occupancy(kVllmDpPage, vllm(2)) == Occupancy{{2, 2048}, {3, 600}});
}

TEST_CASE("engine_load: vLLM before 0.9: gpu_cache_usage_perc and an unlabelled cache_config_info", "[engine_load]") {
  const std::string page =
      "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
      "# TYPE vllm:gpu_cache_usage_perc gauge\n"
      "vllm:gpu_cache_usage_perc{model_name=\"m\",engine=\"0\"} 0.5\n"
      "# TYPE vllm:cache_config_info gauge\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\",swap_space_bytes=\"4294967296\"} 1.0\n";
  CHECK(occupancy(page, vllm()) == Occupancy{{0, 500}});
}

TEST_CASE("engine_load: vLLM's current usage name wins over the deprecated one", "[engine_load]") {
  const std::string page =
      "vllm:gpu_cache_usage_perc{engine=\"0\"} 0.25\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"1000\"} 1\n";
  CHECK(occupancy(page, vllm()) == Occupancy{{0, 500}});
}

TEST_CASE("engine_load: a vLLM series without an engine label is the worker's first rank", "[engine_load]") {
  CHECK(occupancy(vllm_page("", "0.5", "num_gpu_blocks=\"1000\""), vllm(7)) == Occupancy{{7, 500}});
  CHECK(occupancy(vllm_page("engine=\"\"", "0.5", "num_gpu_blocks=\"1000\""), vllm(7)) == Occupancy{{7, 500}});
}

TEST_CASE("engine_load: each vLLM engine takes its own cache_config_info", "[engine_load]") {
  const std::string per_engine =
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n"
      "vllm:cache_config_info{engine=\"1\",num_gpu_blocks=\"200\"} 1\n"
      "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"100\"} 1\n";
  CHECK(occupancy(per_engine, vllm()) == Occupancy{{0, 50}, {1, 100}});

  // No series for engine 1: the unlabelled one.
  const std::string unlabelled_fallback =
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n"
      "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"100\"} 1\n"
      "vllm:cache_config_info{num_gpu_blocks=\"300\"} 1\n";
  CHECK(occupancy(unlabelled_fallback, vllm()) == Occupancy{{1, 150}});

  // Neither: the only one there is.
  CHECK(occupancy(vllm_page("engine=\"1\"", "0.5", "engine=\"0\",num_gpu_blocks=\"100\""), vllm()) ==
        Occupancy{{1, 50}});

  const std::string none_for_engine_2 =
      "vllm:kv_cache_usage_perc{engine=\"2\"} 0.5\n"
      "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"100\"} 1\n"
      "vllm:cache_config_info{engine=\"1\",num_gpu_blocks=\"100\"} 1\n";
  CHECK_THAT(failure(none_for_engine_2, vllm()), Contains("no vllm:cache_config_info series for engine \"2\""));

  const std::string two_for_engine_0 =
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"100\"} 1\n"
      "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"200\"} 1\n";
  CHECK_THAT(failure(two_for_engine_0, vllm()), Contains("two vllm:cache_config_info series for engine \"0\""));
}

TEST_CASE("engine_load: thousands of vLLM engines each find their own cache_config_info", "[engine_load]") {
  constexpr std::uint32_t kEngines = 5000;
  std::string page;
  for (std::uint32_t e = 0; e < kEngines; ++e)
    page += fmt::format("vllm:kv_cache_usage_perc{{engine=\"{}\"}} 0.5\n", e);
  for (std::uint32_t e = kEngines; e-- > 0;) {
    page += fmt::format("vllm:cache_config_info{{engine=\"{}\",num_gpu_blocks=\"{}\"}} 1\n", e, 2 * (e + 1));
  }
  Occupancy expected;
  for (std::uint32_t e = 0; e < kEngines; ++e) expected.push_back({e, e + 1});
  CHECK(occupancy(page, vllm()) == expected);
}

TEST_CASE("engine_load: vLLM usage is rounded to whole blocks", "[engine_load]") {
  const auto used = [](std::string_view usage) {
    return occupancy(vllm_page("engine=\"0\"", usage, "num_gpu_blocks=\"10\""), vllm()).at(0).kv_used_blocks;
  };
  CHECK(used("0") == 0);
  CHECK(used("0.24") == 2);
  CHECK(used("0.25") == 3);  // 2.5: half away from zero
  CHECK(used("0.26") == 3);
  CHECK(used("1") == 10);
  CHECK(used("1.0000000001") == 10);  // float noise above a full cache
  CHECK(used("-0.0") == 0);
}

TEST_CASE("engine_load: vLLM usage must be a finite fraction", "[engine_load]") {
  for (const std::string usage : {"NaN", "+Inf", "-Inf", "-0.1"}) {
    INFO(usage);
    CHECK_THAT(failure(vllm_page("engine=\"0\"", usage, "num_gpu_blocks=\"10\""), vllm()),
               Contains("vllm:kv_cache_usage_perc of rank 0 is"));
  }
  CHECK_THAT(failure(vllm_page("engine=\"0\"", "1.01", "num_gpu_blocks=\"10\""), vllm()),
             Contains("above 1 (it is a fraction)"));
  CHECK_THAT(failure(vllm_page("engine=\"0\"", "37.5", "num_gpu_blocks=\"10\""), vllm()),
             Contains("above 1 (it is a fraction)"));
}

TEST_CASE("engine_load: vLLM's num_gpu_blocks must be an integer label", "[engine_load]") {
  CHECK_THAT(failure(vllm_page("engine=\"0\"", "0.5", "engine=\"0\",block_size=\"16\""), vllm()),
             Contains("vllm:cache_config_info has no num_gpu_blocks label"));
  for (const std::string blocks : {"None", "12.5", "-3", "", "1e3", " 12", "18446744073709551616"}) {
    INFO(blocks);
    CHECK_THAT(failure(vllm_page("engine=\"0\"", "0.5", fmt::format("num_gpu_blocks=\"{}\"", blocks)), vllm()),
               Contains(fmt::format("num_gpu_blocks \"{}\" of vllm:cache_config_info is not an integer", blocks)));
  }
  CHECK(occupancy(vllm_page("engine=\"0\"", "1", "num_gpu_blocks=\"18446744073709551615\""), vllm()) ==
        Occupancy{{0, 18446744073709551615u}});
}

TEST_CASE("engine_load: vLLM's engine label must be a u32", "[engine_load]") {
  for (const std::string engine : {"x", "-1", "+1", " 1", "1.0", "4294967296"}) {
    INFO(engine);
    CHECK_THAT(failure(vllm_page(fmt::format("engine=\"{}\"", engine), "0.5", "num_gpu_blocks=\"10\""), vllm()),
               Contains(fmt::format("engine label \"{}\" of vllm:kv_cache_usage_perc is not a u32", engine)));
  }
  CHECK(occupancy(vllm_page("engine=\"4294967295\"", "0.5", "num_gpu_blocks=\"10\""), vllm()) ==
        Occupancy{{4294967295u, 5}});
}

TEST_CASE("engine_load: two vLLM series for one rank are an error", "[engine_load]") {
  const std::string twice =
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"b\"} 0.5\n"
      "vllm:cache_config_info{num_gpu_blocks=\"10\"} 1\n";
  CHECK_THAT(failure(twice, vllm()), Contains("two vllm:kv_cache_usage_perc series for rank 0"));

  // The unlabelled series is rank 3 here, as is the labelled one.
  const std::string default_and_labelled =
      "vllm:kv_cache_usage_perc 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"3\"} 0.5\n"
      "vllm:cache_config_info{num_gpu_blocks=\"10\"} 1\n";
  CHECK_THAT(failure(default_and_labelled, vllm(3)), Contains("two vllm:kv_cache_usage_perc series for rank 3"));
  CHECK(occupancy(default_and_labelled, vllm(2)) == Occupancy{{2, 5}, {3, 5}});
}

TEST_CASE("engine_load: a vLLM page missing a family gives no occupancy", "[engine_load]") {
  CHECK_THAT(failure("vllm:cache_config_info{num_gpu_blocks=\"10\"} 1\n", vllm()),
             Contains("the page has neither vllm:kv_cache_usage_perc nor vllm:gpu_cache_usage_perc"));
  CHECK_THAT(failure("# TYPE vllm:cache_config_info gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n", vllm()),
             Contains("the page has no vllm:cache_config_info"));
  CHECK_THAT(failure("", vllm()), Contains("the page has neither"));
  CHECK_THAT(failure(kSglangDpPage, vllm()), Contains("the page has neither"));
}

TEST_CASE("engine_load: SGLang with two data-parallel ranks", "[engine_load]") {
  CHECK(occupancy(kSglangDpPage, sglang()) == Occupancy{{0, 100}, {1, 101}});
  CHECK(occupancy(kSglangDpPage, sglang(0, 32)) == Occupancy{{0, 50}, {1, 51}});
}

TEST_CASE("engine_load: an SGLang series without dp_rank is the worker's first rank", "[engine_load]") {
  const std::string page = sglang_page(R"(engine_type="unified",model_name="m",pp_rank="0",tp_rank="0")", "48.0");
  CHECK(occupancy(page, sglang(5)) == Occupancy{{5, 3}});
}

TEST_CASE("engine_load: SGLang tokens round up to whole blocks", "[engine_load]") {
  const auto used = [](std::string_view tokens) {
    return occupancy(sglang_page("dp_rank=\"0\"", tokens), sglang(0, 16)).at(0).kv_used_blocks;
  };
  CHECK(used("0") == 0);
  CHECK(used("1") == 1);
  CHECK(used("16") == 1);
  CHECK(used("17") == 2);
  CHECK(used("32") == 2);
  CHECK(used("1.6e3") == 100);
}

TEST_CASE("engine_load: SGLang needs a block size and sane token counts", "[engine_load]") {
  CHECK_THAT(failure(kSglangDpPage, sglang(0, 0)), Contains("the block size must not be 0"));
  for (const std::string tokens : {"NaN", "+Inf", "-1"}) {
    INFO(tokens);
    CHECK_THAT(failure(sglang_page("dp_rank=\"1\"", tokens), sglang()),
               Contains("sglang:num_used_tokens of rank 1 is"));
  }
  CHECK_THAT(failure(sglang_page("dp_rank=\"1\"", "1e30"), sglang(0, 1)), Contains("is out of range"));
}

TEST_CASE("engine_load: SGLang's dp_rank must be a u32, once per rank", "[engine_load]") {
  CHECK_THAT(failure(sglang_page("dp_rank=\"abc\"", "16"), sglang()),
             Contains("dp_rank label \"abc\" of sglang:num_used_tokens is not a u32"));
  // --enable-metrics-for-all-schedulers: every tp rank of dp rank 0 reports.
  const std::string every_scheduler =
      "sglang:num_used_tokens{dp_rank=\"0\",tp_rank=\"0\"} 16\n"
      "sglang:num_used_tokens{dp_rank=\"0\",tp_rank=\"1\"} 16\n";
  CHECK_THAT(failure(every_scheduler, sglang()), Contains("two sglang:num_used_tokens series for rank 0"));
}

TEST_CASE("engine_load: an SGLang page without num_used_tokens gives no occupancy", "[engine_load]") {
  const std::string usage_only =
      "sglang:token_usage{dp_rank=\"0\"} 0.5\n"
      "sglang:max_total_num_tokens{dp_rank=\"0\"} 1000\n";
  CHECK_THAT(failure(usage_only, sglang()), Contains("the page has no sglang:num_used_tokens"));
  CHECK_THAT(failure(kVllmDpPage, sglang()), Contains("the page has no sglang:num_used_tokens"));
}
