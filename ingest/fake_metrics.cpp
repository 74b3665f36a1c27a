#include "ingest/fake_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace kvrelay::demo {

namespace {

// Python's float repr, as vLLM's prometheus_client writes sample values: "1.0", not "1".
std::string prometheus_value(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";
  return text;
}

std::string escape_label(std::string_view value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return escaped;
}

}  // namespace

FakeMetricsServer::FakeMetricsServer(FakeMetricsOptions options)
    : options_(std::move(options)), usage_(std::make_unique<std::atomic<double>[]>(options_.dp_ranks.size())) {
  auto server = PageServer::start(
      options_.host, options_.port, "/metrics", [this] { return page(); }, kPrometheusTextType);
  if (!server) {
    throw std::runtime_error(
        fmt::format("fake engine metrics on {}:{}: {}", options_.host, options_.port, server.error()));
  }
  server_ = std::move(*server);
  url_ = fmt::format("http://{}:{}/metrics", options_.host, server_->port());
}

FakeMetricsServer::~FakeMetricsServer() = default;

void FakeMetricsServer::set_usage(std::uint32_t dp_rank, double fraction) {
  const auto& ranks = options_.dp_ranks;
  const auto at = std::find(ranks.begin(), ranks.end(), dp_rank);
  if (at != ranks.end()) usage_[at - ranks.begin()].store(fraction, std::memory_order_relaxed);
}

// Label names sorted, as prometheus_client writes them.
std::string FakeMetricsServer::page() const {
  std::string running, usage, config;
  for (std::size_t i = 0; i < options_.dp_ranks.size(); ++i) {
    const std::uint32_t rank = options_.dp_ranks[i];
    const std::string labels = fmt::format(R"(engine="{}",model_name="{}")", rank, escape_label(options_.model_name));
    running += fmt::format("vllm:num_requests_running{{{}}} 0.0\n", labels);
    usage += fmt::format("vllm:kv_cache_usage_perc{{{}}} {}\n", labels,
                         prometheus_value(usage_[i].load(std::memory_order_relaxed)));
    config += fmt::format(
        "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"{}\","
        "gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"{}\"}} 1.0\n",
        options_.block_size, rank, options_.num_gpu_blocks);
  }
  return "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
         "# TYPE vllm:num_requests_running gauge\n" +
         running +
         "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
         "# TYPE vllm:kv_cache_usage_perc gauge\n" +
         usage +
         "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
         "# TYPE vllm:cache_config_info gauge\n" +
         config;
}

}  // namespace kvrelay::demo
