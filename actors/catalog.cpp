#include "actors/catalog.hpp"

#include "actors/crash_report.hpp"

namespace kvrelay {

namespace {

using Self = CatalogActor::stateful_pointer<CatalogState>;

CatalogUpdatePtr make_update(const v1::RelayIdentity& relay, std::uint64_t revision, const CatalogView& view) {
  v1::KvPoolCatalogUpdate update;
  update.set_protocol_version(wire::kProtocolVersion);
  *update.mutable_relay() = relay;
  update.set_revision(revision);
  auto* snapshot = update.mutable_snapshot();  // always present, even when empty
  for (const auto& [key, entry] : view.pools) *snapshot->add_pools() = entry.descriptor;
  update.set_contract_marker(wire::kContractMarker);
  return std::make_shared<const CatalogBroadcast>(std::move(update));
}

bool same_pools(const CatalogView& a, const CatalogView& b) {
  if (a.pools.size() != b.pools.size()) return false;
  for (auto ia = a.pools.begin(), ib = b.pools.begin(); ia != a.pools.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.publisher != ib->second.publisher ||
        ia->second.descriptor.SerializeAsString() != ib->second.descriptor.SerializeAsString()) {
      return false;
    }
  }
  return true;
}

void replace_pools(Self self, std::vector<CatalogEntry> entries) {
  auto& state = self->state;
  auto view = std::make_shared<CatalogView>();
  for (CatalogEntry& entry : entries) {
    const auto key = wire::pool_key(entry.descriptor.producer().pool_id());
    view->pools.emplace(key, std::move(entry));
  }
  const auto current = state.registry->current();
  if (same_pools(*current, *view)) return;
  view->revision = current->revision + 1;
  state.current = make_update(state.relay, view->revision, *view);
  state.registry->publish(std::move(view));
  state.streams.broadcast(self, state.current);
}

}  // namespace

CatalogActor::behavior_type catalog(Self self, std::shared_ptr<CatalogRegistry> registry, v1::RelayIdentity relay,
                                    prometheus::Gauge* mailbox_depth) {
  auto& state = self->state;
  state.mailbox.start(self, mailbox_depth);
  report_crashes(self, "catalog");
  state.registry = std::move(registry);
  state.relay = std::move(relay);
  state.current = make_update(state.relay, 0, *state.registry->current());
  self->set_down_handler([self](const caf::down_msg& down) { self->state.streams.remove(down.source); });
  return {
      [=](atoms::catalog_atom, std::vector<CatalogEntry>& entries) { replace_pools(self, std::move(entries)); },
      [=](atoms::subscribe_atom, const UpdateStreamActor<CatalogBroadcast>& stream) {
        if (self->state.streams.add(self, stream)) self->send(stream, atoms::update_atom_v, self->state.current);
      },
      [=](atoms::shutdown_atom, const RpcStatus& status) { self->state.streams.end_all(self, status); },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
