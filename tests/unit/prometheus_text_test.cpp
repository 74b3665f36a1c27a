// The Prometheus text format as engines serve it (core/prometheus_text.hpp).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/prometheus_text.hpp"

using namespace kvrelay::prometheus_text;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

Page parsed(std::string_view text) {
  auto page = parse(text);
  if (!page) FAIL(page.error());
  return *page;
}

std::string failure(std::string_view text) {
  const auto page = parse(text);
  REQUIRE_FALSE(page.has_value());
  return page.error();
}

std::vector<std::string> names(const Page& page) {
  std::vector<std::string> names;
  for (const auto& sample : page.samples) names.push_back(sample.name);
  return names;
}

// The shape of a vLLM /metrics page: HELP and TYPE lines, a counter with its _created gauge, a
// histogram with `le` buckets and cache_config_info with its many string labels.
constexpr std::string_view kVllmPage =
    R"page(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 0.0732421875
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 18231.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 1.7523469411184993e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.005",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 14.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 14.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9153642654418945
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",kv_cache_dtype_skip_layers="['0', 'sliding_window']",num_cpu_blocks="None",num_gpu_blocks="27482",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
)page";

}  // namespace

TEST_CASE("prometheus: a vLLM page keeps every sample, in page order", "[prometheus]") {
  const Page page = parsed(kVllmPage);
  CHECK(names(page) ==
        std::vector<std::string>{"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                                 "vllm:prompt_tokens_created", "vllm:time_to_first_token_seconds_bucket",
                                 "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_bucket",
                                 "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_count",
                                 "vllm:time_to_first_token_seconds_sum", "vllm:cache_config_info"});

  CHECK(page.samples[0].labels == Labels{{"model_name", "meta-llama/Llama-3.1-8B-Instruct"}, {"engine", "0"}});
  CHECK(page.samples[0].value == 3.0);
  CHECK(page.samples[1].value == 0.0732421875);
  CHECK(page.samples[2].value == 18231.0);
  CHECK(page.samples[3].value == 1.7523469411184993e+09);
  CHECK(*page.samples[6].label("le") == "0.1");
  CHECK(page.samples[6].value == 12.0);
  CHECK(*page.samples[7].label("le") == "+Inf");
  CHECK(page.samples[7].value == 14.0);
  CHECK(page.samples[9].value == 0.9153642654418945);

  const Sample& config = page.samples[10];
  CHECK(config.labels.size() == 16);
  CHECK(config.labels.front() == std::pair<std::string, std::string>{"block_size", "16"});
  CHECK(*config.label("num_gpu_blocks") == "27482");
  CHECK(*config.label("kv_cache_dtype_skip_layers") == "['0', 'sliding_window']");
  CHECK(*config.label("num_cpu_blocks") == "None");
  CHECK(config.value == 1.0);
  for (const auto& sample : page.samples) CHECK_FALSE(sample.timestamp_ms.has_value());
}

TEST_CASE("prometheus: comments, blank lines and CRLF line ends carry no samples", "[prometheus]") {
  const Page page = parsed(
      "# HELP foo_total A help with \"quotes\" and \\ backslashes\r\n"
      "# TYPE foo_total counter\r\n"
      "\r\n"
      "   \t \r\n"
      "# a plain comment\r\n"
      "foo_total 1\r\n"
      "  # an indented comment\r\n"
      "\tfoo_total{a=\"b\"} 2\r\n");
  REQUIRE(page.samples.size() == 2);
  CHECK(page.samples[0].labels.empty());
  CHECK(page.samples[0].value == 1);
  CHECK(page.samples[1].labels == Labels{{"a", "b"}});
  CHECK(page.samples[1].value == 2);

  CHECK_THAT(failure("ok 1\r\n\r\nbad\r\n"), StartsWith("line 3: "));
}

TEST_CASE("prometheus: label values are unescaped", "[prometheus]") {
  const Page page = parsed(R"(foo{path="C:\\models\\llama",quote="say \"hi\"",lines="one\ntwo",end="slash\\"} 1)");
  REQUIRE(page.samples.size() == 1);
  CHECK(page.samples[0].labels ==
        Labels{{"path", R"(C:\models\llama)"}, {"quote", R"(say "hi")"}, {"lines", "one\ntwo"}, {"end", R"(slash\)"}});
  CHECK(page.samples[0].value == 1);
}

TEST_CASE("prometheus: label values may hold braces, commas, equals signs, blanks and hashes", "[prometheus]") {
  const Page page = parsed(R"(foo{q="a{b}c",list="x, y",eq="k=v",blanks="  padded  ",hash="#1",close="}"} 7)");
  REQUIRE(page.samples.size() == 1);
  CHECK(page.samples[0].labels ==
        Labels{
            {"q", "a{b}c"}, {"list", "x, y"}, {"eq", "k=v"}, {"blanks", "  padded  "}, {"hash", "#1"}, {"close", "}"}});
  CHECK(page.samples[0].value == 7);
}

TEST_CASE("prometheus: a trailing comma, an empty label set and blank variations", "[prometheus]") {
  const Page page = parsed(
      "foo{a=\"1\",} 1\n"
      "foo{} 2\n"
      "  foo { a = \"1\" , b=\"2\" , } \t 3 \t 1700000000000  \n"
      "foo{a=\"1\"}4\n"
      "\tfoo\t5\t\n");
  REQUIRE(page.samples.size() == 5);
  CHECK(page.samples[0].labels == Labels{{"a", "1"}});
  CHECK(page.samples[0].value == 1);
  CHECK(page.samples[1].labels.empty());
  CHECK(page.samples[1].value == 2);
  CHECK(page.samples[2].labels == Labels{{"a", "1"}, {"b", "2"}});
  CHECK(page.samples[2].value == 3);
  CHECK(page.samples[2].timestamp_ms == 1700000000000);
  CHECK(page.samples[3].labels == Labels{{"a", "1"}});
  CHECK(page.samples[3].value == 4);
  CHECK(page.samples[4].labels.empty());
  CHECK(page.samples[4].value == 5);
  for (const auto& sample : page.samples) CHECK(sample.name == "foo");
}

TEST_CASE("prometheus: NaN, infinities and exponent notation", "[prometheus]") {
  const Page page = parsed(
      "a NaN\n"
      "b +Inf\n"
      "c -Inf\n"
      "d Inf\n"
      "e 1.5e-3\n"
      "f -2E+10\n"
      "g 42\n"
      "h .5\n"
      "i +3\n"
      "j nan\n");
  REQUIRE(page.samples.size() == 10);
  CHECK(std::isnan(page.samples[0].value));
  CHECK(page.samples[1].value == INFINITY);
  CHECK(page.samples[2].value == -INFINITY);
  CHECK(page.samples[3].value == INFINITY);
  CHECK(page.samples[4].value == 1.5e-3);
  CHECK(page.samples[5].value == -2e10);
  CHECK(page.samples[6].value == 42);
  CHECK(page.samples[7].value == 0.5);
  CHECK(page.samples[8].value == 3);
  CHECK(std::isnan(page.samples[9].value));
}

TEST_CASE("prometheus: timestamps are optional integers of milliseconds", "[prometheus]") {
  const Page page = parsed("a 1 1712345678901\nb 2\nc{x=\"y\"} 3 -5\n");
  REQUIRE(page.samples.size() == 3);
  CHECK(page.samples[0].timestamp_ms == 1712345678901);
  CHECK_FALSE(page.samples[1].timestamp_ms.has_value());
  CHECK(page.samples[2].timestamp_ms == -5);
}

TEST_CASE("prometheus: an OpenMetrics # EOF ends the page", "[prometheus]") {
  const Page page = parsed("# TYPE a gauge\na 1\n# EOF\r\nnot a sample at all\n");
  CHECK(names(page) == std::vector<std::string>{"a"});
}

TEST_CASE("prometheus: unknown families are kept", "[prometheus]") {
  const Page page = parsed(
      "# TYPE process_cpu_seconds_total counter\n"
      "process_cpu_seconds_total 12.5\n"
      "python_info{implementation=\"CPython\",major=\"3\",minor=\"12\"} 1.0\n"
      "# TYPE rpc_duration_seconds summary\n"
      "rpc_duration_seconds{quantile=\"0.99\"} 0.3\n"
      "no_type_line 9\n");
  CHECK(names(page) ==
        std::vector<std::string>{"process_cpu_seconds_total", "python_info", "rpc_duration_seconds", "no_type_line"});
  CHECK(*page.samples[1].label("minor") == "12");
  CHECK(page.samples[2].value == 0.3);
}

TEST_CASE("prometheus: Sample::label finds a label or says it is absent", "[prometheus]") {
  const Page page = parsed("foo{a=\"1\",empty=\"\"} 1\n");
  const Sample& sample = page.samples.at(0);
  REQUIRE(sample.label("a") != nullptr);
  CHECK(*sample.label("a") == "1");
  REQUIRE(sample.label("empty") != nullptr);
  CHECK(sample.label("empty")->empty());
  CHECK(sample.label("b") == nullptr);
  CHECK(sample.label("A") == nullptr);
}

TEST_CASE("prometheus: empty pages and pages without a final newline", "[prometheus]") {
  CHECK(parsed("").samples.empty());
  CHECK(parsed("\n\n# only comments\n").samples.empty());
  const Page page = parsed("a 1\nb 2");
  CHECK(names(page) == std::vector<std::string>{"a", "b"});
  CHECK(page.samples[1].value == 2);
}

TEST_CASE("prometheus: a malformed sample line is an error naming its line", "[prometheus]") {
  struct Case {
    std::string line;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"foo", "sample foo has no value"},
      {R"(foo{a="1"} )", "sample foo has no value"},
      {"foo abc", R"(value "abc" is not a number)"},
      {"foo +-1", R"(value "+-1" is not a number)"},
      {"foo 1e999", R"(value "1e999" is out of range)"},
      {"foo 1 1.5", R"(timestamp "1.5" is not an integer)"},
      {"foo 1 2 3", R"(unexpected "3" after the timestamp)"},
      {R"(foo{a="b} 1)", "a label value has no closing quote"},
      {R"(foo{a="b\"} 1)", "a label value has no closing quote"},
      {R"(foo{a"b"} 1)", "expected '=' after label a"},
      {R"(foo{a=b} 1)", "the value of label a is not quoted"},
      {R"(foo{1a="b"} 1)", "expected a label name or '}'"},
      {R"(foo{a="1",,b="2"} 1)", "expected a label name or '}'"},
      {R"(foo{,} 1)", "expected a label name or '}'"},
      {R"(foo{a="b" 1)", "expected ',' or '}' after the value of label a"},
      {R"(foo{a="1",a="2"} 1)", "label a appears twice"},
      {R"(foo{a="\t"} 1)", R"(unknown escape \t)"},
      {"1foo 1", "expected a metric name"},
      {R"({a="1"} 1)", "expected a metric name"},
      {"foo-bar 1", R"(unexpected "-" after metric name foo)"},
  };
  for (const auto& [line, why] : cases) {
    INFO(line);
    const std::string error = failure("# HELP foo A help.\n\nok 1\n" + line + "\nafter 2\n");
    CHECK_THAT(error, StartsWith("line 4: "));
    CHECK_THAT(error, Contains(why));
  }
}

TEST_CASE("prometheus: a page past the label or sample bound is refused", "[prometheus]") {
  const auto labels = [](std::size_t count) {
    std::string text;
    for (std::size_t i = 0; i < count; ++i) text += fmt::format("l{}=\"{}\",", i, i);
    return text;
  };
  const std::string widest = fmt::format("foo{{{}}} 1\n", labels(kMaxLabelsPerSample));
  CHECK(parsed(widest).samples.at(0).labels.size() == kMaxLabelsPerSample);
  CHECK_THAT(failure(fmt::format("foo{{{}}} 1\n", labels(kMaxLabelsPerSample + 1))),
             Contains("sample foo has more than 32 labels"));

  std::string most;
  for (std::size_t i = 0; i < kMaxSamplesPerPage; ++i) most += "a 1\n";
  CHECK(parsed(most).samples.size() == kMaxSamplesPerPage);
  CHECK_THAT(failure(most + "\n# a comment\nb 2\n"), Contains("line 100003: the page has more than 100000 samples"));
}

TEST_CASE("prometheus: a reader that names its samples keeps only those, having checked every line", "[prometheus]") {
  const auto usage_and_config = [](std::string_view name) {
    return name == "vllm:kv_cache_usage_perc" || name == "vllm:cache_config_info";
  };
  const auto page = parse(kVllmPage, usage_and_config);
  REQUIRE(page.has_value());
  CHECK(names(*page) == std::vector<std::string>{"vllm:kv_cache_usage_perc", "vllm:cache_config_info"});
  // Kept samples are whole: read into the same place as the unkept ones before them.
  CHECK(page->samples[0].labels == parsed(kVllmPage).samples[1].labels);
  CHECK(page->samples[1].labels.size() == 16);
  CHECK_FALSE(page->samples[0].timestamp_ms.has_value());

  // A line of a family nobody reads is still checked, and still counts toward the limit.
  const auto broken = parse(std::string(kVllmPage) + "vllm:unread{engine=\"0\" 1\n", usage_and_config);
  REQUIRE_FALSE(broken.has_value());
  const auto last_line = std::count(kVllmPage.begin(), kVllmPage.end(), '\n') + 1;
  CHECK_THAT(broken.error(), Contains(fmt::format("line {}:", last_line)));
  std::string most;
  for (std::size_t i = 0; i < kMaxSamplesPerPage; ++i) most += "unread 1\n";
  CHECK_THAT(parse(most + "vllm:kv_cache_usage_perc 0.5\n", usage_and_config).error(),
             Contains("the page has more than 100000 samples"));
  // A timestamp on an unkept sample does not stay with the next kept one.
  const auto timestamps = parse("unread 1 1700000000000\nvllm:kv_cache_usage_perc 0.5\n", usage_and_config);
  REQUIRE(timestamps.has_value());
  REQUIRE(timestamps->samples.size() == 1);
  CHECK_FALSE(timestamps->samples[0].timestamp_ms.has_value());
}
