#pragma once
#include <caf/scheduled_actor.hpp>

#include <cstddef>

namespace kvrelay {

// How many messages wait in `actor`'s mailbox; call only from inside that actor.
// Kept out of line in a file built without UBSan's vptr check: CAF 0.17's intrusive queues
// cast their list sentinel to an element type while counting, which that check reports
// whenever the counting code is compiled into an instrumented translation unit.
std::size_t mailbox_depth(caf::scheduled_actor& actor);

}  // namespace kvrelay
