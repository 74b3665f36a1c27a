#pragma once
// Ordering of one engine source's batches (docs/protocol/engine-sources.md#sequencing): the
// engine numbers its batches seq 0, 1, 2, ... per process. A gap is filled from the engine's
// replay socket when it has one and still holds the range, otherwise the source is cold-reset
// and goes on from the batch after the gap; a seq that goes back is an engine restart, and a
// lost connection may hide one: both start the source over as a fresh one.
//
// Pure: the caller feeds it what arrived and carries out each Step in this order: reset,
// cancel the replay in flight, request a replay, apply every batch in order.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace kvrelay::engine {

enum class ResetCause : std::uint8_t {
  kSequenceGap,     // a gap and no replay socket
  kEngineRestart,   // seq went back
  kReplayEvicted,   // the replay began above the requested seq, or ended without it
  kReplayGap,       // the replay itself skipped a seq
  kReplayTimeout,   // no end of replay in time
  kReplayOverflow,  // too many live batches (or bytes of them) arrived while the replay ran
  kDisconnected,    // the connection to the engine was lost
  kNewGeneration,   // the pool was rebuilt: its new generation holds none of the source's blocks
  kCount
};
std::string_view to_string(ResetCause cause);

// What a source holds back while a replay runs; past either bound it gives the replay up.
struct HoldLimits {
  std::size_t batches = 10000;
  std::size_t bytes = std::size_t{256} << 20;
};

template <class Batch>
class Sequencer {
 public:
  struct Step {
    std::optional<ResetCause> reset;              // drop the source's blocks before applying
    std::optional<std::uint64_t> request_replay;  // ask the replay socket from this seq
    bool cancel_replay = false;                   // stop listening to the replay in flight
    std::vector<Batch> apply;                     // in this order
    bool gap = false;                             // the engine's seq skipped ahead: the batches between were lost
    std::size_t dropped = 0;                      // batches received that will never apply: a replay gave them
                                                  // already, or a reset dropped them before they applied
  };

  // A fresh source with a replay socket first asks it from seq 0: an engine younger than its
  // replay buffer then gives its complete state.
  Sequencer(bool has_replay, HoldLimits limits) : has_replay_(has_replay), bootstrap_(has_replay), limits_(limits) {}

  // `bytes`: what holding the batch costs, counted against HoldLimits::bytes.
  Step on_live(std::uint64_t seq, Batch batch, std::size_t bytes) {
    Step step;
    const std::optional<std::uint64_t> previous_live = std::exchange(last_live_, seq);
    if (replay_) {
      buffered_.push_back({seq, std::move(batch), bytes});
      buffered_bytes_ += bytes;
      if (buffered_.size() > limits_.batches || buffered_bytes_ > limits_.bytes) {
        abandon_replay(step, ResetCause::kReplayOverflow);
      }
      return step;
    }
    // Behind what was applied, yet past the live batch before it: a replay that ended got ahead
    // of live batches still on their way, and gave this one already. (Back below the previous
    // live batch is a restart, which admit sees.)
    if (started_ && previous_live && seq > *previous_live && seq < expected_) {
      ++step.dropped;
      return step;
    }
    admit(step, seq, std::move(batch), bytes);
    return step;
  }

  Step on_replay(std::uint64_t seq, Batch batch) {
    Step step;
    // Below what applied already, or a reply the replay cannot use: it gives the replay up
    // unless it is a late one of a replay already given up.
    if (!replay_ || seq != expected_) ++step.dropped;
    if (!replay_) return step;
    if (!replay_->answered && seq > expected_) {
      abandon_replay(step, ResetCause::kReplayEvicted);
      return step;
    }
    replay_->answered = true;
    if (seq < expected_) return step;
    if (seq > expected_) {
      abandon_replay(step, ResetCause::kReplayGap);
      return step;
    }
    apply(step, seq, std::move(batch));
    return step;
  }

  Step on_replay_end() {
    Step step;
    if (!replay_) return step;
    // Without the requested seq the gap is still there: draining would only ask again, for
    // ever if the engine answers the same way each time.
    if (!replay_->answered || expected_ == replay_->from) {
      abandon_replay(step, ResetCause::kReplayEvicted);
      return step;
    }
    replay_.reset();
    drain_buffered(step);
    return step;
  }

  // Whatever the connection brings next may come from another process of the engine (one
  // that restarted meanwhile need not have gone back below the seq expected), so the source
  // drops its blocks and starts over as a fresh one: from a replay of seq 0, with a replay socket.
  Step on_disconnect() {
    Step step;
    start_over(step, ResetCause::kDisconnected);
    last_live_.reset();
    return step;
  }

  // The pool's new generation holds none of what the engine cached before it: with a replay
  // socket the source starts over from a replay of seq 0, asked at once (the engine is
  // connected, and may publish nothing more for a while), live batches waiting behind it;
  // without one there is nothing to read again, and the source goes on. The connection is the
  // same, so the last live seq still tells the live batches this replay gives from a restart.
  Step on_new_generation() {
    Step step;
    if (!has_replay_) return step;
    start_over(step, ResetCause::kNewGeneration);
    bootstrap_ = false;
    begin_replay(step, 0);
    return step;
  }

  Step on_replay_timeout() {
    Step step;
    if (replay_) abandon_replay(step, ResetCause::kReplayTimeout);
    return step;
  }

  bool replaying() const { return replay_.has_value(); }
  // The seq of the last batch handed out to apply, if any since the source started.
  std::optional<std::uint64_t> last_seq() const { return last_seq_; }

 private:
  struct Held {
    std::uint64_t seq;
    Batch batch;
    std::size_t bytes;
  };
  struct Replay {
    std::uint64_t from;     // the requested seq
    bool answered = false;  // a reply at or below it arrived
  };

  void admit(Step& step, std::uint64_t seq, Batch batch, std::size_t bytes) {
    if (!started_) {
      if (bootstrap_ && seq > 0) {
        bootstrap_ = false;
        start_replay(step, 0, seq, std::move(batch), bytes);
        return;
      }
      apply(step, seq, std::move(batch));
      return;
    }
    if (seq == expected_) return apply(step, seq, std::move(batch));
    if (seq < expected_) {
      reset(step, ResetCause::kEngineRestart);
      // The restarted engine is a fresh source: what it published before this batch (while the
      // relay was dialing it again, say) is asked of its replay socket, as at a source's start.
      if (has_replay_ && seq > 0) return start_replay(step, 0, seq, std::move(batch), bytes);
      return apply(step, seq, std::move(batch));
    }
    step.gap = true;
    if (has_replay_) return start_replay(step, expected_, seq, std::move(batch), bytes);
    reset(step, ResetCause::kSequenceGap);
    apply(step, seq, std::move(batch));
  }

  // Asks the replay socket from `from`; live batches wait behind it.
  void begin_replay(Step& step, std::uint64_t from) {
    started_ = true;
    expected_ = from;
    replay_ = Replay{.from = from};
    step.request_replay = from;
  }

  void start_replay(Step& step, std::uint64_t from, std::uint64_t seq, Batch batch, std::size_t bytes) {
    begin_replay(step, from);
    // First in line: a drain found this gap in the batch it took from the front, and the live
    // batches still held came after it.
    buffered_.push_front({seq, std::move(batch), bytes});
    buffered_bytes_ += bytes;
  }

  // The replay cannot close the gap: the source starts over from the live batches that
  // arrived meanwhile.
  void abandon_replay(Step& step, ResetCause cause) {
    replay_.reset();
    step.cancel_replay = true;
    reset(step, cause);
    drain_buffered(step);
  }

  // Live batches that waited for a replay: those the replay already gave are skipped, unless
  // the live seq went back meanwhile (the engine restarted during the replay).
  void drain_buffered(Step& step) {
    std::optional<std::uint64_t> previous;
    while (!buffered_.empty() && !replay_) {
      Held held = std::move(buffered_.front());
      buffered_.pop_front();
      buffered_bytes_ -= held.bytes;
      const bool went_back = previous && held.seq <= *previous;
      previous = held.seq;
      if (started_ && held.seq < expected_ && !went_back) {
        ++step.dropped;
        continue;
      }
      admit(step, held.seq, std::move(held.batch), held.bytes);
    }
  }

  // Drops what is held and in flight; the next batch starts the source over as a fresh one.
  void start_over(Step& step, ResetCause cause) {
    if (replay_) {
      replay_.reset();
      step.cancel_replay = true;
    }
    step.dropped += buffered_.size();
    buffered_.clear();
    buffered_bytes_ = 0;
    if (started_) reset(step, cause);
    bootstrap_ = has_replay_;
  }

  // The next batch starts the source over, whatever its seq. A step resets before all of its
  // batches, so batches handed out earlier in this step are dropped: the reset would drop
  // their blocks anyway.
  void reset(Step& step, ResetCause cause) {
    started_ = false;
    bootstrap_ = false;
    step.dropped += step.apply.size();
    step.apply.clear();
    step.reset = cause;
  }

  void apply(Step& step, std::uint64_t seq, Batch batch) {
    started_ = true;
    expected_ = seq + 1;
    last_seq_ = seq;
    step.apply.push_back(std::move(batch));
  }

  bool has_replay_;
  bool bootstrap_;
  HoldLimits limits_;
  bool started_ = false;
  std::uint64_t expected_ = 0;  // next seq to apply, once started
  std::optional<std::uint64_t> last_seq_;
  std::optional<std::uint64_t> last_live_;  // the seq of the last live batch received
  std::optional<Replay> replay_;
  std::deque<Held> buffered_;
  std::size_t buffered_bytes_ = 0;  // of buffered_
};

}  // namespace kvrelay::engine
