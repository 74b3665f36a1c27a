// Ordering of an engine source's batches: gaps, replays, restarts (core/engine_sequencer.hpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <numeric>
#include <random>
#include <vector>

#include "core/engine_frames.hpp"
#include "core/engine_sequencer.hpp"

namespace kvrelay::engine {
namespace {

using Seq = Sequencer<std::uint64_t>;  // each batch is its own seq, to see what is applied

constexpr HoldLimits kRoomy{100, 1000};  // past what any test holds

std::vector<std::uint64_t> applied(const Seq::Step& step) { return step.apply; }

TEST_CASE("contiguous batches apply in order and a fresh source without replay starts anywhere", "[engine_sequencer]") {
  Seq sequencer(false, kRoomy);
  CHECK(applied(sequencer.on_live(7, 7, 1)) == std::vector<std::uint64_t>{7});
  const auto step = sequencer.on_live(8, 8, 1);
  CHECK(applied(step) == std::vector<std::uint64_t>{8});
  CHECK_FALSE(step.reset);
  CHECK(sequencer.last_seq() == 8u);
}

TEST_CASE("a gap without a replay socket cold-resets and goes on from the batch after it", "[engine_sequencer]") {
  Seq sequencer(false, kRoomy);
  sequencer.on_live(0, 0, 1);
  const auto step = sequencer.on_live(5, 5, 1);
  REQUIRE(step.reset == ResetCause::kSequenceGap);
  CHECK_FALSE(step.request_replay);
  CHECK(applied(step) == std::vector<std::uint64_t>{5});
  CHECK(applied(sequencer.on_live(6, 6, 1)) == std::vector<std::uint64_t>{6});
}

TEST_CASE("a seq that goes back is an engine restart", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  sequencer.on_live(1, 1, 1);
  const auto step = sequencer.on_live(0, 100, 1);
  CHECK(step.reset == ResetCause::kEngineRestart);
  CHECK_FALSE(step.request_replay);
  CHECK(applied(step) == std::vector<std::uint64_t>{100});
}

TEST_CASE("a restart first seen past seq 0 asks the replay socket for what came before", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  for (std::uint64_t seq = 0; seq < 10; ++seq) sequencer.on_live(seq, seq, 1);
  auto step = sequencer.on_live(3, 103, 1);  // the new process's seq 3: 0..2 were missed
  CHECK(step.reset == ResetCause::kEngineRestart);
  REQUIRE(step.request_replay == 0u);
  CHECK_FALSE(step.gap);  // a fresh process's replay from seq 0, not a gap in its seqs
  CHECK(step.apply.empty());
  CHECK(applied(sequencer.on_replay(0, 100)) == std::vector<std::uint64_t>{100});
  CHECK(applied(sequencer.on_replay(1, 101)) == std::vector<std::uint64_t>{101});
  CHECK(applied(sequencer.on_replay(2, 102)) == std::vector<std::uint64_t>{102});
  step = sequencer.on_replay_end();
  CHECK_FALSE(step.reset);
  CHECK(applied(step) == std::vector<std::uint64_t>{103});
}

TEST_CASE("without a replay socket a restart first seen past seq 0 goes on from that batch", "[engine_sequencer]") {
  Seq sequencer(false, kRoomy);
  for (std::uint64_t seq = 0; seq < 10; ++seq) sequencer.on_live(seq, seq, 1);
  const auto step = sequencer.on_live(3, 103, 1);
  CHECK(step.reset == ResetCause::kEngineRestart);
  CHECK_FALSE(step.request_replay);
  CHECK(applied(step) == std::vector<std::uint64_t>{103});
}

TEST_CASE("a gap is replayed in order while live batches wait, then live goes on", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  auto step = sequencer.on_live(4, 4, 1);
  REQUIRE(step.request_replay == 1u);
  CHECK(step.apply.empty());
  CHECK(sequencer.replaying());
  CHECK(sequencer.on_live(5, 5, 1).apply.empty());  // buffered
  CHECK(applied(sequencer.on_replay(1, 1)) == std::vector<std::uint64_t>{1});
  CHECK(applied(sequencer.on_replay(2, 2)) == std::vector<std::uint64_t>{2});
  CHECK(applied(sequencer.on_replay(3, 3)) == std::vector<std::uint64_t>{3});
  CHECK(applied(sequencer.on_replay(4, 4)) == std::vector<std::uint64_t>{4});
  step = sequencer.on_replay_end();
  CHECK_FALSE(step.reset);
  CHECK(applied(step) == std::vector<std::uint64_t>{5});  // 4 came by replay: the live copy is skipped
  CHECK_FALSE(sequencer.replaying());
  CHECK(applied(sequencer.on_live(6, 6, 1)) == std::vector<std::uint64_t>{6});
}

TEST_CASE("a replay that starts above the requested seq was evicted: cold reset, live goes on", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  REQUIRE(sequencer.on_live(9, 9, 1).request_replay == 1u);
  sequencer.on_live(10, 10, 1);
  const auto step = sequencer.on_replay(3, 3);
  CHECK(step.reset == ResetCause::kReplayEvicted);
  CHECK(step.cancel_replay);
  CHECK(applied(step) == std::vector<std::uint64_t>{9, 10});
  CHECK(sequencer.on_replay(4, 4).apply.empty());  // late replies of the abandoned replay
  CHECK(sequencer.on_replay_end().apply.empty());
}

TEST_CASE("a replay that ends without the requested seq is an eviction too", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  sequencer.on_live(3, 3, 1);
  const auto step = sequencer.on_replay_end();
  CHECK(step.reset == ResetCause::kReplayEvicted);
  CHECK(applied(step) == std::vector<std::uint64_t>{3});
}

TEST_CASE("a replay of only what came before the requested seq is an eviction, not asked again", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  for (std::uint64_t seq = 0; seq < 5; ++seq) sequencer.on_live(seq, seq, 1);
  REQUIRE(sequencer.on_live(10, 10, 1).request_replay == 5u);
  CHECK(sequencer.on_replay(3, 3).apply.empty());
  CHECK(sequencer.on_replay(4, 4).apply.empty());
  const auto step = sequencer.on_replay_end();
  CHECK(step.reset == ResetCause::kReplayEvicted);
  CHECK_FALSE(step.request_replay);
  CHECK(applied(step) == std::vector<std::uint64_t>{10});
  CHECK(applied(sequencer.on_live(11, 11, 1)) == std::vector<std::uint64_t>{11});
}

TEST_CASE("a replay that skips a seq, times out or overflows resets the source", "[engine_sequencer]") {
  SECTION("gap inside the replay") {
    Seq sequencer(true, kRoomy);
    sequencer.on_live(0, 0, 1);
    sequencer.on_live(5, 5, 1);
    CHECK(applied(sequencer.on_replay(1, 1)) == std::vector<std::uint64_t>{1});
    const auto step = sequencer.on_replay(3, 3);
    CHECK(step.reset == ResetCause::kReplayGap);
    CHECK(applied(step) == std::vector<std::uint64_t>{5});
  }
  SECTION("timeout") {
    Seq sequencer(true, kRoomy);
    sequencer.on_live(0, 0, 1);
    sequencer.on_live(5, 5, 1);
    const auto step = sequencer.on_replay_timeout();
    CHECK(step.reset == ResetCause::kReplayTimeout);
    CHECK(step.cancel_replay);
    CHECK(applied(step) == std::vector<std::uint64_t>{5});
    CHECK_FALSE(sequencer.on_replay_timeout().reset);  // nothing in flight any more
  }
  SECTION("too many live batches while replaying") {
    Seq sequencer(true, {2, 1000});
    sequencer.on_live(0, 0, 1);
    sequencer.on_live(5, 5, 1);
    sequencer.on_live(6, 6, 1);
    const auto step = sequencer.on_live(7, 7, 1);
    CHECK(step.reset == ResetCause::kReplayOverflow);
    CHECK(applied(step) == std::vector<std::uint64_t>{5, 6, 7});
  }
  SECTION("too many bytes of live batches while replaying") {
    Seq sequencer(true, {100, 10});
    sequencer.on_live(0, 0, 1);
    CHECK(sequencer.on_live(5, 5, 4).request_replay == 1u);  // the batch that found the gap is held too
    CHECK_FALSE(sequencer.on_live(6, 6, 6).reset);           // 10 bytes held: at the bound
    const auto step = sequencer.on_live(7, 7, 1);
    CHECK(step.reset == ResetCause::kReplayOverflow);
    CHECK(applied(step) == std::vector<std::uint64_t>{5, 6, 7});
    SECTION("what was drained no longer counts") {
      CHECK(sequencer.on_live(9, 9, 1).request_replay == 8u);
      CHECK_FALSE(sequencer.on_live(10, 10, 8).reset);  // 9 bytes held
      CHECK(sequencer.on_live(11, 11, 2).reset == ResetCause::kReplayOverflow);
    }
  }
}

TEST_CASE("live batches a finished replay already gave are skipped, not taken for a restart", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  REQUIRE(sequencer.on_live(3, 3, 1).request_replay == 1u);
  // The engine's buffer had reached 5 when it answered: 4 and 5 are still on their way live.
  for (std::uint64_t seq = 1; seq <= 5; ++seq) sequencer.on_replay(seq, seq);
  CHECK(sequencer.on_replay_end().apply.empty());  // 3, held, came by replay too
  for (std::uint64_t seq = 4; seq <= 5; ++seq) {
    const auto step = sequencer.on_live(seq, seq, 1);
    CHECK_FALSE(step.reset);
    CHECK(step.apply.empty());
  }
  CHECK(applied(sequencer.on_live(6, 6, 1)) == std::vector<std::uint64_t>{6});
  SECTION("back below the previous live batch is still a restart") {
    const auto step = sequencer.on_live(2, 102, 1);
    CHECK(step.reset == ResetCause::kEngineRestart);
    CHECK(step.request_replay == 0u);  // the new process's 0 and 1
    CHECK(step.apply.empty());
  }
}

TEST_CASE("a fresh source with a replay socket first asks for everything from seq 0", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  auto step = sequencer.on_live(3, 3, 1);
  REQUIRE(step.request_replay == 0u);
  CHECK_FALSE(step.reset);
  for (std::uint64_t seq = 0; seq < 3; ++seq) CHECK(applied(sequencer.on_replay(seq, seq)) == std::vector{seq});
  step = sequencer.on_replay(3, 3);
  CHECK(applied(step) == std::vector<std::uint64_t>{3});
  CHECK(sequencer.on_replay_end().apply.empty());
  SECTION("a fresh source whose first batch is seq 0 needs no replay") {
    Seq fresh(true, kRoomy);
    const auto first = fresh.on_live(0, 0, 1);
    CHECK_FALSE(first.request_replay);
    CHECK(applied(first) == std::vector<std::uint64_t>{0});
  }
}

TEST_CASE("a gap found among the batches buffered during a replay starts another replay", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  REQUIRE(sequencer.on_live(2, 2, 1).request_replay == 1u);
  sequencer.on_live(5, 5, 1);  // 3 and 4 were lost too
  sequencer.on_replay(1, 1);
  sequencer.on_replay(2, 2);
  const auto step = sequencer.on_replay_end();
  CHECK_FALSE(step.reset);
  CHECK(step.request_replay == 3u);
  CHECK(step.apply.empty());
}

TEST_CASE("the second replay of a drain keeps the later live batches behind the one that found the gap",
          "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  sequencer.on_live(1, 1, 1);
  REQUIRE(sequencer.on_live(4, 4, 1).request_replay == 2u);
  for (std::uint64_t seq : {5, 7, 8}) CHECK(sequencer.on_live(seq, seq, 1).apply.empty());  // 6 lost as well
  sequencer.on_replay(2, 2);
  sequencer.on_replay(3, 3);
  sequencer.on_replay(4, 4);
  auto step = sequencer.on_replay_end();
  CHECK(applied(step) == std::vector<std::uint64_t>{5});
  REQUIRE(step.request_replay == 6u);
  std::vector<std::uint64_t> order;
  for (std::uint64_t seq : {6, 7, 8}) {
    step = sequencer.on_replay(seq, seq);
    CHECK_FALSE(step.reset);
    order.insert(order.end(), step.apply.begin(), step.apply.end());
  }
  step = sequencer.on_replay_end();
  CHECK_FALSE(step.reset);  // nothing was lost and the engine never restarted
  order.insert(order.end(), step.apply.begin(), step.apply.end());
  CHECK(order == std::vector<std::uint64_t>{6, 7, 8});  // the live 7 and 8 came by replay
  CHECK_FALSE(sequencer.replaying());
  CHECK(applied(sequencer.on_live(9, 9, 1)) == std::vector<std::uint64_t>{9});
}

TEST_CASE("a lost connection starts the source over, even when the next seq would continue it", "[engine_sequencer]") {
  SECTION("without a replay socket: dropped, then on from the next batch") {
    Seq sequencer(false, kRoomy);
    sequencer.on_live(0, 0, 1);
    sequencer.on_live(1, 1, 1);
    CHECK(sequencer.on_disconnect().reset == ResetCause::kDisconnected);
    const auto step = sequencer.on_live(7, 107, 1);  // another process past the old seq: no gap replay
    CHECK_FALSE(step.reset);
    CHECK_FALSE(step.request_replay);
    CHECK(applied(step) == std::vector<std::uint64_t>{107});
  }
  SECTION("with a replay socket: dropped, then everything from seq 0, as a fresh source") {
    Seq sequencer(true, kRoomy);
    sequencer.on_live(0, 0, 1);
    sequencer.on_live(1, 1, 1);
    CHECK(sequencer.on_disconnect().reset == ResetCause::kDisconnected);
    auto step = sequencer.on_live(2, 102, 1);  // what continued the old one is not trusted to
    CHECK_FALSE(step.reset);
    REQUIRE(step.request_replay == 0u);
    CHECK(applied(sequencer.on_replay(0, 100)) == std::vector<std::uint64_t>{100});
    CHECK(applied(sequencer.on_replay(1, 101)) == std::vector<std::uint64_t>{101});
    CHECK(applied(sequencer.on_replay_end()) == std::vector<std::uint64_t>{102});
  }
  SECTION("during a replay: the replay is given up with the batches it held") {
    Seq sequencer(true, kRoomy);
    sequencer.on_live(0, 0, 1);
    REQUIRE(sequencer.on_live(5, 5, 1).request_replay == 1u);
    sequencer.on_live(6, 6, 1);
    const auto step = sequencer.on_disconnect();
    CHECK(step.reset == ResetCause::kDisconnected);
    CHECK(step.cancel_replay);
    CHECK(step.apply.empty());
    CHECK_FALSE(sequencer.replaying());
  }
  SECTION("before any batch: nothing to drop") {
    Seq sequencer(true, kRoomy);
    CHECK_FALSE(sequencer.on_disconnect().reset);
  }
}

TEST_CASE("a pool rebuilt as a new generation reads the engine's cache again, where a replay socket has it",
          "[engine_sequencer]") {
  SECTION("with a replay socket: the source starts over from a replay of seq 0, asked at once") {
    Seq sequencer(true, kRoomy);
    sequencer.on_live(0, 0, 1);
    sequencer.on_live(1, 1, 1);
    const auto step = sequencer.on_new_generation();
    CHECK(step.reset == ResetCause::kNewGeneration);
    REQUIRE(step.request_replay == 0u);
    CHECK(sequencer.replaying());
    CHECK(applied(sequencer.on_live(2, 2, 1)).empty());  // waits behind the replay
    CHECK(applied(sequencer.on_replay(0, 0)) == std::vector<std::uint64_t>{0});
    CHECK(applied(sequencer.on_replay(1, 1)) == std::vector<std::uint64_t>{1});
    CHECK(applied(sequencer.on_replay_end()) == std::vector<std::uint64_t>{2});
    CHECK(applied(sequencer.on_live(3, 3, 1)) == std::vector<std::uint64_t>{3});
  }
  SECTION("with a replay socket: live batches its replay already gave are skipped, not taken for a restart") {
    Seq sequencer(true, kRoomy);
    for (std::uint64_t seq = 0; seq < 3; ++seq) sequencer.on_live(seq, seq, 1);
    REQUIRE(sequencer.on_new_generation().request_replay == 0u);
    // The engine had published up to 5 when it answered; 3..5 are still on their way live.
    for (std::uint64_t seq = 0; seq <= 5; ++seq) CHECK(applied(sequencer.on_replay(seq, seq)) == std::vector{seq});
    CHECK(sequencer.on_replay_end().apply.empty());
    for (std::uint64_t seq = 3; seq <= 5; ++seq) {
      const auto step = sequencer.on_live(seq, seq, 1);
      CHECK_FALSE(step.reset);
      CHECK(step.apply.empty());
      CHECK(step.dropped == 1);
    }
    CHECK(applied(sequencer.on_live(6, 6, 1)) == std::vector<std::uint64_t>{6});
  }
  SECTION("with a replay socket, during a replay: that replay is given up for one from seq 0") {
    Seq sequencer(true, kRoomy);
    sequencer.on_live(0, 0, 1);
    REQUIRE(sequencer.on_live(5, 5, 1).request_replay == 1u);
    const auto step = sequencer.on_new_generation();
    CHECK(step.reset == ResetCause::kNewGeneration);
    CHECK(step.cancel_replay);
    CHECK(step.request_replay == 0u);
  }
  SECTION("without one: nothing to read again, the source goes on") {
    Seq sequencer(false, kRoomy);
    sequencer.on_live(0, 0, 1);
    const auto step = sequencer.on_new_generation();
    CHECK_FALSE(step.reset);
    CHECK_FALSE(step.request_replay);
    CHECK(applied(sequencer.on_live(1, 1, 1)) == std::vector<std::uint64_t>{1});
  }
}

// A restarted engine's replay from seq 0 is no gap either: see the restart test above.
TEST_CASE("a gap is told apart from the replays a start or a restart asks for", "[engine_sequencer]") {
  SECTION("a fresh source's replay from seq 0 fills no gap") {
    Seq sequencer(true, kRoomy);
    const auto step = sequencer.on_live(3, 3, 1);
    CHECK(step.request_replay == 0u);
    CHECK_FALSE(step.gap);
  }
  SECTION("a seq skipped ahead is a gap, replayed or reset") {
    for (const bool has_replay : {true, false}) {
      Seq sequencer(has_replay, kRoomy);
      sequencer.on_live(0, 0, 1);
      CHECK_FALSE(sequencer.on_live(1, 1, 1).gap);
      const auto step = sequencer.on_live(4, 4, 1);
      CHECK(step.gap);
      CHECK(step.request_replay.has_value() == has_replay);
      CHECK((step.reset == ResetCause::kSequenceGap) == !has_replay);
    }
  }
}

TEST_CASE("a batch received and never applied counts as dropped, once", "[engine_sequencer]") {
  Seq sequencer(true, kRoomy);
  sequencer.on_live(0, 0, 1);
  REQUIRE(sequencer.on_live(3, 3, 1).request_replay == 1u);
  SECTION("a live batch the replay gave already") {
    for (std::uint64_t seq = 1; seq <= 4; ++seq) CHECK(sequencer.on_replay(seq, seq).dropped == 0);
    CHECK(sequencer.on_replay_end().dropped == 1);  // 3, held while the replay ran
    CHECK(sequencer.on_live(4, 4, 1).dropped == 1);
    CHECK(sequencer.on_live(5, 5, 1).dropped == 0);
  }
  SECTION("a reply below what applied, and one of a replay given up") {
    CHECK(sequencer.on_replay(0, 0).dropped == 1);
    const auto timeout = sequencer.on_replay_timeout();
    REQUIRE(timeout.reset == ResetCause::kReplayTimeout);
    CHECK(applied(timeout) == std::vector<std::uint64_t>{3});  // the held batch starts the source over
    CHECK(sequencer.on_replay(1, 1).dropped == 1);
  }
  SECTION("a reply past the seq asked for: the replay is given up without it") {
    const auto evicted = sequencer.on_replay(2, 2);
    REQUIRE(evicted.reset == ResetCause::kReplayEvicted);
    CHECK(evicted.dropped == 1);
    CHECK(applied(evicted) == std::vector<std::uint64_t>{3});
  }
  SECTION("the batches a lost connection leaves held") {
    sequencer.on_live(4, 4, 1);
    const auto step = sequencer.on_disconnect();
    CHECK(step.dropped == 2);
    CHECK(step.apply.empty());
  }
  SECTION("the batches a restart found during a drain came after") {
    sequencer.on_live(4, 4, 1);
    sequencer.on_live(1, 101, 1);  // the engine restarted: 101 is its seq 1
    for (std::uint64_t seq = 1; seq <= 2; ++seq) sequencer.on_replay(seq, seq);
    const auto step = sequencer.on_replay_end();
    // 3 and 4 apply, then the restart drops them with the step and asks for its seq 0.
    CHECK(step.reset == ResetCause::kEngineRestart);
    CHECK(step.dropped == 2);
    CHECK(step.request_replay == 0u);
  }
}

TEST_CASE("engine frames: live, replay and the end-of-replay marker", "[engine_sequencer]") {
  const std::string topic = "kv", seq = replay_request(258), payload = "\x93\x01\x90\xc0";
  const auto frame = [](const std::string& s) { return Frame(reinterpret_cast<const std::byte*>(s.data()), s.size()); };
  std::vector<Frame> live{frame(topic), frame(seq), frame(payload)};
  const auto parsed = parse_live(live);
  REQUIRE(parsed);
  CHECK(parsed->seq == 258);
  CHECK(parsed->payload.size() == payload.size());
  CHECK_FALSE(parse_live(std::span(live).first(2)));
  const std::string short_seq = "\x01\x02";
  std::vector<Frame> bad_seq{frame(topic), frame(short_seq), frame(payload)};
  CHECK_FALSE(parse_live(bad_seq));
  const std::string end = replay_request(kEndOfReplay), empty;
  std::vector<Frame> vllm_end{frame(end), frame(empty)};
  REQUIRE(parse_replay(vllm_end));
  CHECK(parse_replay(vllm_end)->seq == kEndOfReplay);
  std::vector<Frame> trtllm_reply{frame(topic), frame(seq), frame(payload)};
  REQUIRE(parse_replay(trtllm_reply));
  CHECK(parse_replay(trtllm_reply)->seq == 258);
  std::vector<Frame> live_end{frame(topic), frame(end), frame(payload)};
  CHECK_FALSE(parse_live(live_end));
  std::vector<Frame> empty_payload{frame(seq), frame(empty)};
  CHECK_FALSE(parse_replay(empty_payload));
}

}  // namespace
}  // namespace kvrelay::engine

namespace kvrelay::engine {
namespace {

// An engine whose replay buffer holds everything, a live channel that loses messages, and a
// replay channel whose replies interleave with the live ones at random: each channel keeps
// its own order, as one ZeroMQ socket does.
class LossyEngine {
 public:
  explicit LossyEngine(std::uint32_t seed) : random_(seed) {}

  void publish(bool may_lose) {
    const std::uint64_t seq = published_++;
    if (!may_lose || std::bernoulli_distribution(0.2)(random_) == false) live_.push_back(seq);
  }
  // What the replay socket answers: every batch from `from` on, then the end. A new request
  // replaces the replay in flight (the relay opens a fresh socket for it).
  void replay_from(std::uint64_t from) {
    replies_.clear();
    for (std::uint64_t seq = from; seq < published_; ++seq) replies_.push_back(seq);
    replies_.push_back(kEndOfReplay);
  }
  void cancel_replay() { replies_.clear(); }

  std::deque<std::uint64_t>& live() { return live_; }
  std::deque<std::uint64_t>& replies() { return replies_; }
  std::mt19937& random() { return random_; }
  std::uint64_t published() const { return published_; }

 private:
  std::mt19937 random_;
  std::uint64_t published_ = 0;
  std::deque<std::uint64_t> live_, replies_;
};

// Carries out a step as the source actor does; returns what it applied, after any reset.
void carry_out(const Seq::Step& step, LossyEngine& engine, std::vector<std::uint64_t>& applied_seqs) {
  REQUIRE_FALSE(step.reset);  // everything is in the replay buffer: nothing forces a reset
  if (step.cancel_replay) engine.cancel_replay();
  if (step.request_replay) engine.replay_from(*step.request_replay);
  applied_seqs.insert(applied_seqs.end(), step.apply.begin(), step.apply.end());
}

}  // namespace

TEST_CASE("with a replay buffer that holds everything, every batch applies once and in order, whatever is lost live",
          "[engine_sequencer]") {
  for (std::uint32_t seed = 1; seed <= 300; ++seed) {
    INFO("seed " << seed);
    LossyEngine engine(seed);
    Seq sequencer(true, kRoomy);
    std::vector<std::uint64_t> applied_seqs;
    std::size_t received = 0, dropped = 0;
    const auto deliver_live = [&] {
      const std::uint64_t seq = engine.live().front();
      engine.live().pop_front();
      ++received;
      const auto step = sequencer.on_live(seq, seq, 1);
      dropped += step.dropped;
      carry_out(step, engine, applied_seqs);
    };
    const auto deliver_reply = [&] {
      const std::uint64_t seq = engine.replies().front();
      engine.replies().pop_front();
      received += seq == kEndOfReplay ? 0 : 1;
      const auto step = seq == kEndOfReplay ? sequencer.on_replay_end() : sequencer.on_replay(seq, seq);
      dropped += step.dropped;
      carry_out(step, engine, applied_seqs);
    };
    while (engine.published() < 40) {
      switch (std::uniform_int_distribution<int>(0, 2)(engine.random())) {
        case 0:
          engine.publish(true);
          break;
        case 1:
          if (!engine.live().empty()) deliver_live();
          break;
        default:
          if (!engine.replies().empty()) deliver_reply();
      }
    }
    engine.publish(false);  // the last arrives, so that any gap before it is seen
    while (!engine.live().empty() || !engine.replies().empty()) {
      const bool live_first = std::bernoulli_distribution(0.5)(engine.random());
      if (!engine.live().empty() && (live_first || engine.replies().empty())) {
        deliver_live();
      } else {
        deliver_reply();
      }
    }
    std::vector<std::uint64_t> every(engine.published());
    std::iota(every.begin(), every.end(), 0);
    REQUIRE(applied_seqs == every);
    CHECK(applied_seqs.size() + dropped == received);  // every batch received is accounted for
  }
}

}  // namespace kvrelay::engine
