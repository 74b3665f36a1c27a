#pragma once
// What a consumer does when a stream ends: the contract's table of kv-relay-error-reason
// reactions, with the status code as the fallback when the reason is absent or unknown
// (docs/protocol/errors.md#consumer-reactions). Pure: the connection code executes it.
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <string_view>

#include "client/lib/fault.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::client {

enum class Plane { kCatalog, kPool, kReadiness, kLoad, kServingLoad };

enum class Retry {
  kBackoff,           // reopen after a bounded, jittered exponential backoff
  kVerifyRelay,       // re-check GetRelayInfo's envelope and identity, then reopen with backoff
  kAwaitNewProducer,  // pool streams: only once the catalog advertises a different producer
  kAwaitNewCatalog,   // pool streams: only once a newer catalog revision still advertises it
  kNever,             // deployment skew or a bad request: retrying unchanged cannot help
};

struct Reaction {
  Retry retry = Retry::kBackoff;
  bool quarantine_pool = false;  // the pool's semantics are unsupported by this relay
  bool stop_relay = false;       // contract mismatch: stop every stream of this relay
};

// The kv-relay-error-reason trailer of a finished call, as sent; empty when absent.
std::string reason_trailer(const grpc::ClientContext& context);

// The reason named by the trailer value, or nullopt for absent, unknown and UNSPECIFIED.
std::optional<dynamo::kvrelay::v1::RelayErrorReason> parse_reason(std::string_view trailer);

// `status.ok()` is an unexpected clean end of stream. State is always invalidated by the caller.
Reaction react(Plane plane, const grpc::Status& status, std::optional<dynamo::kvrelay::v1::RelayErrorReason> reason);

// A stream this consumer ended on a local fault reopens with backoff, unless the message was
// another contract's (a wrong marker or protocol_version): that is a contract mismatch
// (docs/protocol/errors.md#contract-mismatch).
Reaction react_to_fault(const Fault& fault);

}  // namespace kvrelay::client
