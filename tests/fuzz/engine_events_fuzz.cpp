// The engine KV-event decoder (core/engine_events.hpp, docs/protocol/engine-sources.md#events):
// each record is one msgpack batch payload as an engine publishes it, decoded in order by one
// decoder (its cache-namespace memory spans batches; an empty record is a cold reset). What it
// emits must be a batch the ingest path accepts: well-formed events, token windows of the pool's
// width, and no content an index would refuse.
//
// Byte 0: bits 0-2 the card's block size minus 1, bit 3 Eagle, bit 4 the source's dp rank.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/engine_events.hpp"
#include "core/kv_events.hpp"
#include "core/pool_index.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

// Large enough that the index never runs out of room for one input's blocks.
constexpr std::uint64_t kBuckets = 1024;

void check_emitted(const ingest_v1::KvEventBatch& out, const engine::DecodeResult& result,
                   const engine::DecoderConfig& config, PoolIndex& index) {
  require(out.events_size() == static_cast<int>(result.emitted), "every emitted event is counted");
  require(result.batch == engine::DecodeResult::Batch::kDecoded || result.emitted == 0,
          "a refused batch emits nothing");
  require(!malformed_batch_reason(out), "emitted events are well-formed ingest events");
  const std::size_t width = config.block_size + (config.format == hashing::HashFormat::kEagle ? 1 : 0);
  KvEventApplier events({config.block_size, config.format});
  std::uint64_t stored_blocks = 0;
  for (const auto& event : out.events()) {
    if (event.has_stored()) {
      require(event.stored().blocks_size() > 0, "a stored event carries blocks");
      for (const auto& block : event.stored().blocks()) {
        require(static_cast<std::size_t>(block.tokens().token_ids_size()) == width, "a block is one token window");
      }
      stored_blocks += static_cast<std::uint64_t>(event.stored().blocks_size());
    }
    const EventResult applied = events.apply(index, SourceKey{1, config.dp_rank}, event);
    // Lineage errors depend on what the engine sent before; content errors would be the decoder's.
    require(applied.disposition != EventDisposition::kRejected || applied.error.has_value(),
            "the index accepts the content of every decoded event");
  }
  require(stored_blocks == result.stored_blocks, "stored blocks are counted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const engine::DecoderConfig config{static_cast<std::uint32_t>(1 + (data[0] & 7)),
                                     (data[0] & 8) != 0 ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard,
                                     static_cast<std::uint32_t>((data[0] >> 4) & 1)};
  engine::EventDecoder decoder(config);
  PoolIndex index({kBuckets});
  for (const auto record : fuzz::records_of(fuzz::as_text(data + 1, size - 1))) {
    if (record.empty()) {
      decoder.reset();
      require(decoder.remembered_namespaces() == 0, "a reset forgets every namespace");
      continue;
    }
    ingest_v1::KvEventBatch out;
    const auto result = decoder.decode(std::as_bytes(std::span(record.data(), record.size())), out);
    check_emitted(out, result, config, index);
  }
  return 0;
}
