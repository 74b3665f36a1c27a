#include "actors/membership_report.hpp"

#include <algorithm>
#include <memory>
#include <set>

#include "core/ingest_validation.hpp"

namespace kvrelay::membership_report {

namespace {

using Self = MembershipActor::stateful_pointer<MembershipState>;

// What membership knows of each declared source; an engine source's seq comes from its actor.
void fill_sources(const MembershipState& state, const EndpointKey& endpoint, ingest_v1::EndpointState& out) {
  const auto cards = state.workers.find(endpoint);
  if (cards == state.workers.end()) return;
  for (const auto& [worker_id, spec] : cards->second) {
    for (const auto& source : spec.kv_sources()) {
      const SourceId id{endpoint, worker_id, source.dp_rank()};
      auto* s = out.add_sources();
      s->set_worker_id(worker_id);
      s->set_dp_rank(source.dp_rank());
      s->set_transport(source.has_zmq() ? "zmq" : "push");
      s->set_connected(source.has_push() || state.feeds.connected(id));
      if (source.has_zmq()) s->set_endpoint(source.zmq().endpoint());
      if (const auto lane = state.lanes.find(id); lane != state.lanes.end()) {
        const LaneReport report = lane->second->report();
        s->set_resets(report.resets);
        if (source.has_push() && report.last_sequence) {
          s->set_has_last_sequence(true);
          s->set_last_sequence(*report.last_sequence);
        }
      }
    }
  }
}

void fill_endpoints(const MembershipState& state, ingest_v1::RelayState& out) {
  std::set<EndpointKey> endpoints;
  for (const auto& [endpoint, cards] : state.workers) endpoints.insert(endpoint);
  for (const auto& [endpoint, live] : state.availability) endpoints.insert(endpoint);
  for (const EndpointKey& endpoint : endpoints) {
    auto* e = out.add_endpoints();
    e->mutable_endpoint()->set_namespace_(endpoint.ns);
    e->mutable_endpoint()->set_component(endpoint.component);
    e->mutable_endpoint()->set_endpoint(endpoint.endpoint);
    if (const auto cards = state.workers.find(endpoint); cards != state.workers.end()) {
      for (const auto& [worker_id, spec] : cards->second) e->add_worker_ids(worker_id);
    }
    if (const auto live = state.availability.find(endpoint); live != state.availability.end()) {
      e->set_availability_known(true);
      for (std::uint64_t id : live->second) e->add_live_worker_ids(id);
    }
    for (auto& text : conflict_texts(state, endpoint)) e->add_conflicts(std::move(text));
    e->set_pool_materialized(state.pools.contains(endpoint));
    fill_sources(state, endpoint, *e);
  }
}

// Each pool's figures come from its publisher, asked once every engine source has answered:
// a batch a source handed on before its answer is then ahead of the request in its publisher's
// mailbox, so a pool's figures include every batch up to its sources' last_sequence. The
// answer waits for all of them (a publisher that cannot answer leaves its slot with the
// endpoint only).
void ask_publishers(Self self, caf::typed_response_promise<ingest_v1::RelayState> promise,
                    std::shared_ptr<ingest_v1::RelayState> response) {
  auto& state = self->state;
  if (state.pools.empty()) {
    promise.deliver(std::move(*response));
    return;
  }
  auto remaining = std::make_shared<std::size_t>(state.pools.size());
  auto one_done = [promise, response, remaining]() mutable {
    if (--*remaining == 0) promise.deliver(std::move(*response));
  };
  for (const auto& [endpoint, pool] : state.pools) {
    ingest_v1::PoolState* slot = response->add_pools();
    slot->mutable_serving_endpoint()->set_namespace_(endpoint.ns);
    slot->mutable_serving_endpoint()->set_component(endpoint.component);
    slot->mutable_serving_endpoint()->set_endpoint(endpoint.endpoint);
    const std::uint32_t sources = active_sources(state, endpoint);
    // A declared capacity the budget refused, while the layout is still smaller than it wanted.
    const std::string declared_refusal =
        pool.declared_refusal && pool.declared_refusal->bucket_count > pool.producer.ckf_format().bucket_count()
            ? pool.declared_refusal->reason
            : std::string();
    self->request(pool.publisher, kStateRoundDeadline, atoms::pool_state_atom_v)
        .then(
            [=](const PoolStateReport& report) mutable {
              const auto serving = slot->serving_endpoint();
              *slot = report.state;
              *slot->mutable_serving_endpoint() = serving;
              slot->set_active_sources(sources);
              if (slot->growth_refusal().empty()) slot->set_growth_refusal(declared_refusal);
              one_done();
            },
            [=](const caf::error&) mutable { one_done(); });
  }
}

}  // namespace

std::uint32_t active_sources(const MembershipState& state, const EndpointKey& endpoint) {
  const auto cards = state.workers.find(endpoint);
  const auto projected = state.projection.find(endpoint);
  if (cards == state.workers.end() || projected == state.projection.end()) return 0;
  std::uint32_t count = 0;
  for (const auto& [worker_id, spec] : cards->second) {
    if (!projected->second.worker_topology.contains(worker_id)) continue;
    for (const auto& source : spec.kv_sources()) {
      if (source.has_push() || state.feeds.connected({endpoint, worker_id, source.dp_rank()})) ++count;
    }
  }
  return count;
}

std::vector<std::string> conflict_texts(const MembershipState& state, const EndpointKey& endpoint) {
  std::vector<std::string> texts;
  if (const auto m = state.projection.find(endpoint); m != state.projection.end()) {
    for (const Conflict& c : m->second.conflicts) texts.push_back(c.message);
  }
  if (const auto shared = state.shared_pools.find(endpoint); shared != state.shared_pools.end()) {
    texts.push_back(shared->second);
  }
  if (const auto refusal = state.over_budget.find(endpoint); refusal != state.over_budget.end()) {
    texts.push_back(refusal->second);
  }
  if (const auto hold = state.rebuild_holds.find(endpoint); hold != state.rebuild_holds.end() && hold->second.until) {
    texts.push_back(hold->second.reason);
  }
  std::ranges::sort(texts);  // sorted and unique as a whole, as pools.md#conflicts says
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  return texts;
}

caf::typed_response_promise<ingest_v1::RelayState> get_state(Self self) {
  auto& state = self->state;
  auto promise = self->make_response_promise<ingest_v1::RelayState>();
  auto response = std::make_shared<ingest_v1::RelayState>();
  fill_endpoints(state, *response);
  std::vector<std::pair<ingest_v1::SourceState*, EngineSourceActor>> engine_sources;
  const auto actors = state.feeds.sources();
  for (auto& e : *response->mutable_endpoints()) {
    const EndpointKey endpoint = ingest_check::endpoint_key(e.endpoint());
    for (auto& source : *e.mutable_sources()) {
      const auto actor = actors.find({endpoint, source.worker_id(), source.dp_rank()});
      if (source.transport() == "zmq" && actor != actors.end()) engine_sources.emplace_back(&source, actor->second);
    }
  }
  if (engine_sources.empty()) {
    ask_publishers(self, promise, response);
    return promise;
  }
  auto remaining = std::make_shared<std::size_t>(engine_sources.size());
  auto one_done = [self, promise, response, remaining]() mutable {
    if (--*remaining == 0) ask_publishers(self, promise, response);
  };
  for (const auto& [slot, actor] : engine_sources) {
    self->request(actor, kStateRoundDeadline, atoms::get_state_atom_v)
        .then(
            [=](const ingest_v1::SourceState& reported) mutable {
              slot->set_has_last_sequence(reported.has_last_sequence());
              slot->set_last_sequence(reported.last_sequence());
              one_done();
            },
            [=](const caf::error&) mutable { one_done(); });
  }
  return promise;
}

}  // namespace kvrelay::membership_report
