#pragma once
// The ZeroMQ framing of engines' KV-event publishers (docs/protocol/engine-sources.md#framing):
// a live message is [topic, seq, payload]; a replay reply is [seq, payload] after its empty
// delimiter, or [topic, seq, payload] in TensorRT-LLM's variant; END_SEQ ends a replay.
#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <string>

namespace kvrelay::engine {

using Frame = std::span<const std::byte>;

// seq = -1 as 8 bytes big-endian: the last frame of every replay reply.
inline constexpr std::uint64_t kEndOfReplay = ~std::uint64_t{0};

struct EngineMessage {
  std::uint64_t seq = 0;
  Frame payload;  // msgpack; empty only on the end-of-replay marker
};

// A live message: exactly [topic, 8-byte big-endian seq, payload].
std::expected<EngineMessage, std::string> parse_live(std::span<const Frame> frames);

// One reply of the replay socket, without the empty delimiter the DEALER receives first:
// [seq, payload] (vLLM, SGLang) or [topic, seq, payload] (TensorRT-LLM). The end of the
// replay has seq == kEndOfReplay.
std::expected<EngineMessage, std::string> parse_replay(std::span<const Frame> frames);

// The request a replay socket expects after the delimiter: start_seq, 8 bytes big-endian.
std::string replay_request(std::uint64_t start_seq);

}  // namespace kvrelay::engine
