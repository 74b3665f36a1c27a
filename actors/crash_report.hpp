#pragma once
// A core actor that throws (an invariant broken inside a handler) ends with an error naming
// the actor, the exception and the kind of message it was handling, so the supervisor's log
// line says what went wrong where (docs/architecture.md, "Supervision").
#include <caf/all.hpp>

#include <exception>
#include <string>

namespace kvrelay {

template <class Self>
void report_crashes(Self self, std::string actor_name) {
  self->set_exception_handler([actor_name](caf::scheduled_actor* actor, std::exception_ptr& thrown) -> caf::error {
    std::string what = "an unknown exception";
    try {
      std::rethrow_exception(thrown);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    std::string message_kind = "no message";
    if (const auto* element = actor->current_mailbox_element(); element != nullptr && element->content().size() > 0) {
      message_kind = element->content().stringify(0);
    }
    return caf::make_error(caf::sec::runtime_error,
                           actor_name + " failed while handling " + message_kind + ": " + what);
  });
}

}  // namespace kvrelay
