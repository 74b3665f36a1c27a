#include "actors/mailbox_depth.hpp"

#include <caf/all.hpp>

namespace kvrelay {

std::size_t mailbox_depth(caf::scheduled_actor& actor) { return actor.mailbox().size(); }

}  // namespace kvrelay
