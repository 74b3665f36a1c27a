// The ZeroMQ framing of engine KV-event publishers (core/engine_frames.hpp,
// docs/protocol/engine-sources.md#framing): the records of the input are the frames of one
// multipart message, parsed both as a live message and as a replay reply; a payload either
// yields goes on to the event decoder, as an engine source hands it on.
//
// Byte 0: bits 0-2 the card's block size minus 1, bit 3 Eagle.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/engine_events.hpp"
#include "core/engine_frames.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

bool within(engine::Frame part, engine::Frame whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void decode(engine::EventDecoder& decoder, const engine::EngineMessage& message) {
  if (message.seq == engine::kEndOfReplay) return;  // its payload, if any, is not an event batch
  require(!message.payload.empty(), "only the end of a replay has an empty payload");
  ingest_v1::KvEventBatch out;
  decoder.decode(message.payload, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  engine::EventDecoder decoder({static_cast<std::uint32_t>(1 + (data[0] & 7)),
                                (data[0] & 8) != 0 ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard, 0});
  const engine::Frame input = std::as_bytes(std::span(data + 1, size - 1));
  std::vector<engine::Frame> frames;
  for (const auto record : fuzz::records_of(fuzz::as_text(data + 1, size - 1))) {
    frames.push_back(std::as_bytes(std::span(record.data(), record.size())));
  }
  if (const auto live = engine::parse_live(frames)) {
    require(live->seq != engine::kEndOfReplay, "a live message never ends a replay");
    require(within(live->payload, input), "the payload is a view of the message");
    decode(decoder, *live);
  }
  if (const auto replay = engine::parse_replay(frames)) {
    require(within(replay->payload, input), "the payload is a view of the message");
    // The seq frame is the replay request's encoding of the same number.
    const auto request = engine::replay_request(replay->seq);
    const std::vector<engine::Frame> echoed{std::as_bytes(std::span(request.data(), request.size())), replay->payload};
    const auto reparsed = engine::parse_replay(echoed);
    require(reparsed.has_value() && reparsed->seq == replay->seq, "a seq survives the replay request encoding");
    decode(decoder, *replay);
  }
  return 0;
}
