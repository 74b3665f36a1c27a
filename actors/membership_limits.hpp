#pragma once
// The counts and bytes membership is held to (docs/protocol/limits.md#count-limits): each check
// reads what membership holds and says why the call would pass a limit, or nothing. Membership
// then refuses the call and changes nothing.
#include <cstdint>
#include <optional>
#include <string>

#include "actors/membership.hpp"

namespace kvrelay::membership_limits {

struct CountRefusal {
  metrics::IngestLimit limit;
  std::string message;
};

// docs/protocol/limits.md#count-limits: what membership would hold after this PutWorker,
// against its limits. A worker that replaces itself only counts what it changes.
std::optional<CountRefusal> count_refusal(const MembershipState& state, const EndpointKey& endpoint,
                                          const ingest_v1::PutWorkerRequest& request);

// The endpoint's membership::catalog_bytes once `spec` replaces its worker; its cards are left
// as they were (the spec is swapped in and out, so that no other card is copied).
std::size_t catalog_bytes_with(MembershipState& state, const EndpointKey& endpoint, const ingest_v1::WorkerSpec& spec);

// docs/protocol/decisions.md#d47: the names every catalog update would carry once the endpoint
// takes `endpoint_bytes`, against half of --max-message-bytes.
std::optional<CountRefusal> catalog_refusal(const MembershipState& state, const EndpointKey& endpoint,
                                            std::uint64_t worker_id, std::size_t endpoint_bytes);

// A live set names at most as many workers as an endpoint may have; the sets SetAvailability
// keeps for endpoints with no worker yet (docs/protocol/readiness.md#availability) are bounded
// as endpoints with workers are, apart from them.
std::optional<CountRefusal> availability_refusal(const MembershipState& state, const EndpointKey& endpoint,
                                                 std::size_t live_workers);

}  // namespace kvrelay::membership_limits
