#pragma once
// Applying ingest KV events (kvrelay.ingest.v1.KvEvent) to a pool's index: only device-tier
// events feed the filter; stored blocks carry Dynamo's local block hash, or their tokens,
// which are hashed here with the pool's query semantics and the event's salts.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/pool_index.hpp"
#include "core/token_hashing.hpp"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay {

struct QuerySemantics {
  std::uint32_t kv_block_size = 0;
  hashing::HashFormat format = hashing::HashFormat::kStandard;
};

enum class EventDisposition {
  kApplied,   // a primary (device-tier) event; counts toward the publication cadence
  kIgnored,   // another tier: not the filter's business
  kRejected,  // a lineage or content error: nothing of this event applied
};

struct EventResult {
  EventDisposition disposition = EventDisposition::kApplied;
  std::optional<EventError> error;  // a lineage error, or CapacityExhausted on an applied event
  std::string detail;               // why a content error rejected the event
};

// Applies one pool's KV events to its index. The stored blocks of an event are gathered in a
// buffer the applier keeps, so applying an event allocates nothing in the steady state; a
// buffer grown past kKeptBlocks by one large event is given back after it.
class KvEventApplier {
 public:
  KvEventApplier() = default;
  explicit KvEventApplier(QuerySemantics semantics) : semantics_(semantics) {}

  static constexpr std::size_t kKeptBlocks = 4096;

  EventResult apply(PoolIndex& index, SourceKey source, const ::kvrelay::ingest::v1::KvEvent& event);

 private:
  EventResult apply_stored(PoolIndex& index, SourceKey source, const ::kvrelay::ingest::v1::BlocksStored& stored);

  QuerySemantics semantics_;
  std::vector<StoredBlockRef> blocks_;
};

// Structural problems that reject a whole batch before anything in it applies
// (docs/protocol/decisions.md#d17). Returns the reason, or nullopt for a well-formed batch.
std::optional<std::string> malformed_batch_reason(const ::kvrelay::ingest::v1::KvEventBatch& batch);

}  // namespace kvrelay
