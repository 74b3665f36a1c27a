#pragma once
// Actors run alone on CAF's deterministic test scheduler: nothing runs until the test says
// so, and time is virtual (timers fire when the test advances the clock), so timeouts,
// heartbeats and cadences are tested without real waiting.
#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/stream_sink.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::test {

class ActorFixture {
 public:
  ActorFixture() {
    config_.set("scheduler.policy", caf::atom("testing"));
    config_.set("logger.verbosity", caf::atom("quiet"));
    system_ = std::make_unique<caf::actor_system>(config_);
    scheduler_ = &dynamic_cast<caf::scheduler::test_coordinator&>(system_->scheduler());
    scheduler_->clock().current_time += std::chrono::hours(1);  // virtual time never starts at 0
  }
  // Every actor a test spawned is stopped before the system goes.
  ~ActorFixture() {
    for (const caf::actor& actor : spawned_) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    run();
  }
  ActorFixture(const ActorFixture&) = delete;
  ActorFixture& operator=(const ActorFixture&) = delete;

  caf::actor_system& system() { return *system_; }

  // Spawns an actor the fixture stops when the test ends.
  template <class... Ts>
  auto spawn(Ts&&... xs) {
    auto handle = system_->spawn(std::forward<Ts>(xs)...);
    spawned_.push_back(caf::actor_cast<caf::actor>(handle));
    return handle;
  }

  // Lets every actor consume its whole mailbox.
  void run() { scheduler_->run(); }
  // Moves virtual time on, fires the timers that came due, and runs what they sent.
  void advance(caf::timespan by) {
    scheduler_->clock().advance_time(by);
    run();
  }

 private:
  caf::actor_system_config config_;
  std::unique_ptr<caf::actor_system> system_;
  caf::scheduler::test_coordinator* scheduler_ = nullptr;
  std::vector<caf::actor> spawned_;
};

// A transport that records what the stream actor hands it. Writes complete only when the
// test says so (complete_write), as a real transport completes them when the client reads.
template <class Message>
class RecordingSink final : public StreamSink<Message> {
 public:
  void write(std::shared_ptr<const Message> message, bool) override { writes.push_back(std::move(message)); }
  void finish(RpcStatus status) override { finished = std::move(status); }

  std::vector<std::shared_ptr<const Message>> writes;
  std::optional<RpcStatus> finished;
};

// Completes the stream actor's outstanding write, as the transport's OnWriteDone would.
inline void complete_write(const StreamTransportActor& stream) {
  caf::anon_send(stream, atoms::write_done_atom_v, true);
}

// An actor that records the messages it receives, in order, for the test to inspect.
struct Inbox {
  std::vector<caf::message> messages;
  template <class... Ts>
  std::size_t count() const {
    std::size_t n = 0;
    for (const auto& message : messages) n += message.match_elements<Ts...>() ? 1 : 0;
    return n;
  }
};

// The status a recorded stream was ended with, if it was.
inline std::optional<RpcStatus> ending_of(const Inbox& inbox) {
  for (const auto& message : inbox.messages) {
    if (message.match_elements<atoms::end_stream_atom, RpcStatus>()) return message.get_as<RpcStatus>(1);
  }
  return std::nullopt;
}

inline caf::actor spawn_recorder(ActorFixture& fixture, std::shared_ptr<Inbox> inbox) {
  // The inbox is an argument, not a capture: CAF 0.17 dereferences a null argument tuple
  // when a function actor takes none (UBSan reports it).
  return fixture.spawn(
      [](caf::event_based_actor* self, std::shared_ptr<Inbox> inbox) -> caf::behavior {
        self->set_default_handler([inbox](caf::scheduled_actor*, caf::message_view& view) -> caf::result<caf::message> {
          inbox->messages.push_back(view.move_content_to_message());
          return caf::message{};
        });
        return {[](atoms::sample_atom) {}};
      },
      std::move(inbox));
}

// The sum of `family`'s counters whose `label` is `value`, as RelayMetrics holds them now.
inline double counted(const metrics::RelayMetrics& metrics, const std::string& family, const std::string& label,
                      const std::string& value) {
  double sum = 0;
  for (const auto& collectable : metrics.collectables()) {
    const auto held = collectable.lock();
    if (!held) continue;
    for (const auto& collected : held->Collect()) {
      if (collected.name != family) continue;
      for (const auto& series : collected.metric) {
        for (const auto& pair : series.label) {
          if (pair.name == label && pair.value == value) sum += series.counter.value;
        }
      }
    }
  }
  return sum;
}

}  // namespace kvrelay::test
