#pragma once
// The snapshot-encoding permits shared by every pool stream (--snapshot-encoders): a stream
// holds one from its first snapshot chunk until its last is handed on. Requests wait in
// arrival order; a stream that ends while waiting or holding (cancel, lag, retirement,
// progress timeout) gives its place back, because the pool watches every requester.
#include <caf/all.hpp>

#include <deque>
#include <set>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"

namespace kvrelay {

struct SnapshotEncodersState {
  std::size_t available = 0;
  std::set<caf::actor_addr> holders;
  std::deque<caf::actor> waiting;
  MailboxSampler mailbox;
  static inline const char* name = "snapshot-encoders";
};

// Messages: (acquire_atom) from a stream, answered later with (granted_atom);
// (release_atom) from a holder. `mailbox_depth` (may be null) receives its sampled mailbox depth.
caf::behavior snapshot_encoders(caf::stateful_actor<SnapshotEncodersState>* self, std::size_t permits,
                                prometheus::Gauge* mailbox_depth);

}  // namespace kvrelay
