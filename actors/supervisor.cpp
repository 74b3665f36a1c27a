#include "actors/supervisor.hpp"

#include <algorithm>

namespace kvrelay {

SupervisorActor::behavior_type supervisor(SupervisorActor::stateful_pointer<SupervisorState> self,
                                          std::vector<SupervisedActor> watched,
                                          std::function<void(const std::string& failure)> on_failure) {
  self->state.watched = std::move(watched);
  self->state.on_failure = std::move(on_failure);
  for (const SupervisedActor& watched_actor : self->state.watched) self->monitor(watched_actor.actor);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    if (state.draining || !state.on_failure) return;
    const auto gone = std::ranges::find_if(state.watched, [&](const SupervisedActor& watched_actor) {
      return watched_actor.actor.address() == down.source;
    });
    const std::string name = gone == state.watched.end() ? "an unknown actor" : gone->name;
    auto report = std::exchange(state.on_failure, nullptr);
    report(name + " exited: " + caf::to_string(down.reason));
  });
  return {
      [=](atoms::shutdown_atom, const RpcStatus&) {
        self->state.draining = true;
        self->quit();
      },
  };
}

}  // namespace kvrelay
