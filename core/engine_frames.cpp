#include "core/engine_frames.hpp"

#include <fmt/format.h>

namespace kvrelay::engine {

namespace {

std::expected<std::uint64_t, std::string> big_endian_seq(Frame frame) {
  if (frame.size() != 8) return std::unexpected(fmt::format("a seq frame of {} bytes (want 8)", frame.size()));
  std::uint64_t value = 0;
  for (std::byte b : frame) value = (value << 8) | std::to_integer<std::uint64_t>(b);
  return value;
}

std::expected<EngineMessage, std::string> message(Frame seq_frame, Frame payload) {
  const auto seq = big_endian_seq(seq_frame);
  if (!seq) return std::unexpected(seq.error());
  if (*seq != kEndOfReplay && payload.empty()) return std::unexpected(std::string("an empty payload"));
  return EngineMessage{*seq, payload};
}

}  // namespace

std::expected<EngineMessage, std::string> parse_live(std::span<const Frame> frames) {
  if (frames.size() != 3) return std::unexpected(fmt::format("{} frames (want topic, seq, payload)", frames.size()));
  auto parsed = message(frames[1], frames[2]);
  if (parsed && parsed->seq == kEndOfReplay) return std::unexpected(std::string("a live message with seq -1"));
  return parsed;
}

std::expected<EngineMessage, std::string> parse_replay(std::span<const Frame> frames) {
  if (frames.size() == 2) return message(frames[0], frames[1]);
  if (frames.size() == 3) return message(frames[1], frames[2]);
  return std::unexpected(fmt::format("a replay reply of {} frames (want [topic,] seq, payload)", frames.size()));
}

std::string replay_request(std::uint64_t start_seq) {
  std::string bytes(8, '\0');
  for (int i = 7; i >= 0; --i, start_seq >>= 8)
    bytes[static_cast<std::size_t>(i)] = static_cast<char>(start_seq & 0xff);
  return bytes;
}

}  // namespace kvrelay::engine
