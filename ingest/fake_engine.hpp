#pragma once
// An in-process fake vLLM engine core for the demo and the engine-source benchmark: it
// publishes KV-event batches on a ZeroMQ socket in vLLM's wire format and answers replay
// requests from its buffer of recent batches (docs/protocol/engine-sources.md). The worker's
// Prometheus page is fake_metrics.hpp. tools/fake_engine.py, the tests' fake, produces the
// same payload bytes for the same events.
#include <absl/base/thread_annotations.h>

#include <zmq.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

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
  std::string endpoint = "tcp://127.0.0.1:*";  // where the PUB socket binds (`*`: an ephemeral port)
  // Where the replay ROUTER binds; none: the engine serves no replays.
  std::optional<std::string> replay_endpoint = "tcp://127.0.0.1:*";
  std::uint32_t dp_rank = 0;
  std::size_t buffer_steps = 10000;  // batches kept for replay
  std::string topic;
};

// Threads: publish() and await_subscribers() belong to one thread, the owner's, which also
// owns the publishing socket; the replay socket lives on a thread of its own and reads the
// batch buffer under a mutex. The constructor throws zmq::error_t when a socket cannot bind.
class FakeEngine {
 public:
  explicit FakeEngine(FakeEngineOptions options);
  ~FakeEngine();
  FakeEngine(const FakeEngine&) = delete;
  FakeEngine& operator=(const FakeEngine&) = delete;

  const std::string& pub_endpoint() const { return pub_endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }  // empty without replay

  // Publishes one batch stamped now and returns its seq (0 for the first, then one more each).
  std::uint64_t publish(std::span<const EngineEvent> events);
  // Publishes an already encoded payload (encode_vllm_batch) and returns its seq.
  std::uint64_t publish_payload(std::shared_ptr<const std::string> payload);
  // Whether `count` subscriptions to the topic are connected within `timeout`, so that a
  // caller can publish knowing its first batches reach them.
  bool await_subscribers(std::size_t count, std::chrono::milliseconds timeout);
  // Whether `total` subscriptions have been made since the engine started (ended ones
  // included) within `timeout`: after a reconnection, that the new one has arrived, whenever
  // the old one's end does.
  bool await_subscriptions_made(std::size_t total, std::chrono::milliseconds timeout);

 private:
  struct BufferedBatch {
    std::uint64_t seq;
    std::shared_ptr<const std::string> payload;  // shared with replies in flight, never copied
  };

  void keep_for_replay(std::uint64_t seq, std::shared_ptr<const std::string> payload);
  std::vector<BufferedBatch> buffered_from(std::uint64_t start_seq);
  void serve_replays(zmq::socket_t router);
  void answer_replay(zmq::socket_t& router);
  void read_subscriptions();
  bool await_subscriptions(const std::function<bool()>& enough, std::chrono::milliseconds timeout);

  FakeEngineOptions options_;
  zmq::context_t context_;
  zmq::socket_t pub_;  // the owner's thread only
  std::string pub_endpoint_;
  std::string replay_endpoint_;
  std::uint64_t next_seq_ = 0;          // the owner's thread only
  std::size_t subscriptions_ = 0;       // live ones; the owner's thread only
  std::size_t subscriptions_made_ = 0;  // ever; the owner's thread only

  std::mutex buffer_mutex_;
  std::deque<BufferedBatch> buffer_ ABSL_GUARDED_BY(buffer_mutex_);

  std::thread replay_thread_;
};

}  // namespace kvrelay::demo
