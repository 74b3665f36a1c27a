#pragma once
// An in-process fake vLLM engine for the demo and the ingest benchmark: it publishes KV-event
// batches on a ZeroMQ socket in vLLM's wire format, answers replay requests from its buffer of
// recent batches, and serves a Prometheus page with vLLM's KV occupancy gauges
// (docs/protocol/engine-sources.md). tools/fake_engine.py, the tests' fake, produces the same
// payload bytes for the same events.
#include <absl/base/thread_annotations.h>

#include <zmq.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

namespace httplib {
class Server;
}

namespace kvrelay::demo {

// The three events of vLLM's KV cache; their names are the wire tags.
struct BlockStored {
  std::vector<std::uint64_t> block_hashes;  // the engine's ids of the blocks, in order
  std::optional<std::uint64_t> parent_block_hash;
  // The blocks' tokens; an Eagle engine sends the pairs (t[i], t[i + 1]) instead.
  std::variant<std::vector<std::uint32_t>, std::vector<std::array<std::uint32_t, 2>>> token_ids;
  std::uint32_t block_size = 0;
  std::optional<std::string> lora_name;
  std::optional<std::string> medium = "GPU";
  std::optional<std::uint32_t> group_idx;         // KV cache group of hybrid models; sent only when set
  std::optional<std::string> kv_cache_spec_kind;  // e.g. "full_attention"; sent only when set
};

struct BlockRemoved {
  std::vector<std::uint64_t> block_hashes;
  std::optional<std::string> medium = "GPU";
  std::optional<std::uint32_t> group_idx;
};

struct AllBlocksCleared {};

using EngineEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

// The msgpack payload vLLM publishes for one batch: [ts, [event, ...], data_parallel_rank], each
// event a map tagged by "type" (the rank is nil when there is none).
std::string encode_vllm_batch(double ts, std::span<const EngineEvent> events, std::optional<std::uint32_t> dp_rank);

// The engine's id of a block, from its parent's id and its own tokens (tools/fake_engine.py
// derives the same ids): XXH3 of le64(parent or 0) || le32(token)..., seeded by the LoRA name.
std::uint64_t engine_block_hash(std::optional<std::uint64_t> parent, std::span<const std::uint32_t> block_tokens,
                                std::string_view lora_name = {});

// The full blocks of `tokens` as one stored event chained under `parent`; a trailing partial
// block is not stored, as an engine only caches full blocks.
BlockStored stored_blocks(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                          std::optional<std::uint64_t> parent, std::optional<std::string> lora_name = std::nullopt);

struct FakeEngineOptions {
  std::string host = "127.0.0.1";  // every socket binds here, on an ephemeral port
  bool replay = true;              // bind the replay ROUTER
  bool metrics = true;             // serve /metrics
  std::string model_name = "fake/model";
  std::uint64_t num_gpu_blocks = 4096;
  std::uint32_t block_size = 16;  // reported by vllm:cache_config_info
  std::uint32_t dp_rank = 0;
  std::size_t buffer_steps = 10000;  // batches kept for replay
  std::string topic;
};

// Threads: publish() and await_subscribers() belong to one thread, the owner's, which also
// owns the publishing socket; the replay socket lives on a thread of its own and reads the
// batch buffer under a mutex; the HTTP server runs its own threads.
class FakeEngine {
 public:
  explicit FakeEngine(FakeEngineOptions options);
  ~FakeEngine();
  FakeEngine(const FakeEngine&) = delete;
  FakeEngine& operator=(const FakeEngine&) = delete;

  const std::string& pub_endpoint() const { return pub_endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }  // empty without replay
  const std::string& metrics_url() const { return metrics_url_; }          // empty without metrics

  // Publishes one batch stamped now and returns its seq (0 for the first, then one more each).
  std::uint64_t publish(std::span<const EngineEvent> events);
  // Whether `count` subscriptions to the topic are connected within `timeout`, so that a
  // caller can publish knowing its first batches reach them.
  bool await_subscribers(std::size_t count, std::chrono::milliseconds timeout);
  // The fraction of the KV cache in use that /metrics reports for this engine's rank.
  void set_usage(double fraction) { usage_.store(fraction, std::memory_order_relaxed); }

 private:
  struct BufferedBatch {
    std::uint64_t seq;
    std::shared_ptr<const std::string> payload;  // shared with replies in flight, never copied
  };

  void bind_metrics();
  void start_metrics();
  void keep_for_replay(std::uint64_t seq, std::shared_ptr<const std::string> payload);
  std::vector<BufferedBatch> buffered_from(std::uint64_t start_seq);
  void serve_replays(zmq::socket_t router);
  void answer_replay(zmq::socket_t& router);
  void read_subscriptions();
  std::string metrics_page() const;

  FakeEngineOptions options_;
  zmq::context_t context_;
  zmq::socket_t pub_;  // the owner's thread only
  std::string pub_endpoint_;
  std::string replay_endpoint_;
  std::string metrics_url_;
  std::uint64_t next_seq_ = 0;     // the owner's thread only
  std::size_t subscriptions_ = 0;  // the owner's thread only

  std::mutex buffer_mutex_;
  std::deque<BufferedBatch> buffer_ ABSL_GUARDED_BY(buffer_mutex_);

  std::atomic<double> usage_{0.0};
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> http_stopped_{false};
  std::thread http_thread_;
  std::thread replay_thread_;
};

}  // namespace kvrelay::demo
