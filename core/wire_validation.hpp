#pragma once
// Pure validation of every dynamo.kvrelay.v1 wire message (docs/protocol/rpcs.md#subscriber-id,
// docs/protocol/rpcs.md#filter-frames, docs/protocol/rpcs.md#message-validation and the validator
// sections after it, docs/protocol/pools.md#producer-key).
//
// Every check returns the FIRST fault it finds, in the order the docs list the checks, as a typed
// Error. Its class tells the two reactions apart:
//   * unsupported — a value this reader does not understand (a future identity version, enum
//     value, oneof alternative or CKF shape). Quarantine the containing entry; never fall back to
//     a default meaning. On a request the server answers UNSUPPORTED_FEATURE.
//   * malformed — everything else (docs/protocol/rpcs.md#unsupported-values is the complete
//     list of unsupported faults).
// `Error::field` is the dotted path of the offending field ("expected_producer.ckf_format.seed",
// "pool_roles[1]"), so the gateway can answer INVALID_ARGUMENT naming the field.
//
// Message-level checks (`check_request`, `check_response`) cover what makes a whole message
// unusable (envelope, missing top-level parts, duplicate or unidentifiable keys). Entries of a
// complete snapshot/window are validated one by one with the entry checks, so one bad entry
// quarantines only itself.
#include <compare>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

#include "core/ckf.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::wire {

namespace v1 = ::dynamo::kvrelay::v1;

// ---- contract constants (docs/protocol/rpcs.md#constants) ----

inline constexpr std::uint32_t kContractMarker = 0x4B565231;  // "KVR1"
inline constexpr std::uint32_t kProtocolVersion = 1;
inline constexpr std::uint32_t kPoolIdentityVersion = 1;
inline constexpr std::size_t kMaxSubscriberIdBytes = 128;
inline constexpr std::size_t kDigestBytes = 16;
// The only CKF shape v1 can execute is the one core/ckf implements.
inline constexpr std::uint32_t kCkfFormatVersion = ckf::kFormatVersion;
inline constexpr std::uint32_t kCkfFingerprintBits = ckf::kFingerprintBits;
inline constexpr std::uint32_t kCkfSlotsPerBucket = ckf::kSlotsPerBucket;
inline constexpr std::uint64_t kMaxBucketCount = ckf::kMaxBucketCount;  // 2^24

// ---- errors ----

enum class ErrorClass { kMalformed, kUnsupported };

enum class ErrorCode {
  // envelope (docs/protocol/rpcs.md#envelope)
  kContractMarker,
  kProtocolVersion,
  // shared
  kMissingField,  // a required sub-message is absent
  kInvalidText,   // empty, surrounded by Unicode whitespace, or not UTF-8
  // subscriber_id (docs/protocol/rpcs.md#subscriber-id)
  kSubscriberIdEmpty,
  kSubscriberIdTooLong,
  kSubscriberIdControlCharacter,
  kSubscriberIdInvalidUtf8,
  // pool id, CKF format, producer identity (docs/protocol/rpcs.md#validate-identity)
  kIdentityVersion,  // 0 malformed, other values unsupported
  kDigestLength,
  kIdentitySource,  // UNSPECIFIED malformed, unknown values unsupported
  kLayoutGeneration,
  kCkfFormatZeroField,
  kCkfFormat,                 // format_version/fingerprint_bits/slots_per_bucket triple: unsupported
  kBucketCountOverflow,       // does not fit size_t: unsupported (unreachable on 64-bit targets)
  kBucketCountTooLarge,       // > 2^24: unsupported
  kBucketCountNotPowerOfTwo,  // or < 2
  // descriptor pieces (docs/protocol/rpcs.md#validate-descriptor)
  kMissingModelTarget,  // target message present, no known oneof alternative: unsupported
  kDuplicateAlias,
  kBlockSize,
  kHashFormat,  // UNSPECIFIED malformed, unknown values unsupported
  kWorkerRole,  // UNSPECIFIED malformed, unknown values unsupported
  kEmptyRoles,
  kDuplicateRole,
  // topology entry (docs/protocol/rpcs.md#validate-topology-entry)
  kReadinessState,         // unknown value: unsupported (0 = UNKNOWN is valid)
  kDuplicateEndpointRole,  // a duplicate_role_endpoints role other than PREFILL/DECODE
  kNoMembers,
  kMemberNamespace,
  kDuplicateMember,
  kDuplicateAdapter,
  // message-level keys
  kDuplicatePool,      // catalog: two descriptors with one PoolId
  kDuplicateEntry,     // readiness: two entries with one (namespace, canonical_model_id)
  kDuplicateProducer,  // load windows: two entries with one producer key
  kDuplicateModel,     // serving load: two models with one (namespace, canonical_model_id)
  kDuplicateServingPool,
  // filter frames (docs/protocol/rpcs.md#filter-frames)
  kFilterUpdateKind,
  kFilterPayload,
  kFilterSequence,
  // serving load (docs/protocol/rpcs.md#validate-load)
  kDataStatus,     // UNSPECIFIED malformed, unknown values unsupported
  kLoadViewField,  // an optional gauge set/unset against the presence rules
  // a request that does not parse as its message (unparsable_request)
  kUnparsable,
};

std::string_view to_string(ErrorCode code);
std::string_view to_string(ErrorClass error_class);

struct Error {
  ErrorCode code;
  ErrorClass error_class;
  std::string field;    // dotted path of the offending field
  std::string message;  // diagnostic only, not stable

  bool unsupported() const { return error_class == ErrorClass::kUnsupported; }
};

// nullopt = valid. Reads as `if (auto error = check_x(...)) return reject(*error);`.
using Status = std::optional<Error>;

// The RelayErrorReason the server sends for a rejected request
// (docs/protocol/errors.md#reason-table, docs/protocol/rpcs.md#request-validation): a wrong marker
// is a contract mismatch, an unsupported value UNSUPPORTED_FEATURE, anything else INVALID_REQUEST.
v1::RelayErrorReason request_error_reason(const Error& error);

// Why a request that does not parse as a `descriptor` message is refused, judged in the order of
// the checks it could not reach (docs/protocol/decisions.md#d46): a contract_marker that is not
// kContractMarker first (absent reads as 0), then its subscriber_id as check_subscriber_id
// judges it (length first: not UTF-8 is what makes a parse fail), else the bytes as a whole.
// Reads the bytes once, keeping only the subscriber_id.
Error unparsable_request(std::string_view bytes, const google::protobuf::Descriptor& descriptor);

// ---- envelope (docs/protocol/rpcs.md#envelope) and requests ----

Status check_request_marker(std::uint32_t contract_marker);
// Marker first, then version.
Status check_envelope(std::uint32_t contract_marker, std::uint32_t protocol_version);
// docs/protocol/rpcs.md#subscriber-id, in order: empty; > 128 UTF-8 bytes; invalid UTF-8; any Cc
// control character.
Status check_subscriber_id(std::string_view id);

// docs/protocol/rpcs.md#request-validation: marker, then subscriber_id, then (SubscribeKvPool)
// expected_producer present and valid.
Status check_request(const v1::RelayInfoRequest& request);
Status check_request(const v1::WatchKvPoolCatalogRequest& request);
Status check_request(const v1::SubscribeKvPoolRequest& request);
Status check_request(const v1::SubscribeServingReadinessRequest& request);
Status check_request(const v1::SubscribeKvPoolLoadRequest& request);
Status check_request(const v1::SubscribeServingLoadRequest& request);

// ---- identities (docs/protocol/rpcs.md#validate-identity) ----
// `field` is always the path of the checked message itself ("expected_producer",
// "snapshot.pools[3]"); error paths extend it. Entry checks default to "" (the entry is the root).

Status check_pool_id(const v1::KvPoolId& pool_id, std::string_view field);
// Zero fields, then the format triple, then range, then power of two.
Status check_ckf_format(const v1::CkfFormat& format, std::string_view field);
// pool_id present + valid, layout_generation != 0, ckf_format present + valid.
Status check_producer_identity(const v1::ProducerIdentity& identity, std::string_view field);

// ---- descriptor pieces (docs/protocol/rpcs.md#validate-descriptor) ----

Status check_endpoint_id(const v1::DynamoEndpointId& endpoint, std::string_view field);
Status check_model_registration(const v1::ModelRegistration& registration, std::string_view field);
Status check_query_semantics(const v1::KvQuerySemantics& semantics, std::string_view field);
// Pool and member roles: non-empty, known, non-UNSPECIFIED, no repeats.
Status check_worker_roles(const google::protobuf::RepeatedField<int>& roles, std::string_view field);
// One catalog entry. An empty `registrations` list is accepted here
// (docs/protocol/rpcs.md#validate-descriptor).
Status check_pool_descriptor(const v1::KvPoolDescriptor& descriptor, std::string_view field = "");

// ---- readiness (docs/protocol/rpcs.md#validate-topology-entry) and load entries ----

Status check_topology_entry(const v1::TopologyEntry& entry, std::string_view field = "");
// Upstream has no load-entry validator (docs/protocol/rpcs.md#validate-load); the producer key is
// what a consumer needs.
Status check_load_entry(const v1::KvPoolLoadEntry& entry, std::string_view field = "");
Status check_pool_serving_load(const v1::PoolServingLoad& pool, std::string_view field = "");
Status check_model_serving_load(const v1::ModelServingLoad& model, std::string_view field = "");

// ---- responses: envelope, relay present, then message-level keys ----

Status check_response(const v1::RelayInfo& info);
// Snapshot present; every pool identifiable by a valid PoolId, none twice. A pool whose PoolId is
// unsupported is skipped here: its entry check quarantines it.
Status check_response(const v1::KvPoolCatalogUpdate& update);
// The whole frame: producer valid, kind known, payload and sequences as
// docs/protocol/rpcs.md#filter-frames shapes them.
Status check_response(const v1::FilterUpdate& update);
// Entry keys valid text and unique.
Status check_response(const v1::ServingReadinessUpdate& update);
// Every producer present; supported producers unique (unsupported ones are skipped here).
Status check_response(const v1::KvPoolLoadUpdate& update);
Status check_response(const v1::ServingLoadUpdate& update);

// ---- frozen producer key (docs/protocol/pools.md#producer-key) ----

struct DigestKey {
  std::string digest;
  std::int32_t source = 0;
  friend auto operator<=>(const DigestKey&, const DigestKey&) = default;
};

// The stable pool identity (no generation): what the catalog and topology members key on.
struct PoolKey {
  std::uint32_t identity_version = 0;
  DigestKey cache_semantics;
  DigestKey routing_scope;
  std::uint64_t dc_id = 0;
  friend auto operator<=>(const PoolKey&, const PoolKey&) = default;
};

struct CkfFormatKey {
  std::uint32_t format_version = 0;
  std::uint64_t seed = 0;
  std::uint64_t bucket_count = 0;
  std::uint32_t fingerprint_bits = 0;
  std::uint32_t slots_per_bucket = 0;
  friend auto operator<=>(const CkfFormatKey&, const CkfFormatKey&) = default;
};

// Two identities are the same producer iff every field here is equal. Descriptor metadata
// (endpoint, registrations, roles, query semantics) never takes part.
struct ProducerKey {
  PoolKey pool;
  std::uint64_t producer_incarnation = 0;
  std::uint64_t layout_generation = 0;
  CkfFormatKey ckf_format;
  friend auto operator<=>(const ProducerKey&, const ProducerKey&) = default;
};

// Only call on validated messages: absent sub-messages read as their defaults.
PoolKey pool_key(const v1::KvPoolId& pool_id);
ProducerKey producer_key(const v1::ProducerIdentity& identity);
// Validates first (check_producer_identity), then builds the key.
std::expected<ProducerKey, Error> try_producer_key(const v1::ProducerIdentity& identity, std::string_view field);

}  // namespace kvrelay::wire
