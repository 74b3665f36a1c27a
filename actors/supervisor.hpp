#pragma once
// Watches the relay's long-lived actors. Any of them ending before the relay drains is a
// failure the relay cannot recover from in place (a frozen membership would keep serving a
// stale state), so the supervisor reports it once, with the actor's name and exit reason,
// and the runtime stops the process (docs/architecture.md, "Supervision"). Once the relay
// drains, only an actor that ends for another reason than being asked to (a handler that
// threw while retiring pools) is reported, so that the process still exits as failed; the
// supervisor ends with the last of them.
#include <caf/all.hpp>

#include <functional>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace kvrelay {

struct SupervisedActor {
  std::string name;
  caf::actor actor;
};

// The supervisor, as the runtime sees it.
using SupervisorActor = caf::typed_actor<caf::reacts_to<atoms::shutdown_atom, RpcStatus>>;  // the relay drains: exits
                                                                                            // as asked are expected now

struct SupervisorState {
  std::vector<SupervisedActor> watched;
  std::function<void(const std::string& failure)> on_failure;  // called at most once
  std::size_t down = 0;                                        // watched actors that have ended
  bool draining = false;
  static inline const char* name = "supervisor";
};

SupervisorActor::behavior_type supervisor(SupervisorActor::stateful_pointer<SupervisorState> self,
                                          std::vector<SupervisedActor> watched,
                                          std::function<void(const std::string& failure)> on_failure);

}  // namespace kvrelay
