#pragma once
// One engine's KV activity, written two ways: as tools/fake_engine.py commands (vLLM's wire
// format over ZeroMQ) and as the push batches a feeder would send for the same activity. A
// pool fed either way must publish the same filter.
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::test {

namespace ingest_v1 = ::kvrelay::ingest::v1;

struct EngineEvent {
  enum class Kind : std::uint8_t { kStored, kRemoved, kCleared } kind = Kind::kStored;
  std::vector<std::uint64_t> hashes;  // stored or removed
  std::optional<std::uint64_t> parent;
  std::vector<std::uint32_t> tokens;  // block_size per block (Eagle: one more, the last pair's)
  std::string lora_name;
  std::string salt;  // on a chain's first event only; children inherit it
};
using EngineBatch = std::vector<EngineEvent>;

struct WorkloadShape {
  std::uint32_t block_size = 4;
  bool eagle = false;      // token ids as (token, next token) pairs; windows of block_size + 1
  bool salts = false;      // some chains carry a cache salt
  bool lora = false;       // some chains belong to a LoRA adapter
  std::string salt_field;  // "extra_keys" (vLLM) or "cache_salt" (TensorRT-LLM)
};

class EngineWorkload {
 public:
  EngineWorkload(std::uint64_t seed, WorkloadShape shape) : rng_(seed), shape_(std::move(shape)) {}

  // `count` batches of 1-4 events: new chains, extensions of held blocks, removals, rarely a clear.
  std::vector<EngineBatch> next(std::size_t count);

  // The batch as a fake_engine.py "events" list.
  nlohmann::json engine_events(const EngineBatch& batch) const;
  // The batch as the push feeder sends it: token blocks with their salts, namespaces resolved.
  void push_events(const EngineBatch& batch, ingest_v1::KvEventBatch& out);

 private:
  struct Held {
    std::uint64_t hash;
    std::string lora;
    std::string salt;
  };
  EngineEvent store(std::optional<Held> parent);

  std::mt19937_64 rng_;
  WorkloadShape shape_;
  std::vector<Held> held_;
  std::map<std::uint64_t, std::string> namespace_of_;  // what the push side must resolve itself
};

}  // namespace kvrelay::test
