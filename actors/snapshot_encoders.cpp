#include "actors/snapshot_encoders.hpp"

#include <algorithm>

#include "actors/crash_report.hpp"

namespace kvrelay {

namespace {

using Self = SnapshotEncodersActor::stateful_pointer<SnapshotEncodersState>;

void grant_waiting(Self self) {
  auto& state = self->state;
  while (state.available > 0 && !state.waiting.empty()) {
    PermitHolderActor next = std::move(state.waiting.front());
    state.waiting.pop_front();
    --state.available;
    state.holders.insert(next.address());
    self->send(next, atoms::granted_atom_v);
  }
}

void give_back(Self self, const caf::actor_addr& stream) {
  auto& state = self->state;
  if (state.holders.erase(stream) > 0) {
    ++state.available;
    grant_waiting(self);
    return;
  }
  std::erase_if(state.waiting, [&](const PermitHolderActor& a) { return a.address() == stream; });
}

}  // namespace

SnapshotEncodersActor::behavior_type snapshot_encoders(Self self, std::size_t permits,
                                                       prometheus::Gauge* mailbox_depth) {
  self->state.available = permits;
  self->state.mailbox.start(self, mailbox_depth);
  report_crashes(self, "snapshot encoders");
  self->set_down_handler([self](const caf::down_msg& down) { give_back(self, down.source); });
  return {
      [=](atoms::acquire_atom, const PermitHolderActor& stream) {
        self->monitor(stream);
        self->state.waiting.push_back(stream);
        grant_waiting(self);
      },
      [=](atoms::release_atom, const PermitHolderActor& stream) {
        self->demonitor(stream.address());
        give_back(self, stream.address());
      },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
