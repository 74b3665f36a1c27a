#include "tests/engines/workload.hpp"

namespace kvrelay::test {

EngineEvent EngineWorkload::store(std::optional<Held> parent) {
  EngineEvent stored;
  const std::size_t blocks = 1 + rng_() % 3;
  for (std::size_t i = 0; i < blocks; ++i) stored.hashes.push_back(rng_());
  const std::size_t tokens = blocks * shape_.block_size;
  for (std::size_t i = 0; i < tokens; ++i) stored.tokens.push_back(static_cast<std::uint32_t>(rng_() % 32000));
  if (shape_.eagle) {
    stored.tokens.push_back(static_cast<std::uint32_t>(rng_() % 32000));  // the last pair's next token
  }
  if (parent) {
    stored.parent = parent->hash;
    stored.lora_name = parent->lora;
    // No salt: a child inherits its parent's namespace, as vLLM sends it.
  } else {
    if (shape_.lora && rng_() % 2 == 0) stored.lora_name = "adapter-" + std::to_string(rng_() % 2);
    if (shape_.salts && rng_() % 2 == 0) stored.salt = "tenant-" + std::to_string(rng_() % 3);
  }
  const std::string salt = parent ? parent->salt : stored.salt;
  for (std::uint64_t hash : stored.hashes) {
    held_.push_back({hash, stored.lora_name, salt});
    namespace_of_[hash] = salt;
  }
  return stored;
}

std::vector<EngineBatch> EngineWorkload::next(std::size_t count) {
  std::vector<EngineBatch> batches;
  for (std::size_t b = 0; b < count; ++b) {
    EngineBatch batch;
    const std::size_t events = 1 + rng_() % 4;
    for (std::size_t e = 0; e < events; ++e) {
      const auto dice = rng_() % 100;
      if (dice < 80 || held_.empty()) {
        std::optional<Held> parent;
        if (dice >= 45 && !held_.empty()) parent = held_[rng_() % held_.size()];
        batch.push_back(store(parent));
      } else if (dice < 99) {
        const std::size_t victim = rng_() % held_.size();
        batch.push_back({EngineEvent::Kind::kRemoved, {held_[victim].hash}, {}, {}, {}, {}});
        held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(victim));
      } else {
        batch.push_back({EngineEvent::Kind::kCleared, {}, {}, {}, {}, {}});
        held_.clear();
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

nlohmann::json EngineWorkload::engine_events(const EngineBatch& batch) const {
  nlohmann::json events = nlohmann::json::array();
  for (const EngineEvent& event : batch) {
    if (event.kind == EngineEvent::Kind::kStored) {
      const EngineEvent* stored = &event;
      nlohmann::json e = {{"kind", "stored"}, {"hashes", stored->hashes}, {"block_size", shape_.block_size}};
      e["parent"] = stored->parent ? nlohmann::json(*stored->parent) : nlohmann::json(nullptr);
      if (shape_.eagle) {
        nlohmann::json pairs = nlohmann::json::array();
        for (std::size_t i = 0; i + 1 < stored->tokens.size(); ++i)
          pairs.push_back({stored->tokens[i], stored->tokens[i + 1]});
        e["token_ids"] = pairs;
      } else {
        e["token_ids"] = stored->tokens;
      }
      if (!stored->lora_name.empty()) e["lora_name"] = stored->lora_name;
      if (!stored->salt.empty() && shape_.salt_field == "cache_salt") e["cache_salt"] = stored->salt;
      if (!stored->salt.empty() && shape_.salt_field == "extra_keys") {
        nlohmann::json keys = nlohmann::json::array();
        for (std::size_t i = 0; i < stored->hashes.size(); ++i) {
          keys.push_back(i == 0 ? nlohmann::json::array({stored->salt}) : nlohmann::json(nullptr));
        }
        e["extra_keys"] = keys;
      }
      events.push_back(std::move(e));
    } else if (event.kind == EngineEvent::Kind::kRemoved) {
      events.push_back({{"kind", "removed"}, {"hashes", event.hashes}});
    } else {
      events.push_back({{"kind", "cleared"}});
    }
  }
  return events;
}

void EngineWorkload::push_events(const EngineBatch& batch, ingest_v1::KvEventBatch& out) {
  const std::size_t width = shape_.block_size + (shape_.eagle ? 1 : 0);
  for (const EngineEvent& event : batch) {
    auto* e = out.add_events();
    if (event.kind == EngineEvent::Kind::kStored) {
      const EngineEvent* stored = &event;
      auto* s = e->mutable_stored();
      if (stored->parent) s->set_parent_block_hash(*stored->parent);
      s->set_lora_name(stored->lora_name);
      s->set_cache_namespace(namespace_of_.at(stored->hashes.front()));
      for (std::size_t i = 0; i < stored->hashes.size(); ++i) {
        auto* block = s->add_blocks();
        block->set_block_hash(stored->hashes[i]);
        const auto first = stored->tokens.begin() + static_cast<std::ptrdiff_t>(i * shape_.block_size);
        block->mutable_tokens()->mutable_token_ids()->Add(first, first + static_cast<std::ptrdiff_t>(width));
      }
    } else if (event.kind == EngineEvent::Kind::kRemoved) {
      for (std::uint64_t hash : event.hashes) e->mutable_removed()->add_block_hashes(hash);
    } else {
      e->mutable_cleared();
    }
  }
}

}  // namespace kvrelay::test
