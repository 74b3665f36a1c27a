#pragma once
// The snapshot-encoding permits shared by every pool stream (--snapshot-encoders): a stream
// holds one from its grant (before it attaches to its publisher) until its last snapshot chunk
// is handed on. Requests wait in
// arrival order; a stream that ends while waiting or holding (cancel, lag, retirement,
// progress timeout) gives its place back, because the pool watches every requester.
#include <caf/all.hpp>

#include <deque>
#include <set>

#include "actors/mailbox_sampler.hpp"
#include "actors/messages.hpp"

namespace kvrelay {

// The permits, as pool streams see them. A stream asks with its own handle, is answered
// (granted_atom) when its turn comes, and gives the permit back with release_atom; a stream
// that ends while waiting or holding gives its place back all the same.
using SnapshotEncodersActor = caf::typed_actor<caf::reacts_to<atoms::acquire_atom, PermitHolderActor>,
                                               caf::reacts_to<atoms::release_atom, PermitHolderActor>,
                                               caf::reacts_to<atoms::sample_atom>>;  // its own mailbox sampling timer

struct SnapshotEncodersState {
  std::size_t available = 0;
  std::set<caf::actor_addr> holders;
  std::deque<PermitHolderActor> waiting;
  MailboxSampler mailbox;
  static inline const char* name = "snapshot-encoders";
};

// `mailbox_depth` (may be null) receives its sampled mailbox depth.
SnapshotEncodersActor::behavior_type snapshot_encoders(
    SnapshotEncodersActor::stateful_pointer<SnapshotEncodersState> self, std::size_t permits,
    prometheus::Gauge* mailbox_depth);

}  // namespace kvrelay
