#pragma once
// The Prometheus page of a fake vLLM worker, for the demo: what vLLM's API server exposes for
// its engines, one series per engine (dp rank) of `vllm:kv_cache_usage_perc` and of
// `vllm:cache_config_info`, whose `num_gpu_blocks` label is the rank's capacity
// (docs/protocol/engine-sources.md#load), among unrelated families as on a real page.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metrics/page_server.hpp"

namespace kvrelay::demo {

struct FakeMetricsOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port
  std::string model_name = "fake/model";
  std::uint32_t block_size = 16;
  std::uint64_t num_gpu_blocks = 4096;  // per rank
  std::vector<std::uint32_t> dp_ranks = {0};
};

// Serves GET /metrics on threads of its own; set_usage may be called from any thread. The
// constructor throws std::runtime_error when the port cannot be bound.
class FakeMetricsServer {
 public:
  explicit FakeMetricsServer(FakeMetricsOptions options);
  ~FakeMetricsServer();
  FakeMetricsServer(const FakeMetricsServer&) = delete;
  FakeMetricsServer& operator=(const FakeMetricsServer&) = delete;

  const std::string& url() const { return url_; }
  // The fraction of the rank's KV cache in use (1 = full); a rank not served is ignored.
  void set_usage(std::uint32_t dp_rank, double fraction);
  // The page as it is served now.
  std::string page() const;

 private:
  FakeMetricsOptions options_;
  std::unique_ptr<std::atomic<double>[]> usage_;  // by position in options_.dp_ranks
  std::unique_ptr<PageServer> server_;            // after usage_: its threads read it until it stops
  std::string url_;
};

}  // namespace kvrelay::demo
