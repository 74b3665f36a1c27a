#include "actors/topology_projector.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "actors/crash_report.hpp"
#include "core/enum_names.hpp"
#include "core/wire_validation.hpp"

namespace kvrelay {

namespace {

using Self = TopologyProjectorActor::stateful_pointer<TopologyProjectorState>;

std::string serialized(const std::vector<v1::TopologyEntry>& entries) {
  std::string bytes;
  for (const auto& entry : entries) bytes += entry.SerializeAsString() + '\n';
  return bytes;
}

ReadinessUpdatePtr make_update(const v1::RelayIdentity& relay, std::uint64_t revision,
                               std::vector<v1::TopologyEntry> entries) {
  v1::ServingReadinessUpdate update;
  update.set_protocol_version(wire::kProtocolVersion);
  *update.mutable_relay() = relay;
  update.set_revision(revision);
  for (auto& entry : entries) *update.add_entries() = std::move(entry);
  update.set_contract_marker(wire::kContractMarker);
  return std::make_shared<const ReadinessBroadcast>(std::move(update));
}

// kv_relay_readiness_entries{state}: the entries of the revision being published.
void count_entries(Self self, const std::vector<v1::TopologyEntry>& entries) {
  if (self->state.metrics == nullptr) return;
  std::size_t ready = 0, unavailable = 0, unknown = 0;
  for (const v1::TopologyEntry& entry : entries) {
    if (entry.state() == v1::SERVING_READINESS_STATE_READY) {
      ++ready;
    } else if (entry.state() == v1::SERVING_READINESS_STATE_UNAVAILABLE) {
      ++unavailable;
    } else {
      ++unknown;
    }
  }
  self->state.metrics->set_readiness_entries(ready, unavailable, unknown);
}

// One line per (namespace, model) whose readiness changed from the `published` revision's,
// with what it misses: the operator's record of when routers in other data centers started or
// stopped sending it traffic.
void log_transitions(const v1::ServingReadinessUpdate& published, const std::vector<v1::TopologyEntry>& entries) {
  using Key = std::pair<std::string, std::string>;
  std::map<Key, v1::ServingReadinessState> before;
  for (const v1::TopologyEntry& entry : published.entries()) {
    before[{entry.namespace_(), entry.canonical_model_id()}] = entry.state();
  }
  for (const v1::TopologyEntry& entry : entries) {
    std::optional<v1::ServingReadinessState> was;
    if (const auto found = before.find({entry.namespace_(), entry.canonical_model_id()}); found != before.end()) {
      was = found->second;
      before.erase(found);  // what is left once every entry is seen is gone
    }
    if (was == entry.state()) continue;
    std::vector<std::string> missing;
    for (const int role : entry.missing_roles()) missing.push_back(role_name(role));
    spdlog::info("readiness: namespace={} model={}: {} -> {}{}{}", entry.namespace_(), entry.canonical_model_id(),
                 was ? state_name(*was) : std::string("(new)"), state_name(entry.state()),
                 missing.empty() ? "" : ", missing ", fmt::join(missing, ","));
  }
  for (const auto& [key, gone] : before) spdlog::info("readiness: namespace={} model={}: gone", key.first, key.second);
}

void reproject(Self self, const std::vector<readiness::EndpointFacts>& facts) {
  auto& state = self->state;
  std::vector<v1::TopologyEntry> entries = readiness::project(facts);
  std::string bytes = serialized(entries);
  if (bytes == state.published_entries) return;
  state.published_entries = std::move(bytes);
  count_entries(self, entries);
  log_transitions(state.current->message(), entries);
  const std::uint64_t revision = state.current->message().revision() + 1;
  state.current = make_update(state.relay, revision, std::move(entries));
  state.streams.broadcast(self, state.current);
}

}  // namespace

TopologyProjectorActor::behavior_type topology_projector(Self self, v1::RelayIdentity relay,
                                                         metrics::RelayMetrics* metrics) {
  auto& state = self->state;
  state.relay = std::move(relay);
  state.metrics = metrics;
  state.mailbox.start(self, metrics::mailbox_gauge(metrics, metrics::ActorKind::kTopologyProjector));
  report_crashes(self, "topology projector");
  state.current = make_update(state.relay, 1, {});  // the projection starts at revision 1
  self->set_down_handler([self](const caf::down_msg& down) { self->state.streams.remove(down.source); });
  return {
      [=](atoms::facts_atom, const std::vector<readiness::EndpointFacts>& facts) { reproject(self, facts); },
      [=](atoms::subscribe_atom, const UpdateStreamActor<ReadinessBroadcast>& stream) {
        if (self->state.streams.add(self, stream)) self->send(stream, atoms::update_atom_v, self->state.current);
      },
      [=](atoms::shutdown_atom, const RpcStatus& status) { self->state.streams.end_all(self, status); },
      [=](atoms::sample_atom) { self->state.mailbox.sample(self); },
  };
}

}  // namespace kvrelay
