#pragma once
// The size limits of one RelayIngest request (docs/protocol/limits.md#ingest-limits): how many
// events a batch, how many blocks and tokens an event, how many bytes any one string may
// have. They bound what one request can make the relay hold or hash. The gateway checks them
// before the structural checks (core/ingest_validation.hpp), so those never walk an oversized
// request; a request above one is refused with INVALID_ARGUMENT and this message.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::ingest_check {

namespace ingest_v1 = ::kvrelay::ingest::v1;

// Each limit is a kv-relay flag, named in the message of a refusal.
struct Limits {
  std::size_t max_batch_events = 16'384;     // --max-batch-events
  std::size_t max_event_blocks = 65'536;     // --max-event-blocks: the blocks one event stores or removes
  std::size_t max_event_tokens = 1'048'576;  // --max-event-tokens: the token ids of one stored event
  std::size_t max_string_bytes = 4'096;      // --max-ingest-string-bytes: any one string of a request
};

enum class Limit : std::uint8_t { kBatchEvents, kEventBlocks, kEventTokens, kStringBytes };

// Which limit a request is above, and "field: N <what> exceed --flag (max)".
struct LimitExceeded {
  Limit limit;
  std::string message;
};
using Overrun = std::optional<LimitExceeded>;

Overrun oversize(const ingest_v1::PutWorkerRequest& request, const Limits& limits);
Overrun oversize(const ingest_v1::RemoveWorkerRequest& request, const Limits& limits);
Overrun oversize(const ingest_v1::SetAvailabilityRequest& request, const Limits& limits);
Overrun oversize(const ingest_v1::KvEventBatch& batch, const Limits& limits);
Overrun oversize(const ingest_v1::LoadReport& report, const Limits& limits);
Overrun oversize(const ingest_v1::FrontendLoadReport& report, const Limits& limits);
Overrun oversize(const ingest_v1::SchedulerLoadReport& report, const Limits& limits);
Overrun oversize(const ingest_v1::SetFrontendsRequest& request, const Limits& limits);
Overrun oversize(const ingest_v1::SetSchedulersRequest& request, const Limits& limits);
Overrun oversize(const ingest_v1::TopologyFile& file, const Limits& limits);

}  // namespace kvrelay::ingest_check
