#include "core/wire_validation.hpp"

#include <bit>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "core/unicode_text.hpp"

namespace kvrelay::wire {
namespace {

using RoleList = google::protobuf::RepeatedField<int>;

// ---- error construction ----

Error malformed(ErrorCode code, std::string field, std::string message) {
  return {code, ErrorClass::kMalformed, std::move(field), std::move(message)};
}

Error unsupported(ErrorCode code, std::string field, std::string message) {
  return {code, ErrorClass::kUnsupported, std::move(field), std::move(message)};
}

Error missing(std::string field) {
  std::string message = fmt::format("{} is missing", field);
  return malformed(ErrorCode::kMissingField, std::move(field), std::move(message));
}

// For open proto3 enums: the explicit UNSPECIFIED (0) is a producer bug (malformed), while any
// other value we cannot name may be a newer writer's addition (unsupported: quarantine it).
Error bad_enum_value(ErrorCode code, std::string field, int value) {
  if (value == 0) {
    std::string message = fmt::format("{} is unspecified", field);
    return malformed(code, std::move(field), std::move(message));
  }
  std::string message = fmt::format("{} has unknown value {}", field, value);
  return unsupported(code, std::move(field), std::move(message));
}

// ---- field paths ----

std::string path(std::string_view parent, std::string_view child) {
  if (parent.empty()) return std::string(child);
  return fmt::format("{}.{}", parent, child);
}

std::string element(std::string_view list, int index) { return fmt::format("{}[{}]", list, index); }

Status check_text(std::string_view text, std::string field) {
  if (text::is_valid_text(text)) return std::nullopt;
  std::string message = fmt::format("{} must be non-empty UTF-8 without surrounding whitespace", field);
  return malformed(ErrorCode::kInvalidText, std::move(field), std::move(message));
}

// ---- identity pieces ----

Status check_digest(const v1::DigestIdentity* identity, const std::string& field) {
  if (identity == nullptr) return missing(field);
  if (identity->digest().size() != kDigestBytes) {
    return malformed(
        ErrorCode::kDigestLength, path(field, "digest"),
        fmt::format("{}.digest has {} bytes, expected {}", field, identity->digest().size(), kDigestBytes));
  }
  const int source = identity->source();
  if (source == v1::IDENTITY_SOURCE_UNSPECIFIED || !v1::IdentitySource_IsValid(source)) {
    return bad_enum_value(ErrorCode::kIdentitySource, path(field, "source"), source);
  }
  return std::nullopt;
}

Status check_identity_version(std::uint32_t version, std::string field) {
  if (version == kPoolIdentityVersion) return std::nullopt;
  // 0 is what an omitted field decodes to: a producer bug, not a future version.
  if (version == 0) {
    return malformed(ErrorCode::kIdentityVersion, std::move(field), "pool identity version is 0");
  }
  std::string message = fmt::format("unsupported pool identity version {}", version);
  return unsupported(ErrorCode::kIdentityVersion, std::move(field), std::move(message));
}

Status check_ckf_zero_fields(const v1::CkfFormat& format, std::string_view field) {
  const std::pair<std::string_view, std::uint64_t> fields[] = {
      {"format_version", format.format_version()},
      {"bucket_count", format.bucket_count()},
      {"fingerprint_bits", format.fingerprint_bits()},
      {"slots_per_bucket", format.slots_per_bucket()},
  };
  for (const auto& [name, value] : fields) {
    if (value == 0) {
      return malformed(ErrorCode::kCkfFormatZeroField, path(field, name), fmt::format("CKF format has zero {}", name));
    }
  }
  return std::nullopt;
}

// The triple names a filter layout; any other layout is one this reader cannot execute.
Status check_ckf_triple(const v1::CkfFormat& format, std::string_view field) {
  std::string_view offending;
  if (format.format_version() != kCkfFormatVersion)
    offending = "format_version";
  else if (format.fingerprint_bits() != kCkfFingerprintBits)
    offending = "fingerprint_bits";
  else if (format.slots_per_bucket() != kCkfSlotsPerBucket)
    offending = "slots_per_bucket";
  else
    return std::nullopt;
  return unsupported(ErrorCode::kCkfFormat, path(field, offending),
                     fmt::format("unsupported CKF format: version={}, fingerprint_bits={}, "
                                 "slots_per_bucket={}",
                                 format.format_version(), format.fingerprint_bits(), format.slots_per_bucket()));
}

Status check_bucket_count(std::uint64_t bucket_count, std::string_view parent) {
  std::string field = path(parent, "bucket_count");
  if (!std::in_range<std::size_t>(bucket_count)) {
    return unsupported(ErrorCode::kBucketCountOverflow, std::move(field),
                       fmt::format("CKF bucket count {} does not fit this platform", bucket_count));
  }
  if (bucket_count > kMaxBucketCount) {
    return unsupported(
        ErrorCode::kBucketCountTooLarge, std::move(field),
        fmt::format("CKF bucket count {} exceeds the supported maximum {}", bucket_count, kMaxBucketCount));
  }
  if (bucket_count < 2 || !std::has_single_bit(bucket_count)) {
    return malformed(ErrorCode::kBucketCountNotPowerOfTwo, std::move(field),
                     fmt::format("CKF bucket count {} is not a power of two >= 2", bucket_count));
  }
  return std::nullopt;
}

// ---- role lists ----

bool is_known_role(int value) { return value != v1::WORKER_ROLE_UNSPECIFIED && v1::WorkerRole_IsValid(value); }

// A set of known roles (may be empty): every element named and none repeated.
Status check_role_set(const RoleList& roles, std::string_view field) {
  for (int i = 0; i < roles.size(); ++i) {
    const int role = roles.Get(i);
    if (!is_known_role(role)) return bad_enum_value(ErrorCode::kWorkerRole, element(field, i), role);
    for (int j = 0; j < i; ++j) {
      if (roles.Get(j) == role) {
        return malformed(ErrorCode::kDuplicateRole, element(field, i),
                         fmt::format("{} repeats role {}", field, v1::WorkerRole_Name(role)));
      }
    }
  }
  return std::nullopt;
}

// Duplicates are only tracked for the roles that split a disaggregated deployment (decision 8).
// The set rules run over the whole list first, so an unknown role stays unsupported.
Status check_duplicate_endpoint_roles(const RoleList& roles, std::string_view field) {
  if (auto error = check_role_set(roles, field)) return error;
  for (int i = 0; i < roles.size(); ++i) {
    const int role = roles.Get(i);
    if (role != v1::WORKER_ROLE_PREFILL && role != v1::WORKER_ROLE_DECODE) {
      return malformed(ErrorCode::kDuplicateEndpointRole, element(field, i),
                       fmt::format("duplicate endpoint role {} is not supported", v1::WorkerRole_Name(role)));
    }
  }
  return std::nullopt;
}

// ---- readiness and data status ----

// UNKNOWN (0) is a real published state; only values we cannot name are a problem.
Status check_readiness_state(int state, std::string field) {
  if (v1::ServingReadinessState_IsValid(state)) return std::nullopt;
  std::string message = fmt::format("{} has unknown readiness state {}", field, state);
  return unsupported(ErrorCode::kReadinessState, std::move(field), std::move(message));
}

// Returns whether the view is COMPLETE, or the status error.
std::expected<bool, Error> check_data_status(int status, std::string_view field) {
  if (status == v1::DATA_STATUS_UNSPECIFIED || !v1::DataStatus_IsValid(status)) {
    return std::unexpected(bad_enum_value(ErrorCode::kDataStatus, std::string(field), status));
  }
  return status == v1::DATA_STATUS_COMPLETE;
}

// A gauge that must be set exactly when `required` (docs/protocol/rpcs.md#validate-load presence
// rules).
Status check_presence(bool present, bool required, std::string_view parent, std::string_view name) {
  if (present == required) return std::nullopt;
  std::string field = path(parent, name);
  std::string message = fmt::format("{} must be {}", field, required ? "set" : "unset");
  return malformed(ErrorCode::kLoadViewField, std::move(field), std::move(message));
}

// ---- topology members and adapters ----

using EndpointTuple = std::tuple<std::string_view, std::string_view, std::string_view>;

Status check_topology_member(const v1::TopologyMember& member, std::string_view entry_namespace, std::string_view field,
                             std::set<EndpointTuple>& seen) {
  const std::string endpoint_field = path(field, "endpoint");
  if (!member.has_endpoint()) return missing(endpoint_field);
  const auto& endpoint = member.endpoint();
  if (auto error = check_endpoint_id(endpoint, endpoint_field)) return error;
  if (endpoint.namespace_() != entry_namespace) {
    return malformed(
        ErrorCode::kMemberNamespace, path(endpoint_field, "namespace"),
        fmt::format("member namespace {:?} differs from entry namespace {:?}", endpoint.namespace_(), entry_namespace));
  }
  if (auto error = check_worker_roles(member.roles(), path(field, "roles"))) return error;
  if (member.has_pool_id()) {
    if (auto error = check_pool_id(member.pool_id(), path(field, "pool_id"))) return error;
  }
  // Compared as a tuple, never as "ns.component.endpoint" text, so dots cannot alias.
  if (!seen.emplace(endpoint.namespace_(), endpoint.component(), endpoint.endpoint()).second) {
    return malformed(ErrorCode::kDuplicateMember, endpoint_field,
                     fmt::format("entry repeats endpoint {}.{}.{}", endpoint.namespace_(), endpoint.component(),
                                 endpoint.endpoint()));
  }
  return std::nullopt;
}

Status check_adapter(const v1::AdapterReadiness& adapter, std::string_view field, std::set<std::string_view>& seen) {
  const std::string id_field = path(field, "canonical_model_id");
  if (auto error = check_text(adapter.canonical_model_id(), id_field)) return error;
  if (auto error = check_readiness_state(adapter.state(), path(field, "state"))) return error;
  if (auto error = check_role_set(adapter.missing_roles(), path(field, "missing_roles"))) {
    return error;
  }
  if (!seen.insert(adapter.canonical_model_id()).second) {
    return malformed(ErrorCode::kDuplicateAdapter, id_field,
                     fmt::format("entry repeats adapter {:?}", adapter.canonical_model_id()));
  }
  return std::nullopt;
}

// ---- message-level helpers ----

Status check_response_envelope(std::uint32_t contract_marker, std::uint32_t protocol_version, bool has_relay) {
  if (auto error = check_envelope(contract_marker, protocol_version)) return error;
  if (!has_relay) return missing("relay");
  return std::nullopt;
}

Status check_stream_request(std::uint32_t contract_marker, std::string_view subscriber_id) {
  if (auto error = check_request_marker(contract_marker)) return error;
  return check_subscriber_id(subscriber_id);
}

// Load windows key their entries by producer. An entry whose producer is unsupported is skipped
// (its own entry check quarantines it); a malformed one cannot be identified safely, which
// makes the whole window unusable.
template <typename Entry>
Status check_unique_producers(const google::protobuf::RepeatedPtrField<Entry>& entries, std::string_view list) {
  std::set<ProducerKey> seen;
  for (int i = 0; i < entries.size(); ++i) {
    const std::string producer_field = path(element(list, i), "producer");
    if (!entries.Get(i).has_producer()) return missing(producer_field);
    auto key = try_producer_key(entries.Get(i).producer(), producer_field);
    if (!key) {
      if (key.error().unsupported()) continue;
      return std::move(key.error());
    }
    if (!seen.insert(std::move(*key)).second) {
      return malformed(ErrorCode::kDuplicateProducer, producer_field, fmt::format("{} repeats a producer", list));
    }
  }
  return std::nullopt;
}

// ---- requests that do not parse ----

// What a request that did not parse still tells: its last contract_marker (absent: 0) and its
// last subscriber_id, read off the wire without a schema. Nothing when the bytes are not even
// well-formed protobuf.
struct WireFacts {
  std::uint32_t contract_marker = 0;
  std::optional<std::string> subscriber_id;
};

std::optional<WireFacts> read_wire_facts(std::string_view bytes, const google::protobuf::Descriptor& descriptor) {
  using google::protobuf::internal::WireFormatLite;
  const google::protobuf::FieldDescriptor* marker = descriptor.FindFieldByName("contract_marker");
  const google::protobuf::FieldDescriptor* subscriber = descriptor.FindFieldByName("subscriber_id");
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return std::nullopt;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  WireFacts facts;
  while (const std::uint32_t tag = in.ReadTag()) {
    const int number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    const auto wire_type = WireFormatLite::GetTagWireType(tag);
    if (marker != nullptr && number == marker->number() && wire_type == WireFormatLite::WIRETYPE_FIXED32) {
      if (!in.ReadLittleEndian32(&facts.contract_marker)) return std::nullopt;
    } else if (subscriber != nullptr && number == subscriber->number() &&
               wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      std::string id;
      if (!WireFormatLite::ReadBytes(&in, &id)) return std::nullopt;
      facts.subscriber_id = std::move(id);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return std::nullopt;
    }
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return facts;
}

}  // namespace

Error unparsable_request(std::string_view bytes, const google::protobuf::Descriptor& descriptor) {
  const auto facts = read_wire_facts(bytes, descriptor);
  if (facts) {
    if (auto error = check_request_marker(facts->contract_marker)) return std::move(*error);
    if (facts->subscriber_id) {
      if (auto error = check_subscriber_id(*facts->subscriber_id)) return std::move(*error);
    }
  }
  return malformed(ErrorCode::kUnparsable, "", fmt::format("the request is not a {}", descriptor.name()));
}

// ---- names ----

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kContractMarker:
      return "ContractMarker";
    case ErrorCode::kProtocolVersion:
      return "ProtocolVersion";
    case ErrorCode::kMissingField:
      return "MissingField";
    case ErrorCode::kInvalidText:
      return "InvalidText";
    case ErrorCode::kSubscriberIdEmpty:
      return "SubscriberIdEmpty";
    case ErrorCode::kSubscriberIdTooLong:
      return "SubscriberIdTooLong";
    case ErrorCode::kSubscriberIdControlCharacter:
      return "SubscriberIdControlCharacter";
    case ErrorCode::kSubscriberIdInvalidUtf8:
      return "SubscriberIdInvalidUtf8";
    case ErrorCode::kIdentityVersion:
      return "IdentityVersion";
    case ErrorCode::kDigestLength:
      return "DigestLength";
    case ErrorCode::kIdentitySource:
      return "IdentitySource";
    case ErrorCode::kLayoutGeneration:
      return "LayoutGeneration";
    case ErrorCode::kCkfFormatZeroField:
      return "CkfFormatZeroField";
    case ErrorCode::kCkfFormat:
      return "CkfFormat";
    case ErrorCode::kBucketCountOverflow:
      return "BucketCountOverflow";
    case ErrorCode::kBucketCountTooLarge:
      return "BucketCountTooLarge";
    case ErrorCode::kBucketCountNotPowerOfTwo:
      return "BucketCountNotPowerOfTwo";
    case ErrorCode::kMissingModelTarget:
      return "MissingModelTarget";
    case ErrorCode::kDuplicateAlias:
      return "DuplicateAlias";
    case ErrorCode::kBlockSize:
      return "BlockSize";
    case ErrorCode::kHashFormat:
      return "HashFormat";
    case ErrorCode::kWorkerRole:
      return "WorkerRole";
    case ErrorCode::kEmptyRoles:
      return "EmptyRoles";
    case ErrorCode::kDuplicateRole:
      return "DuplicateRole";
    case ErrorCode::kReadinessState:
      return "ReadinessState";
    case ErrorCode::kDuplicateEndpointRole:
      return "DuplicateEndpointRole";
    case ErrorCode::kNoMembers:
      return "NoMembers";
    case ErrorCode::kMemberNamespace:
      return "MemberNamespace";
    case ErrorCode::kDuplicateMember:
      return "DuplicateMember";
    case ErrorCode::kDuplicateAdapter:
      return "DuplicateAdapter";
    case ErrorCode::kDuplicatePool:
      return "DuplicatePool";
    case ErrorCode::kDuplicateEntry:
      return "DuplicateEntry";
    case ErrorCode::kDuplicateProducer:
      return "DuplicateProducer";
    case ErrorCode::kDuplicateModel:
      return "DuplicateModel";
    case ErrorCode::kDuplicateServingPool:
      return "DuplicateServingPool";
    case ErrorCode::kFilterUpdateKind:
      return "FilterUpdateKind";
    case ErrorCode::kFilterPayload:
      return "FilterPayload";
    case ErrorCode::kFilterSequence:
      return "FilterSequence";
    case ErrorCode::kDataStatus:
      return "DataStatus";
    case ErrorCode::kLoadViewField:
      return "LoadViewField";
    case ErrorCode::kUnparsable:
      return "Unparsable";
  }
  return "Unknown";
}

std::string_view to_string(ErrorClass error_class) {
  return error_class == ErrorClass::kUnsupported ? "unsupported" : "malformed";
}

v1::RelayErrorReason request_error_reason(const Error& error) {
  if (error.code == ErrorCode::kContractMarker) return v1::RELAY_ERROR_REASON_CONTRACT_MISMATCH;
  if (error.unsupported()) return v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE;
  return v1::RELAY_ERROR_REASON_INVALID_REQUEST;
}

// ---- envelope and requests ----

Status check_request_marker(std::uint32_t contract_marker) {
  if (contract_marker == kContractMarker) return std::nullopt;
  return malformed(ErrorCode::kContractMarker, "contract_marker",
                   fmt::format("contract marker {:#010x}, expected {:#010x}", contract_marker, kContractMarker));
}

Status check_envelope(std::uint32_t contract_marker, std::uint32_t protocol_version) {
  // The marker says whether this is our contract at all, so it is judged before the version.
  if (auto error = check_request_marker(contract_marker)) return error;
  if (protocol_version == kProtocolVersion) return std::nullopt;
  return malformed(ErrorCode::kProtocolVersion, "protocol_version",
                   fmt::format("protocol version {}, expected {}", protocol_version, kProtocolVersion));
}

Status check_subscriber_id(std::string_view id) {
  const std::string field = "subscriber_id";
  if (id.empty()) return malformed(ErrorCode::kSubscriberIdEmpty, field, "subscriber_id is empty");
  if (id.size() > kMaxSubscriberIdBytes) {
    return malformed(ErrorCode::kSubscriberIdTooLong, field,
                     fmt::format("subscriber_id has {} bytes, at most {} allowed", id.size(), kMaxSubscriberIdBytes));
  }
  // C1 controls (U+0080-U+009F) are two-byte sequences, so the id has to be decoded.
  const auto code_points = text::decode_utf8(id);
  if (!code_points) {
    return malformed(ErrorCode::kSubscriberIdInvalidUtf8, field, "subscriber_id is not UTF-8");
  }
  for (const char32_t c : *code_points) {
    if (text::is_control(c)) {
      return malformed(ErrorCode::kSubscriberIdControlCharacter, field,
                       fmt::format("subscriber_id contains control character U+{:04X}", static_cast<std::uint32_t>(c)));
    }
  }
  return std::nullopt;
}

Status check_request(const v1::RelayInfoRequest& request) { return check_request_marker(request.contract_marker()); }

Status check_request(const v1::WatchKvPoolCatalogRequest& request) {
  return check_stream_request(request.contract_marker(), request.subscriber_id());
}

Status check_request(const v1::SubscribeKvPoolRequest& request) {
  if (auto error = check_stream_request(request.contract_marker(), request.subscriber_id())) {
    return error;
  }
  if (!request.has_expected_producer()) return missing("expected_producer");
  return check_producer_identity(request.expected_producer(), "expected_producer");
}

Status check_request(const v1::SubscribeServingReadinessRequest& request) {
  return check_stream_request(request.contract_marker(), request.subscriber_id());
}

Status check_request(const v1::SubscribeKvPoolLoadRequest& request) {
  return check_stream_request(request.contract_marker(), request.subscriber_id());
}

Status check_request(const v1::SubscribeServingLoadRequest& request) {
  return check_stream_request(request.contract_marker(), request.subscriber_id());
}

// ---- identities ----

Status check_pool_id(const v1::KvPoolId& pool_id, std::string_view field) {
  if (auto error = check_identity_version(pool_id.identity_version(), path(field, "identity_version"))) {
    return error;
  }
  const std::string domain_field = path(field, "indexer_domain");
  if (!pool_id.has_indexer_domain()) return missing(domain_field);
  const auto& domain = pool_id.indexer_domain();
  if (auto error = check_digest(domain.has_cache_semantics() ? &domain.cache_semantics() : nullptr,
                                path(domain_field, "cache_semantics"))) {
    return error;
  }
  return check_digest(domain.has_routing_scope() ? &domain.routing_scope() : nullptr,
                      path(domain_field, "routing_scope"));
}

Status check_ckf_format(const v1::CkfFormat& format, std::string_view field) {
  if (auto error = check_ckf_zero_fields(format, field)) return error;
  if (auto error = check_ckf_triple(format, field)) return error;
  return check_bucket_count(format.bucket_count(), field);
}

Status check_producer_identity(const v1::ProducerIdentity& identity, std::string_view field) {
  const std::string pool_field = path(field, "pool_id");
  if (!identity.has_pool_id()) return missing(pool_field);
  if (auto error = check_pool_id(identity.pool_id(), pool_field)) return error;
  // Generations start at 1, so 0 can only be an omitted field.
  if (identity.layout_generation() == 0) {
    return malformed(ErrorCode::kLayoutGeneration, path(field, "layout_generation"),
                     "layout generation must be non-zero");
  }
  const std::string format_field = path(field, "ckf_format");
  if (!identity.has_ckf_format()) return missing(format_field);
  return check_ckf_format(identity.ckf_format(), format_field);
}

// ---- descriptor pieces ----

Status check_endpoint_id(const v1::DynamoEndpointId& endpoint, std::string_view field) {
  if (auto error = check_text(endpoint.namespace_(), path(field, "namespace"))) return error;
  if (auto error = check_text(endpoint.component(), path(field, "component"))) return error;
  return check_text(endpoint.endpoint(), path(field, "endpoint"));
}

Status check_model_registration(const v1::ModelRegistration& registration, std::string_view field) {
  if (auto error = check_text(registration.canonical_model_id(), path(field, "canonical_model_id"))) {
    return error;
  }
  const std::string target_field = path(field, "target");
  if (!registration.has_target()) return missing(target_field);
  const auto& target = registration.target();
  switch (target.target_case()) {
    case v1::ModelTarget::kBase:
      if (auto error = check_text(target.base().base_model(), path(target_field, "base.base_model"))) {
        return error;
      }
      break;
    case v1::ModelTarget::kLora:
      if (auto error = check_text(target.lora().base_model(), path(target_field, "lora.base_model"))) {
        return error;
      }
      if (auto error = check_text(target.lora().adapter(), path(target_field, "lora.adapter"))) {
        return error;
      }
      break;
    case v1::ModelTarget::TARGET_NOT_SET:
      // A future oneof alternative decodes exactly like an unset one; never assume a base target.
      return unsupported(ErrorCode::kMissingModelTarget, target_field,
                         "model target alternative is missing or unknown");
  }
  const std::string aliases_field = path(field, "aliases");
  std::set<std::string_view> seen;
  for (int i = 0; i < registration.aliases_size(); ++i) {
    const std::string& alias = registration.aliases(i);
    if (auto error = check_text(alias, element(aliases_field, i))) return error;
    if (!seen.insert(alias).second) {
      return malformed(ErrorCode::kDuplicateAlias, element(aliases_field, i),
                       fmt::format("registration repeats alias {:?}", alias));
    }
  }
  return std::nullopt;
}

Status check_query_semantics(const v1::KvQuerySemantics& semantics, std::string_view field) {
  if (semantics.kv_block_size() == 0) {
    return malformed(ErrorCode::kBlockSize, path(field, "kv_block_size"), "KV query block size must be non-zero");
  }
  const int format = semantics.hash_format();
  if (format == v1::KV_QUERY_HASH_FORMAT_UNSPECIFIED || !v1::KvQueryHashFormat_IsValid(format)) {
    return bad_enum_value(ErrorCode::kHashFormat, path(field, "hash_format"), format);
  }
  return std::nullopt;
}

Status check_worker_roles(const RoleList& roles, std::string_view field) {
  if (roles.empty()) {
    return malformed(ErrorCode::kEmptyRoles, std::string(field), fmt::format("{} must not be empty", field));
  }
  return check_role_set(roles, field);
}

Status check_pool_descriptor(const v1::KvPoolDescriptor& descriptor, std::string_view field) {
  const std::string producer_field = path(field, "producer");
  if (!descriptor.has_producer()) return missing(producer_field);
  if (auto error = check_producer_identity(descriptor.producer(), producer_field)) return error;

  const std::string endpoint_field = path(field, "serving_endpoint");
  if (!descriptor.has_serving_endpoint()) return missing(endpoint_field);
  if (auto error = check_endpoint_id(descriptor.serving_endpoint(), endpoint_field)) return error;

  const std::string semantics_field = path(field, "query_semantics");
  if (!descriptor.has_query_semantics()) return missing(semantics_field);
  if (auto error = check_query_semantics(descriptor.query_semantics(), semantics_field)) {
    return error;
  }

  const std::string registrations_field = path(field, "registrations");
  for (int i = 0; i < descriptor.registrations_size(); ++i) {
    if (auto error = check_model_registration(descriptor.registrations(i), element(registrations_field, i))) {
      return error;
    }
  }
  return check_worker_roles(descriptor.pool_roles(), path(field, "pool_roles"));
}

// ---- entries ----

Status check_topology_entry(const v1::TopologyEntry& entry, std::string_view field) {
  if (auto error = check_text(entry.namespace_(), path(field, "namespace"))) return error;
  if (auto error = check_text(entry.canonical_model_id(), path(field, "canonical_model_id"))) {
    return error;
  }
  if (auto error = check_readiness_state(entry.state(), path(field, "state"))) return error;
  if (auto error = check_role_set(entry.present_roles(), path(field, "present_roles"))) {
    return error;
  }
  if (auto error = check_role_set(entry.missing_roles(), path(field, "missing_roles"))) {
    return error;
  }
  if (auto error =
          check_duplicate_endpoint_roles(entry.duplicate_role_endpoints(), path(field, "duplicate_role_endpoints"))) {
    return error;
  }

  const std::string members_field = path(field, "members");
  if (entry.members().empty()) {
    return malformed(ErrorCode::kNoMembers, members_field, "entry must have at least one member");
  }
  std::set<EndpointTuple> members;
  for (int i = 0; i < entry.members_size(); ++i) {
    if (auto error = check_topology_member(entry.members(i), entry.namespace_(), element(members_field, i), members)) {
      return error;
    }
  }

  const std::string adapters_field = path(field, "adapters");
  std::set<std::string_view> adapters;
  for (int i = 0; i < entry.adapters_size(); ++i) {
    if (auto error = check_adapter(entry.adapters(i), element(adapters_field, i), adapters)) {
      return error;
    }
  }
  return std::nullopt;
}

Status check_load_entry(const v1::KvPoolLoadEntry& entry, std::string_view field) {
  const std::string producer_field = path(field, "producer");
  if (!entry.has_producer()) return missing(producer_field);
  return check_producer_identity(entry.producer(), producer_field);
}

Status check_pool_serving_load(const v1::PoolServingLoad& pool, std::string_view field) {
  const std::string producer_field = path(field, "producer");
  if (!pool.has_producer()) return missing(producer_field);
  if (auto error = check_producer_identity(pool.producer(), producer_field)) return error;

  const std::string load_field = path(field, "load");
  if (!pool.has_load()) return missing(load_field);
  const auto& load = pool.load();
  const auto complete = check_data_status(load.status(), path(load_field, "status"));
  if (!complete) return complete.error();
  // Request counts are a frontend (model) notion; a pool view carrying them is malformed.
  if (load.has_requests()) {
    return malformed(ErrorCode::kLoadViewField, path(load_field, "requests"),
                     "a pool load view must not carry request counts");
  }
  const std::string tokens_field = path(load_field, "tokens");
  if (!load.has_tokens()) return missing(tokens_field);
  const auto& tokens = load.tokens();
  // Aggregate gauges are only meaningful when every expected source reported.
  const std::pair<std::string_view, std::pair<bool, bool>> gauges[] = {
      {"active_prefill_tokens", {tokens.has_active_prefill_tokens(), *complete}},
      {"active_decode_blocks", {tokens.has_active_decode_blocks(), *complete}},
      {"awaiting_first_token_input_tokens", {tokens.has_awaiting_first_token_input_tokens(), false}},
      {"inflight_input_tokens", {tokens.has_inflight_input_tokens(), false}},
      {"input_tokens_total", {tokens.has_input_tokens_total(), false}},
      {"output_tokens_total", {tokens.has_output_tokens_total(), false}},
  };
  for (const auto& [name, rule] : gauges) {
    if (auto error = check_presence(rule.first, rule.second, tokens_field, name)) return error;
  }
  if (!pool.has_deployment()) return missing(path(field, "deployment"));
  return std::nullopt;
}

Status check_model_serving_load(const v1::ModelServingLoad& model, std::string_view field) {
  if (auto error = check_text(model.namespace_(), path(field, "namespace"))) return error;
  if (auto error = check_text(model.canonical_model_id(), path(field, "canonical_model_id"))) {
    return error;
  }
  const std::string load_field = path(field, "load");
  if (!model.has_load()) return missing(load_field);
  const auto& load = model.load();
  const auto complete = check_data_status(load.status(), path(load_field, "status"));
  if (!complete) return complete.error();

  const std::string requests_field = path(load_field, "requests");
  if (!load.has_requests()) return missing(requests_field);
  const auto& requests = load.requests();
  if (auto error = check_presence(requests.has_requests_awaiting_first_token(), *complete, requests_field,
                                  "requests_awaiting_first_token")) {
    return error;
  }
  if (auto error =
          check_presence(requests.has_requests_generating(), *complete, requests_field, "requests_generating")) {
    return error;
  }

  const std::string tokens_field = path(load_field, "tokens");
  if (!load.has_tokens()) return missing(tokens_field);
  const auto& tokens = load.tokens();
  const std::pair<std::string_view, std::pair<bool, bool>> gauges[] = {
      {"awaiting_first_token_input_tokens", {tokens.has_awaiting_first_token_input_tokens(), *complete}},
      {"inflight_input_tokens", {tokens.has_inflight_input_tokens(), *complete}},
      {"input_tokens_total", {tokens.has_input_tokens_total(), true}},
      {"output_tokens_total", {tokens.has_output_tokens_total(), true}},
      {"active_prefill_tokens", {tokens.has_active_prefill_tokens(), false}},
      {"active_decode_blocks", {tokens.has_active_decode_blocks(), false}},
  };
  for (const auto& [name, rule] : gauges) {
    if (auto error = check_presence(rule.first, rule.second, tokens_field, name)) return error;
  }

  const std::string deployment_field = path(field, "deployment");
  if (!model.has_deployment()) return missing(deployment_field);
  const std::string pools_field = path(deployment_field, "serving_pools");
  std::set<PoolKey> pools;
  for (int i = 0; i < model.deployment().serving_pools_size(); ++i) {
    const auto& pool_id = model.deployment().serving_pools(i);
    if (auto error = check_pool_id(pool_id, element(pools_field, i))) return error;
    if (!pools.insert(pool_key(pool_id)).second) {
      return malformed(ErrorCode::kDuplicateServingPool, element(pools_field, i),
                       "model deployment repeats a serving pool");
    }
  }
  return std::nullopt;
}

// ---- responses ----

Status check_response(const v1::RelayInfo& info) {
  return check_response_envelope(info.contract_marker(), info.protocol_version(), info.has_relay());
}

Status check_response(const v1::KvPoolCatalogUpdate& update) {
  if (auto error = check_response_envelope(update.contract_marker(), update.protocol_version(), update.has_relay())) {
    return error;
  }
  // Every update is a complete catalog; without a snapshot nothing tells "empty" from "lost".
  if (!update.has_snapshot()) return missing("snapshot");
  std::set<PoolKey> seen;
  const auto& pools = update.snapshot().pools();
  for (int i = 0; i < pools.size(); ++i) {
    const std::string producer_field = path(element("snapshot.pools", i), "producer");
    if (!pools.Get(i).has_producer()) return missing(producer_field);
    const auto& producer = pools.Get(i).producer();
    const std::string pool_field = path(producer_field, "pool_id");
    if (!producer.has_pool_id()) return missing(pool_field);
    if (auto error = check_pool_id(producer.pool_id(), pool_field)) {
      if (error->unsupported()) continue;  // quarantined by its entry check
      return error;
    }
    if (!seen.insert(pool_key(producer.pool_id())).second) {
      return malformed(ErrorCode::kDuplicatePool, pool_field, "catalog repeats a pool id");
    }
  }
  return std::nullopt;
}

Status check_response(const v1::FilterUpdate& update) {
  if (auto error = check_response_envelope(update.contract_marker(), update.protocol_version(), update.has_relay())) {
    return error;
  }
  if (!update.has_producer()) return missing("producer");
  if (auto error = check_producer_identity(update.producer(), "producer")) return error;

  // docs/protocol/rpcs.md#unsupported-values does not list frame kinds as unsupported: an unknown
  // kind cannot be skipped (the replica would silently diverge), so it invalidates the stream like
  // any malformed frame.
  const int kind = update.kind();
  if (kind == v1::FILTER_UPDATE_KIND_UNSPECIFIED || !v1::FilterUpdateKind_IsValid(kind)) {
    return malformed(ErrorCode::kFilterUpdateKind, "kind", fmt::format("unknown filter update kind {}", kind));
  }
  const bool heartbeat = kind == v1::FILTER_UPDATE_KIND_HEARTBEAT;
  if (heartbeat != update.payload().empty()) {
    return malformed(ErrorCode::kFilterPayload, "payload",
                     heartbeat ? "a heartbeat carries no payload" : "a snapshot chunk or delta carries a CBI1 payload");
  }
  // Deltas move the sequence by exactly one; chunks and heartbeats stand still.
  const std::uint64_t base = update.base_sequence();
  const bool delta = kind == v1::FILTER_UPDATE_KIND_DELTA;
  const bool consistent = delta ? base != std::numeric_limits<std::uint64_t>::max() && update.sequence() == base + 1
                                : update.sequence() == base;
  if (!consistent) {
    return malformed(
        ErrorCode::kFilterSequence, "sequence",
        fmt::format("sequence {} does not follow base_sequence {} for this kind", update.sequence(), base));
  }
  return std::nullopt;
}

Status check_response(const v1::ServingReadinessUpdate& update) {
  if (auto error = check_response_envelope(update.contract_marker(), update.protocol_version(), update.has_relay())) {
    return error;
  }
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (int i = 0; i < update.entries_size(); ++i) {
    const auto& entry = update.entries(i);
    const std::string entry_field = element("entries", i);
    if (auto error = check_text(entry.namespace_(), path(entry_field, "namespace"))) return error;
    if (auto error = check_text(entry.canonical_model_id(), path(entry_field, "canonical_model_id"))) {
      return error;
    }
    if (!seen.emplace(entry.namespace_(), entry.canonical_model_id()).second) {
      return malformed(ErrorCode::kDuplicateEntry, entry_field,
                       fmt::format("readiness repeats entry ({}, {})", entry.namespace_(), entry.canonical_model_id()));
    }
  }
  return std::nullopt;
}

Status check_response(const v1::KvPoolLoadUpdate& update) {
  if (auto error = check_response_envelope(update.contract_marker(), update.protocol_version(), update.has_relay())) {
    return error;
  }
  return check_unique_producers(update.pools(), "pools");
}

Status check_response(const v1::ServingLoadUpdate& update) {
  if (auto error = check_response_envelope(update.contract_marker(), update.protocol_version(), update.has_relay())) {
    return error;
  }
  if (auto error = check_unique_producers(update.pools(), "pools")) return error;
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (int i = 0; i < update.models_size(); ++i) {
    const auto& model = update.models(i);
    const std::string model_field = element("models", i);
    if (auto error = check_text(model.namespace_(), path(model_field, "namespace"))) return error;
    if (auto error = check_text(model.canonical_model_id(), path(model_field, "canonical_model_id"))) {
      return error;
    }
    if (!seen.emplace(model.namespace_(), model.canonical_model_id()).second) {
      return malformed(
          ErrorCode::kDuplicateModel, model_field,
          fmt::format("serving load repeats model ({}, {})", model.namespace_(), model.canonical_model_id()));
    }
  }
  return std::nullopt;
}

// ---- frozen producer key ----

PoolKey pool_key(const v1::KvPoolId& pool_id) {
  const auto& domain = pool_id.indexer_domain();
  return PoolKey{
      .identity_version = pool_id.identity_version(),
      .cache_semantics = {domain.cache_semantics().digest(), domain.cache_semantics().source()},
      .routing_scope = {domain.routing_scope().digest(), domain.routing_scope().source()},
      .dc_id = pool_id.dc_id(),
  };
}

ProducerKey producer_key(const v1::ProducerIdentity& identity) {
  const auto& format = identity.ckf_format();
  return ProducerKey{
      .pool = pool_key(identity.pool_id()),
      .producer_incarnation = identity.producer_incarnation(),
      .layout_generation = identity.layout_generation(),
      .ckf_format = {format.format_version(), format.seed(), format.bucket_count(), format.fingerprint_bits(),
                     format.slots_per_bucket()},
  };
}

std::expected<ProducerKey, Error> try_producer_key(const v1::ProducerIdentity& identity, std::string_view field) {
  if (auto error = check_producer_identity(identity, field)) return std::unexpected(std::move(*error));
  return producer_key(identity);
}

}  // namespace kvrelay::wire
