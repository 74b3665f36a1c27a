#include "actors/supervisor.hpp"

#include <algorithm>

namespace kvrelay {
namespace {

// Draining: the supervisor goes with the last watched actor, having judged every end.
void quit_when_all_down(SupervisorActor::stateful_pointer<SupervisorState> self) {
  if (self->state.down == self->state.watched.size()) self->quit();
}

}  // namespace

SupervisorActor::behavior_type supervisor(SupervisorActor::stateful_pointer<SupervisorState> self,
                                          std::vector<SupervisedActor> watched,
                                          std::function<void(const std::string& failure)> on_failure) {
  self->state.watched = std::move(watched);
  self->state.on_failure = std::move(on_failure);
  for (const SupervisedActor& watched_actor : self->state.watched) self->monitor(watched_actor.actor);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    const auto gone = std::ranges::find_if(state.watched, [&](const SupervisedActor& watched_actor) {
      return watched_actor.actor.address() == down.source;
    });
    ++state.down;
    // While draining, an actor that stops as asked (shutdown, or the runtime's user_shutdown)
    // is no failure; one that stops with any other reason still is.
    const bool asked_to = down.reason == caf::exit_reason::normal || down.reason == caf::exit_reason::user_shutdown;
    if (state.on_failure && !(state.draining && asked_to)) {
      const std::string name = gone == state.watched.end() ? "an unknown actor" : gone->name;
      auto report = std::exchange(state.on_failure, nullptr);
      report(name + " exited: " + caf::to_string(down.reason));
    }
    if (state.draining) quit_when_all_down(self);
  });
  return {
      [=](atoms::shutdown_atom, const RpcStatus&) {
        self->state.draining = true;
        quit_when_all_down(self);
      },
  };
}

}  // namespace kvrelay
