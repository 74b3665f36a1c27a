#include "core/kv_events.hpp"

#include <fmt/format.h>

namespace kvrelay {

namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

EventResult rejected(std::string detail) { return {EventDisposition::kRejected, std::nullopt, std::move(detail)}; }

EventResult applied(std::optional<EventError> error) {
  if (error && *error != EventError::kCapacityExhausted) {
    return {EventDisposition::kRejected, error, std::string(to_string(*error))};
  }
  return {EventDisposition::kApplied, error, {}};
}

}  // namespace

EventResult KvEventApplier::apply_stored(PoolIndex& index, SourceKey source, const ingest_v1::BlocksStored& stored) {
  const std::uint64_t seed = hashing::block_hash_seed(stored.lora_name(), stored.cache_namespace());
  const std::size_t window = hashing::window_tokens(semantics_.kv_block_size, semantics_.format);
  blocks_.clear();
  for (const ingest_v1::StoredBlock& block : stored.blocks()) {
    if (block.has_tokens()) {
      const auto& tokens = block.tokens().token_ids();
      if (static_cast<std::size_t>(tokens.size()) != window) {
        return rejected(
            fmt::format("a token block of {} tokens; the pool hashes windows of {}", tokens.size(), window));
      }
      const auto& mm = block.tokens().mm_hashes();
      blocks_.push_back(
          {block.block_hash(), hashing::hash_block({tokens.data(), static_cast<std::size_t>(tokens.size())}, seed,
                                                   {mm.data(), static_cast<std::size_t>(mm.size())})});
    } else {
      blocks_.push_back({block.block_hash(), block.tokens_hash()});
    }
  }
  const std::optional<std::uint64_t> parent =
      stored.has_parent_block_hash() ? std::optional(stored.parent_block_hash()) : std::nullopt;
  const std::optional<std::uint32_t> start =
      stored.has_start_position() ? std::optional(stored.start_position()) : std::nullopt;
  return applied(index.store(source, parent, start, blocks_));
}

EventResult KvEventApplier::apply(PoolIndex& index, SourceKey source, const ingest_v1::KvEvent& event) {
  if (event.tier() != ingest_v1::STORAGE_TIER_DEVICE) return {EventDisposition::kIgnored, std::nullopt, {}};
  switch (event.data_case()) {
    case ingest_v1::KvEvent::kStored: {
      EventResult result = apply_stored(index, source, event.stored());
      if (blocks_.capacity() > kKeptBlocks) blocks_ = {};  // applied or rejected, a large event's buffer goes
      return result;
    }
    case ingest_v1::KvEvent::kRemoved: {
      const auto& ids = event.removed().block_hashes();
      return applied(index.remove(source, {ids.data(), static_cast<std::size_t>(ids.size())}));
    }
    case ingest_v1::KvEvent::kCleared:
      return applied(index.clear(source));
    case ingest_v1::KvEvent::DATA_NOT_SET:
      break;
  }
  return rejected("an event with no data");
}

std::optional<std::string> malformed_batch_reason(const ingest_v1::KvEventBatch& batch) {
  for (int i = 0; i < batch.events_size(); ++i) {
    const ingest_v1::KvEvent& event = batch.events(i);
    if (event.data_case() == ingest_v1::KvEvent::DATA_NOT_SET) {
      return fmt::format("events[{}]: has no data", i);
    }
    if (!ingest_v1::StorageTier_IsValid(event.tier())) {
      return fmt::format("events[{}].tier: {} is not a known storage tier", i, static_cast<int>(event.tier()));
    }
    if (!event.has_stored()) continue;
    for (int b = 0; b < event.stored().blocks_size(); ++b) {
      if (event.stored().blocks(b).content_case() == ingest_v1::StoredBlock::CONTENT_NOT_SET) {
        return fmt::format("events[{}].stored.blocks[{}]: has neither tokens_hash nor tokens", i, b);
      }
    }
  }
  return std::nullopt;
}

}  // namespace kvrelay
