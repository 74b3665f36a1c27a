#pragma once
// What membership says of itself: which sources of an endpoint are active, the conflicts an
// endpoint is reported with, and the GetState answer (docs/protocol/ingest.md).
#include <cstdint>
#include <string>
#include <vector>

#include "actors/membership.hpp"

namespace kvrelay::membership_report {

// The sources of the endpoint's workers with a valid card that are active: a push source
// while it is declared, an engine (zmq) source while it is connected
// (docs/protocol/pools.md#materialization, condition 3).
std::uint32_t active_sources(const MembershipState& state, const EndpointKey& endpoint);

// Every conflict the endpoint is reported with, sorted and unique (docs/protocol/pools.md#conflicts).
std::vector<std::string> conflict_texts(const MembershipState& state, const EndpointKey& endpoint);

// Asks every engine source for its last seq, then every pool publisher for its figures (each
// round bounded by kStateRoundDeadline), and answers once all of them have answered.
caf::typed_response_promise<ingest_v1::RelayState> get_state(MembershipActor::stateful_pointer<MembershipState> self);

}  // namespace kvrelay::membership_report
