#include "core/engine_sequencer.hpp"

namespace kvrelay::engine {

std::string_view to_string(ResetCause cause) {
  switch (cause) {
    case ResetCause::kSequenceGap:
      return "sequence_gap";
    case ResetCause::kEngineRestart:
      return "engine_restart";
    case ResetCause::kReplayEvicted:
      return "replay_evicted";
    case ResetCause::kReplayGap:
      return "replay_gap";
    case ResetCause::kReplayTimeout:
      return "replay_timeout";
    case ResetCause::kReplayOverflow:
      return "replay_overflow";
    case ResetCause::kDisconnected:
      return "disconnected";
    case ResetCause::kNewGeneration:
      return "new_generation";
    case ResetCause::kCount:
      break;
  }
  return "unknown";
}

}  // namespace kvrelay::engine
