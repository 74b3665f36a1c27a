#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/unicode_text.hpp"
#include "core/wire_validation.hpp"

using namespace kvrelay::wire;
using kvrelay::text::is_valid_text;

namespace {

// "ok", or "<Code> <class> @ <field>": one string asserts code, class and field together and
// reads well in a failure message.
std::string describe_with_class(const Status& status) {
  if (!status) return "ok";
  return std::string(to_string(status->code)) + " " + std::string(to_string(status->error_class)) + " @ " +
         status->field;
}

std::string utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

// Every White_Space code point (the set Rust's str::trim removes upstream).
const std::vector<char32_t> kWhiteSpace = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,   0x1680,
                                           0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
                                           0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};

// ---- valid fixtures, as the relay publishes them (docs/protocol/pools.md#producer-identity)

v1::KvPoolId valid_pool_id() {
  v1::KvPoolId pool;
  pool.set_identity_version(kPoolIdentityVersion);
  auto* cache = pool.mutable_indexer_domain()->mutable_cache_semantics();
  cache->set_digest(std::string(16, '\x11'));
  cache->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  auto* routing = pool.mutable_indexer_domain()->mutable_routing_scope();
  routing->set_digest(std::string(16, '\x22'));
  routing->set_source(v1::IDENTITY_SOURCE_EXPLICIT);
  pool.set_dc_id(0xAABBCCDDEEFF0011);
  return pool;
}

v1::CkfFormat valid_format() {
  v1::CkfFormat format;
  format.set_format_version(1);
  format.set_seed(0x5DEECE66D1B54A33);
  format.set_bucket_count(524288);
  format.set_fingerprint_bits(16);
  format.set_slots_per_bucket(4);
  return format;
}

v1::ProducerIdentity valid_producer() {
  v1::ProducerIdentity producer;
  *producer.mutable_pool_id() = valid_pool_id();
  producer.set_producer_incarnation(0x1234567890ABCDEF);
  producer.set_layout_generation(1);
  *producer.mutable_ckf_format() = valid_format();
  return producer;
}

v1::DynamoEndpointId endpoint(const std::string& ns, const std::string& component, const std::string& name) {
  v1::DynamoEndpointId id;
  id.set_namespace_(ns);
  id.set_component(component);
  id.set_endpoint(name);
  return id;
}

v1::DynamoEndpointId valid_endpoint() { return endpoint("prod", "backend", "generate"); }

v1::ModelRegistration base_registration() {
  v1::ModelRegistration registration;
  registration.set_canonical_model_id("llama");
  registration.mutable_target()->mutable_base()->set_base_model("llama");
  registration.add_aliases("chat");
  registration.add_aliases("llama-3");
  return registration;
}

v1::ModelRegistration lora_registration() {
  v1::ModelRegistration registration;
  registration.set_canonical_model_id("tenant-a");
  registration.mutable_target()->mutable_lora()->set_base_model("llama");
  registration.mutable_target()->mutable_lora()->set_adapter("tenant-a");
  return registration;
}

v1::KvQuerySemantics valid_semantics() {
  v1::KvQuerySemantics semantics;
  semantics.set_kv_block_size(64);
  semantics.set_hash_format(v1::KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1);
  return semantics;
}

v1::KvPoolDescriptor valid_descriptor() {
  v1::KvPoolDescriptor descriptor;
  *descriptor.mutable_producer() = valid_producer();
  *descriptor.mutable_serving_endpoint() = valid_endpoint();
  *descriptor.add_registrations() = base_registration();
  *descriptor.add_registrations() = lora_registration();
  *descriptor.mutable_query_semantics() = valid_semantics();
  descriptor.add_pool_roles(v1::WORKER_ROLE_PREFILL);
  descriptor.add_pool_roles(v1::WORKER_ROLE_DECODE);
  return descriptor;
}

v1::TopologyMember member(const std::string& component, v1::WorkerRole role) {
  v1::TopologyMember m;
  *m.mutable_endpoint() = endpoint("prod", component, "generate");
  m.add_roles(role);
  *m.mutable_pool_id() = valid_pool_id();
  return m;
}

v1::TopologyEntry valid_entry() {
  v1::TopologyEntry entry;
  entry.set_namespace_("prod");
  entry.set_canonical_model_id("llama");
  entry.set_state(v1::SERVING_READINESS_STATE_READY);
  entry.add_present_roles(v1::WORKER_ROLE_PREFILL);
  entry.add_present_roles(v1::WORKER_ROLE_DECODE);
  *entry.add_members() = member("prefill", v1::WORKER_ROLE_PREFILL);
  *entry.add_members() = member("decode", v1::WORKER_ROLE_DECODE);
  entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_PREFILL);
  entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_DECODE);
  auto* adapter = entry.add_adapters();
  adapter->set_canonical_model_id("tenant-a");
  adapter->set_state(v1::SERVING_READINESS_STATE_UNAVAILABLE);
  adapter->add_missing_roles(v1::WORKER_ROLE_DECODE);
  return entry;
}

template <typename Message>
void set_envelope(Message& message) {
  message.set_contract_marker(kContractMarker);
  message.set_protocol_version(kProtocolVersion);
  message.mutable_relay()->set_drt_instance_id(7);
  message.mutable_relay()->set_relay_incarnation(9);
}

v1::SubscribeKvPoolRequest valid_pool_request() {
  v1::SubscribeKvPoolRequest request;
  request.set_contract_marker(kContractMarker);
  request.set_subscriber_id("router-1");
  *request.mutable_expected_producer() = valid_producer();
  return request;
}

v1::PoolServingLoad valid_pool_serving_load(bool complete) {
  v1::PoolServingLoad pool;
  *pool.mutable_producer() = valid_producer();
  auto* load = pool.mutable_load();
  load->set_status(complete ? v1::DATA_STATUS_COMPLETE : v1::DATA_STATUS_DEGRADED);
  auto* tokens = load->mutable_tokens();
  if (complete) {
    tokens->set_active_prefill_tokens(10);
    tokens->set_active_decode_blocks(20);
  }
  pool.mutable_deployment()->set_live_workers(2);
  return pool;
}

v1::ModelServingLoad valid_model_serving_load(bool complete) {
  v1::ModelServingLoad model;
  model.set_namespace_("prod");
  model.set_canonical_model_id("llama");
  auto* load = model.mutable_load();
  load->set_status(complete ? v1::DATA_STATUS_COMPLETE : v1::DATA_STATUS_UNAVAILABLE);
  auto* requests = load->mutable_requests();
  auto* tokens = load->mutable_tokens();
  if (complete) {
    requests->set_requests_awaiting_first_token(1);
    requests->set_requests_generating(2);
    tokens->set_awaiting_first_token_input_tokens(3);
    tokens->set_inflight_input_tokens(4);
  }
  tokens->set_input_tokens_total(100);
  tokens->set_output_tokens_total(200);
  *model.mutable_deployment()->add_serving_pools() = valid_pool_id();
  return model;
}

v1::FilterUpdate valid_frame(v1::FilterUpdateKind kind) {
  v1::FilterUpdate frame;
  set_envelope(frame);
  *frame.mutable_producer() = valid_producer();
  frame.set_kind(kind);
  frame.set_base_sequence(41);
  frame.set_sequence(kind == v1::FILTER_UPDATE_KIND_DELTA ? 42 : 41);
  if (kind != v1::FILTER_UPDATE_KIND_HEARTBEAT) frame.set_payload("CBI1...");
  return frame;
}

// Proto3 keeps unknown enum values as plain ints; set them the way a parser would.
template <typename Enum>
Enum raw(int value) {
  return static_cast<Enum>(value);
}

}  // namespace

// ===================================================================== constants and envelope

TEST_CASE("wire constants match the contract", "[wire]") {
  CHECK(kContractMarker == 1263948337u);
  // Little-endian on the wire: 31 52 56 4B, "KVR1" when read big-endian.
  CHECK(((kContractMarker >> 24) & 0xFF) == 'K');
  CHECK(((kContractMarker >> 16) & 0xFF) == 'V');
  CHECK(((kContractMarker >> 8) & 0xFF) == 'R');
  CHECK((kContractMarker & 0xFF) == '1');
  CHECK(kProtocolVersion == 1);
  CHECK(kPoolIdentityVersion == 1);
  CHECK(kMaxSubscriberIdBytes == 128);
  CHECK(kMaxBucketCount == 16777216u);
}

TEST_CASE("envelope: marker then version, both malformed", "[wire]") {
  CHECK(describe_with_class(check_envelope(kContractMarker, 1)) == "ok");
  CHECK(describe_with_class(check_envelope(0, 1)) == "ContractMarker malformed @ contract_marker");
  CHECK(describe_with_class(check_envelope(kContractMarker + 1, 1)) == "ContractMarker malformed @ contract_marker");
  CHECK(describe_with_class(check_envelope(kContractMarker, 0)) == "ProtocolVersion malformed @ protocol_version");
  CHECK(describe_with_class(check_envelope(kContractMarker, 2)) == "ProtocolVersion malformed @ protocol_version");
  // Both wrong: the marker is checked first.
  CHECK(describe_with_class(check_envelope(0, 2)) == "ContractMarker malformed @ contract_marker");

  CHECK(describe_with_class(check_request_marker(kContractMarker)) == "ok");
  CHECK(describe_with_class(check_request_marker(0)) == "ContractMarker malformed @ contract_marker");
}

// ============================================= subscriber_id (docs/protocol/rpcs.md#subscriber-id)

TEST_CASE("subscriber_id: empty, too long, control characters", "[wire]") {
  CHECK(describe_with_class(check_subscriber_id("router-1")) == "ok");
  CHECK(describe_with_class(check_subscriber_id("router 1 / zone=a")) == "ok");  // spaces are not Cc
  CHECK(describe_with_class(check_subscriber_id("路由器")) == "ok");
  CHECK(describe_with_class(check_subscriber_id(utf8(0xA0))) == "ok");  // NBSP is Zs, not Cc
  CHECK(describe_with_class(check_subscriber_id(std::string(128, 'a'))) == "ok");

  CHECK(describe_with_class(check_subscriber_id("")) == "SubscriberIdEmpty malformed @ subscriber_id");
  CHECK(describe_with_class(check_subscriber_id(std::string(129, 'a'))) ==
        "SubscriberIdTooLong malformed @ subscriber_id");

  SECTION("the limit counts UTF-8 bytes, not characters") {
    std::string two_byte;
    for (int i = 0; i < 64; ++i) two_byte += utf8(0xE9);  // é: 64 chars, 128 bytes
    CHECK(describe_with_class(check_subscriber_id(two_byte)) == "ok");
    std::string three_byte;
    for (int i = 0; i < 43; ++i) three_byte += utf8(0x8DEF);  // 43 chars, 129 bytes
    CHECK(describe_with_class(check_subscriber_id(three_byte)) == "SubscriberIdTooLong malformed @ subscriber_id");
  }

  SECTION("every Cc code point is refused, C1 included") {
    std::vector<char32_t> controls;
    for (char32_t c = 0x00; c <= 0x1F; ++c) controls.push_back(c);
    for (char32_t c = 0x7F; c <= 0x9F; ++c) controls.push_back(c);
    for (const char32_t c : controls) {
      INFO("U+" << std::hex << static_cast<std::uint32_t>(c));
      CHECK(describe_with_class(check_subscriber_id("a" + utf8(c) + "b")) ==
            "SubscriberIdControlCharacter malformed @ subscriber_id");
    }
    // Neighbours of the ranges are allowed.
    CHECK(describe_with_class(check_subscriber_id(" ~" + utf8(0xA0) + utf8(0xA1))) == "ok");
  }

  SECTION("order: empty, then length, then control characters") {
    CHECK(describe_with_class(check_subscriber_id(std::string(129, '\n'))) ==
          "SubscriberIdTooLong malformed @ subscriber_id");
  }

  SECTION("bytes that are not UTF-8 are refused, never decoded loosely") {
    CHECK(describe_with_class(check_subscriber_id("a\xFF")) == "SubscriberIdInvalidUtf8 malformed @ subscriber_id");
    // An overlong NUL must not slip past the control-character check.
    CHECK(describe_with_class(check_subscriber_id("a\xC0\x80")) == "SubscriberIdInvalidUtf8 malformed @ subscriber_id");
  }
}

// ===================================================================== text

TEST_CASE("valid text is non-empty and Unicode-whitespace trimmed", "[wire]") {
  CHECK(is_valid_text("llama"));
  CHECK(is_valid_text("meta llama/3.1 8B"));  // inner whitespace is fine
  CHECK(is_valid_text("模型"));
  CHECK(is_valid_text(utf8(0x200B) + "x"));  // ZERO WIDTH SPACE is not White_Space
  CHECK(is_valid_text("x" + utf8(0x180E)));  // nor is MONGOLIAN VOWEL SEPARATOR

  CHECK_FALSE(is_valid_text(""));
  CHECK_FALSE(is_valid_text(" "));
  CHECK_FALSE(is_valid_text(utf8(0x3000) + utf8(0x2028)));
  for (const char32_t c : kWhiteSpace) {
    INFO("U+" << std::hex << static_cast<std::uint32_t>(c));
    CHECK_FALSE(is_valid_text(utf8(c) + "llama"));
    CHECK_FALSE(is_valid_text("llama" + utf8(c)));
    CHECK(is_valid_text("lla" + utf8(c) + "ma"));
  }

  // Not UTF-8: stray continuation, truncated sequence, overlong, surrogate, above U+10FFFF.
  CHECK_FALSE(is_valid_text("a\x80"));
  CHECK_FALSE(is_valid_text("a\xE6\xA8"));
  CHECK_FALSE(is_valid_text("a\xC1\xBF"));
  CHECK_FALSE(is_valid_text("a\xED\xA0\x80"));
  CHECK_FALSE(is_valid_text("a\xF4\x90\x80\x80"));
  CHECK(is_valid_text("a\xF4\x8F\xBF\xBF"));  // U+10FFFF itself is fine
}

// =============================================== pool id (docs/protocol/rpcs.md#validate-identity)

TEST_CASE("pool id: identity version, domain, digests, sources", "[wire]") {
  CHECK(describe_with_class(check_pool_id(valid_pool_id(), "pool_id")) == "ok");

  SECTION("identity_version 0 is malformed, any other non-1 value unsupported") {
    auto pool = valid_pool_id();
    pool.set_identity_version(0);
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
          "IdentityVersion malformed @ pool_id.identity_version");
    for (const std::uint32_t version : {2u, 3u, std::numeric_limits<std::uint32_t>::max()}) {
      pool.set_identity_version(version);
      CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
            "IdentityVersion unsupported @ pool_id.identity_version");
    }
  }

  SECTION("missing indexer domain and digests are malformed MissingField") {
    auto pool = valid_pool_id();
    pool.clear_indexer_domain();
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) == "MissingField malformed @ pool_id.indexer_domain");
    pool = valid_pool_id();
    pool.mutable_indexer_domain()->clear_cache_semantics();
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
          "MissingField malformed @ pool_id.indexer_domain.cache_semantics");
    pool = valid_pool_id();
    pool.mutable_indexer_domain()->clear_routing_scope();
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
          "MissingField malformed @ pool_id.indexer_domain.routing_scope");
  }

  SECTION("digest length other than 16 is malformed") {
    for (const std::size_t length : {0u, 15u, 17u, 32u}) {
      auto pool = valid_pool_id();
      pool.mutable_indexer_domain()->mutable_cache_semantics()->set_digest(std::string(length, 'x'));
      CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
            "DigestLength malformed @ pool_id.indexer_domain.cache_semantics.digest");
      pool = valid_pool_id();
      pool.mutable_indexer_domain()->mutable_routing_scope()->set_digest(std::string(length, 'x'));
      CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
            "DigestLength malformed @ pool_id.indexer_domain.routing_scope.digest");
    }
  }

  SECTION("source UNSPECIFIED is malformed, unknown non-zero unsupported") {
    auto pool = valid_pool_id();
    pool.mutable_indexer_domain()->mutable_cache_semantics()->set_source(v1::IDENTITY_SOURCE_UNSPECIFIED);
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
          "IdentitySource malformed @ pool_id.indexer_domain.cache_semantics.source");
    for (const int value : {3, 99, -1}) {
      pool = valid_pool_id();
      pool.mutable_indexer_domain()->mutable_routing_scope()->set_source(raw<v1::IdentitySource>(value));
      CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
            "IdentitySource unsupported @ pool_id.indexer_domain.routing_scope.source");
    }
  }

  SECTION("order: version, domain, cache digest length, its source, then routing scope") {
    auto pool = valid_pool_id();
    pool.set_identity_version(0);
    pool.clear_indexer_domain();
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
          "IdentityVersion malformed @ pool_id.identity_version");
    pool = valid_pool_id();
    auto* cache = pool.mutable_indexer_domain()->mutable_cache_semantics();
    cache->set_digest("short");
    cache->set_source(raw<v1::IdentitySource>(99));
    pool.mutable_indexer_domain()->clear_routing_scope();
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) ==
          "DigestLength malformed @ pool_id.indexer_domain.cache_semantics.digest");
  }

  SECTION("dc_id is unconstrained") {
    auto pool = valid_pool_id();
    pool.set_dc_id(0);
    CHECK(describe_with_class(check_pool_id(pool, "pool_id")) == "ok");
  }
}

// ============================================ CKF format (docs/protocol/rpcs.md#validate-identity)

TEST_CASE("CKF format: zero fields, triple, range, power of two", "[wire]") {
  CHECK(describe_with_class(check_ckf_format(valid_format(), "f")) == "ok");
  for (const std::uint64_t count : {std::uint64_t{2}, std::uint64_t{64}, kMaxBucketCount}) {
    auto format = valid_format();
    format.set_bucket_count(count);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "ok");
  }

  SECTION("any zero field is malformed and named") {
    auto format = valid_format();
    format.set_format_version(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormatZeroField malformed @ f.format_version");
    format = valid_format();
    format.set_bucket_count(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormatZeroField malformed @ f.bucket_count");
    format = valid_format();
    format.set_fingerprint_bits(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormatZeroField malformed @ f.fingerprint_bits");
    format = valid_format();
    format.set_slots_per_bucket(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormatZeroField malformed @ f.slots_per_bucket");
  }

  SECTION("another format triple is unsupported") {
    auto format = valid_format();
    format.set_format_version(2);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormat unsupported @ f.format_version");
    format = valid_format();
    format.set_fingerprint_bits(8);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormat unsupported @ f.fingerprint_bits");
    format = valid_format();
    format.set_slots_per_bucket(8);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormat unsupported @ f.slots_per_bucket");
  }

  SECTION("bucket_count above 2^24 is unsupported") {
    for (const std::uint64_t count :
         {kMaxBucketCount + 1, kMaxBucketCount * 2, std::numeric_limits<std::uint64_t>::max()}) {
      auto format = valid_format();
      format.set_bucket_count(count);
      CHECK(describe_with_class(check_ckf_format(format, "f")) == "BucketCountTooLarge unsupported @ f.bucket_count");
    }
  }

  SECTION("bucket_count not a power of two, or below 2, is malformed") {
    for (const std::uint64_t count : {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{100}, kMaxBucketCount - 1}) {
      auto format = valid_format();
      format.set_bucket_count(count);
      CHECK(describe_with_class(check_ckf_format(format, "f")) ==
            "BucketCountNotPowerOfTwo malformed @ f.bucket_count");
    }
  }

  SECTION("order: zero fields, then triple, then range, then power of two") {
    auto format = valid_format();
    format.set_format_version(2);
    format.set_bucket_count(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormatZeroField malformed @ f.bucket_count");
    // Zero fields are checked in field order.
    format = valid_format();
    format.set_slots_per_bucket(0);
    format.set_format_version(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormatZeroField malformed @ f.format_version");
    format = valid_format();
    format.set_fingerprint_bits(8);
    format.set_bucket_count(kMaxBucketCount * 2);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormat unsupported @ f.fingerprint_bits");
    format = valid_format();
    format.set_slots_per_bucket(2);
    format.set_bucket_count(3);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "CkfFormat unsupported @ f.slots_per_bucket");
    // Range before power of two: an odd count above the maximum is "too large".
    format = valid_format();
    format.set_bucket_count(kMaxBucketCount + 1);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "BucketCountTooLarge unsupported @ f.bucket_count");
  }

  SECTION("seed is unconstrained") {
    auto format = valid_format();
    format.set_seed(0);
    CHECK(describe_with_class(check_ckf_format(format, "f")) == "ok");
  }
}

// ===================================== producer identity (docs/protocol/rpcs.md#validate-identity)

TEST_CASE("producer identity: parts present, generation non-zero, nested checks", "[wire]") {
  CHECK(describe_with_class(check_producer_identity(valid_producer(), "p")) == "ok");

  auto producer = valid_producer();
  producer.clear_pool_id();
  CHECK(describe_with_class(check_producer_identity(producer, "p")) == "MissingField malformed @ p.pool_id");

  producer = valid_producer();
  producer.clear_ckf_format();
  CHECK(describe_with_class(check_producer_identity(producer, "p")) == "MissingField malformed @ p.ckf_format");

  producer = valid_producer();
  producer.set_layout_generation(0);
  CHECK(describe_with_class(check_producer_identity(producer, "p")) ==
        "LayoutGeneration malformed @ p.layout_generation");

  producer = valid_producer();
  producer.set_producer_incarnation(0);  // unconstrained
  CHECK(describe_with_class(check_producer_identity(producer, "p")) == "ok");

  producer = valid_producer();
  producer.mutable_ckf_format()->set_bucket_count(kMaxBucketCount * 2);
  CHECK(describe_with_class(check_producer_identity(producer, "p")) ==
        "BucketCountTooLarge unsupported @ p.ckf_format.bucket_count");

  SECTION("order: pool id, then layout generation, then CKF format") {
    producer = valid_producer();
    producer.mutable_pool_id()->set_identity_version(2);
    producer.set_layout_generation(0);
    producer.clear_ckf_format();
    CHECK(describe_with_class(check_producer_identity(producer, "p")) ==
          "IdentityVersion unsupported @ p.pool_id.identity_version");
    producer.mutable_pool_id()->set_identity_version(1);
    CHECK(describe_with_class(check_producer_identity(producer, "p")) ==
          "LayoutGeneration malformed @ p.layout_generation");
    producer.set_layout_generation(3);
    CHECK(describe_with_class(check_producer_identity(producer, "p")) == "MissingField malformed @ p.ckf_format");
  }
}

// ============================================= requests (docs/protocol/rpcs.md#request-validation)

TEST_CASE("SubscribeKvPool conformance: identity_version+1 unsupported, layout_generation=0 malformed", "[wire]") {
  CHECK(describe_with_class(check_request(valid_pool_request())) == "ok");

  auto request = valid_pool_request();
  request.mutable_expected_producer()->mutable_pool_id()->set_identity_version(kPoolIdentityVersion + 1);
  auto error = check_request(request);
  REQUIRE(error);
  CHECK(error->unsupported());
  CHECK(error->field == "expected_producer.pool_id.identity_version");
  CHECK(request_error_reason(*error) == v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE);

  request = valid_pool_request();
  request.mutable_expected_producer()->set_layout_generation(0);
  error = check_request(request);
  REQUIRE(error);
  CHECK_FALSE(error->unsupported());
  CHECK(error->field == "expected_producer.layout_generation");
  CHECK(request_error_reason(*error) == v1::RELAY_ERROR_REASON_INVALID_REQUEST);
}

TEST_CASE("SubscribeKvPool request order: marker, subscriber_id, producer present, producer valid", "[wire]") {
  auto request = valid_pool_request();
  request.set_contract_marker(0);
  request.set_subscriber_id("");
  request.clear_expected_producer();
  auto error = check_request(request);
  CHECK(describe_with_class(error) == "ContractMarker malformed @ contract_marker");
  CHECK(request_error_reason(*error) == v1::RELAY_ERROR_REASON_CONTRACT_MISMATCH);

  request.set_contract_marker(kContractMarker);
  error = check_request(request);
  CHECK(describe_with_class(error) == "SubscriberIdEmpty malformed @ subscriber_id");
  CHECK(request_error_reason(*error) == v1::RELAY_ERROR_REASON_INVALID_REQUEST);

  request.set_subscriber_id("router-1");
  error = check_request(request);
  CHECK(describe_with_class(error) == "MissingField malformed @ expected_producer");
  CHECK(request_error_reason(*error) == v1::RELAY_ERROR_REASON_INVALID_REQUEST);

  *request.mutable_expected_producer() = valid_producer();
  request.mutable_expected_producer()->mutable_ckf_format()->set_fingerprint_bits(8);
  error = check_request(request);
  CHECK(describe_with_class(error) == "CkfFormat unsupported @ expected_producer.ckf_format.fingerprint_bits");
  CHECK(request_error_reason(*error) == v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE);
}

TEST_CASE("stream and info requests: marker first, then subscriber_id", "[wire]") {
  v1::RelayInfoRequest info;
  CHECK(describe_with_class(check_request(info)) == "ContractMarker malformed @ contract_marker");
  info.set_contract_marker(kContractMarker);
  CHECK(describe_with_class(check_request(info)) == "ok");

  const auto exercise = [](auto request) {
    CHECK(describe_with_class(check_request(request)) == "ContractMarker malformed @ contract_marker");
    request.set_contract_marker(kContractMarker);
    CHECK(describe_with_class(check_request(request)) == "SubscriberIdEmpty malformed @ subscriber_id");
    request.set_subscriber_id("bad\tid");
    CHECK(describe_with_class(check_request(request)) == "SubscriberIdControlCharacter malformed @ subscriber_id");
    request.set_subscriber_id("router-1");
    CHECK(describe_with_class(check_request(request)) == "ok");
  };
  exercise(v1::WatchKvPoolCatalogRequest{});
  exercise(v1::SubscribeServingReadinessRequest{});
  exercise(v1::SubscribeKvPoolLoadRequest{});
  exercise(v1::SubscribeServingLoadRequest{});
}

TEST_CASE("a request that does not parse: marker first, then the string that is not UTF-8", "[wire]") {
  const auto& descriptor = *v1::WatchKvPoolCatalogRequest::descriptor();
  const auto judged = [&](const std::string& bytes) {
    const Error error = unparsable_request(bytes, descriptor);
    return std::string(to_string(error.code)) + " @ " + error.field + ": " + error.message;
  };
  // subscriber_id (field 1) of one byte that is not UTF-8, then contract_marker (field 127, fixed32).
  const auto not_utf8 = [](std::uint32_t marker) {
    std::string bytes = {0x0A, 0x01, '\xff', '\xfd', 0x07};
    for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>((marker >> shift) & 0xFF);
    return bytes;
  };
  CHECK(judged(not_utf8(kContractMarker)) == "SubscriberIdInvalidUtf8 @ subscriber_id: subscriber_id is not UTF-8");
  CHECK(judged(not_utf8(7)) == "ContractMarker @ contract_marker: contract marker 0x00000007, expected 0x4b565231");
  CHECK(judged({0x0A, 0x05, 'a'}) == "Unparsable @ : the request is not a WatchKvPoolCatalogRequest");
  // Judged as a parsed request's subscriber_id is: too long before not UTF-8.
  std::string long_id = {0x0A, static_cast<char>(0xC8), 0x01};  // 200 bytes follow
  long_id += std::string(200, '\xff');
  CHECK(judged(long_id + not_utf8(kContractMarker).substr(3)) ==
        "SubscriberIdTooLong @ subscriber_id: subscriber_id has 200 bytes, at most 128 allowed");
  CHECK(judged({0x0A, 0x01, '\xff'}) ==  // no marker reads as 0
        "ContractMarker @ contract_marker: contract marker 0x00000000, expected 0x4b565231");
}

// =================================== descriptor pieces (docs/protocol/rpcs.md#validate-descriptor)

TEST_CASE("endpoint id: namespace, component and endpoint are valid text", "[wire]") {
  CHECK(describe_with_class(check_endpoint_id(valid_endpoint(), "e")) == "ok");
  CHECK(describe_with_class(check_endpoint_id(endpoint("", "backend", "generate"), "e")) ==
        "InvalidText malformed @ e.namespace");
  CHECK(describe_with_class(check_endpoint_id(endpoint("prod", " backend", "generate"), "e")) ==
        "InvalidText malformed @ e.component");
  CHECK(describe_with_class(check_endpoint_id(endpoint("prod", "backend", "generate\n"), "e")) ==
        "InvalidText malformed @ e.endpoint");
  CHECK(describe_with_class(check_endpoint_id(endpoint(" ", "", ""), "e")) == "InvalidText malformed @ e.namespace");
}

TEST_CASE("model registration: text, target, aliases", "[wire]") {
  CHECK(describe_with_class(check_model_registration(base_registration(), "r")) == "ok");
  CHECK(describe_with_class(check_model_registration(lora_registration(), "r")) == "ok");

  auto registration = base_registration();
  registration.set_canonical_model_id("llama ");
  CHECK(describe_with_class(check_model_registration(registration, "r")) ==
        "InvalidText malformed @ r.canonical_model_id");

  SECTION("a missing target message is malformed, an unset alternative unsupported") {
    registration = base_registration();
    registration.clear_target();
    CHECK(describe_with_class(check_model_registration(registration, "r")) == "MissingField malformed @ r.target");
    registration.mutable_target();  // present, no alternative
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "MissingModelTarget unsupported @ r.target");
  }

  SECTION("a future oneof alternative decodes as unset and is unsupported") {
    // ModelRegistration{canonical_model_id: "m", target: ModelTarget{<field 3>: {}}}.
    const std::string wire("\x0A\x01m\x12\x02\x1A\x00", 7);
    v1::ModelRegistration decoded;
    REQUIRE(decoded.ParseFromString(wire));
    REQUIRE(decoded.has_target());
    CHECK(describe_with_class(check_model_registration(decoded, "r")) == "MissingModelTarget unsupported @ r.target");
  }

  SECTION("target texts") {
    registration = base_registration();
    registration.mutable_target()->mutable_base()->set_base_model("");
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "InvalidText malformed @ r.target.base.base_model");
    registration = lora_registration();
    registration.mutable_target()->mutable_lora()->set_base_model(utf8(0x3000) + "llama");
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "InvalidText malformed @ r.target.lora.base_model");
    registration = lora_registration();
    registration.mutable_target()->mutable_lora()->set_adapter("");
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "InvalidText malformed @ r.target.lora.adapter");
  }

  SECTION("aliases: each valid text, none repeated") {
    registration = base_registration();
    registration.add_aliases(" chat");
    CHECK(describe_with_class(check_model_registration(registration, "r")) == "InvalidText malformed @ r.aliases[2]");
    registration = base_registration();
    registration.add_aliases("chat");
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "DuplicateAlias malformed @ r.aliases[2]");
  }

  SECTION("order: canonical id, target, aliases") {
    registration = base_registration();
    registration.set_canonical_model_id("");
    registration.clear_target();
    registration.add_aliases("");
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "InvalidText malformed @ r.canonical_model_id");
    registration.set_canonical_model_id("llama");
    registration.mutable_target();
    CHECK(describe_with_class(check_model_registration(registration, "r")) ==
          "MissingModelTarget unsupported @ r.target");
  }
}

TEST_CASE("query semantics: block size, hash format", "[wire]") {
  CHECK(describe_with_class(check_query_semantics(valid_semantics(), "q")) == "ok");
  auto semantics = valid_semantics();
  semantics.set_hash_format(v1::KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1);
  CHECK(describe_with_class(check_query_semantics(semantics, "q")) == "ok");

  semantics = valid_semantics();
  semantics.set_kv_block_size(0);
  CHECK(describe_with_class(check_query_semantics(semantics, "q")) == "BlockSize malformed @ q.kv_block_size");

  semantics = valid_semantics();
  semantics.set_hash_format(v1::KV_QUERY_HASH_FORMAT_UNSPECIFIED);
  CHECK(describe_with_class(check_query_semantics(semantics, "q")) == "HashFormat malformed @ q.hash_format");
  for (const int value : {3, 99, -5}) {
    semantics.set_hash_format(raw<v1::KvQueryHashFormat>(value));
    CHECK(describe_with_class(check_query_semantics(semantics, "q")) == "HashFormat unsupported @ q.hash_format");
  }

  // Order: block size before format.
  semantics.set_kv_block_size(0);
  CHECK(describe_with_class(check_query_semantics(semantics, "q")) == "BlockSize malformed @ q.kv_block_size");
}

TEST_CASE("an unknown enum value survives a wire round trip and stays unsupported", "[wire]") {
  auto semantics = valid_semantics();
  semantics.set_hash_format(raw<v1::KvQueryHashFormat>(7));
  v1::KvQuerySemantics decoded;
  REQUIRE(decoded.ParseFromString(semantics.SerializeAsString()));
  CHECK(static_cast<int>(decoded.hash_format()) == 7);
  CHECK(describe_with_class(check_query_semantics(decoded, "q")) == "HashFormat unsupported @ q.hash_format");
}

TEST_CASE("worker roles: non-empty, known, unique", "[wire]") {
  v1::TopologyMember holder;  // any message with a repeated WorkerRole field
  auto& roles = *holder.mutable_roles();
  CHECK(describe_with_class(check_worker_roles(roles, "roles")) == "EmptyRoles malformed @ roles");

  for (const int role : {1, 2, 3, 4, 5}) roles.Add(role);
  CHECK(describe_with_class(check_worker_roles(roles, "roles")) == "ok");

  roles.Clear();
  roles.Add(v1::WORKER_ROLE_DECODE);
  roles.Add(v1::WORKER_ROLE_UNSPECIFIED);
  CHECK(describe_with_class(check_worker_roles(roles, "roles")) == "WorkerRole malformed @ roles[1]");

  for (const int unknown : {6, 99, -1}) {
    roles.Clear();
    roles.Add(unknown);
    CHECK(describe_with_class(check_worker_roles(roles, "roles")) == "WorkerRole unsupported @ roles[0]");
  }

  roles.Clear();
  roles.Add(v1::WORKER_ROLE_DECODE);
  roles.Add(v1::WORKER_ROLE_PREFILL);
  roles.Add(v1::WORKER_ROLE_DECODE);
  CHECK(describe_with_class(check_worker_roles(roles, "roles")) == "DuplicateRole malformed @ roles[2]");

  // Elements are judged in order: a repeat before an unknown role reports the repeat.
  roles.Add(99);
  CHECK(describe_with_class(check_worker_roles(roles, "roles")) == "DuplicateRole malformed @ roles[2]");
}

TEST_CASE("pool descriptor: producer, endpoint, semantics, registrations, roles in order", "[wire]") {
  CHECK(describe_with_class(check_pool_descriptor(valid_descriptor(), "")) == "ok");
  CHECK(describe_with_class(check_pool_descriptor(valid_descriptor(), "snapshot.pools[0]")) == "ok");

  SECTION("an empty registrations list is accepted by the wire validator") {
    auto descriptor = valid_descriptor();
    descriptor.clear_registrations();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "")) == "ok");
  }

  SECTION("each part missing or invalid") {
    auto descriptor = valid_descriptor();
    descriptor.clear_producer();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) == "MissingField malformed @ d.producer");
    descriptor = valid_descriptor();
    descriptor.clear_serving_endpoint();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) == "MissingField malformed @ d.serving_endpoint");
    descriptor = valid_descriptor();
    descriptor.clear_query_semantics();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) == "MissingField malformed @ d.query_semantics");
    descriptor = valid_descriptor();
    descriptor.mutable_registrations(1)->mutable_target()->clear_target();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) ==
          "MissingModelTarget unsupported @ d.registrations[1].target");
    descriptor = valid_descriptor();
    descriptor.clear_pool_roles();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) == "EmptyRoles malformed @ d.pool_roles");
    descriptor = valid_descriptor();
    descriptor.add_pool_roles(raw<v1::WorkerRole>(42));
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) == "WorkerRole unsupported @ d.pool_roles[2]");
  }

  SECTION("order") {
    auto descriptor = valid_descriptor();
    descriptor.mutable_producer()->set_layout_generation(0);
    descriptor.mutable_serving_endpoint()->set_component("");
    descriptor.mutable_query_semantics()->set_hash_format(raw<v1::KvQueryHashFormat>(9));
    descriptor.mutable_registrations(0)->set_canonical_model_id("");
    descriptor.clear_pool_roles();
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) ==
          "LayoutGeneration malformed @ d.producer.layout_generation");
    descriptor.mutable_producer()->set_layout_generation(1);
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) ==
          "InvalidText malformed @ d.serving_endpoint.component");
    descriptor.mutable_serving_endpoint()->set_component("backend");
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) ==
          "HashFormat unsupported @ d.query_semantics.hash_format");
    descriptor.mutable_query_semantics()->set_hash_format(v1::KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1);
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) ==
          "InvalidText malformed @ d.registrations[0].canonical_model_id");
    descriptor.mutable_registrations(0)->set_canonical_model_id("llama");
    CHECK(describe_with_class(check_pool_descriptor(descriptor, "d")) == "EmptyRoles malformed @ d.pool_roles");
  }
}

// ================================== topology entry (docs/protocol/rpcs.md#validate-topology-entry)

TEST_CASE("topology entry: keys, state and role sets", "[wire]") {
  CHECK(describe_with_class(check_topology_entry(valid_entry(), "")) == "ok");

  SECTION("UNKNOWN is a valid state; role sets may be empty") {
    auto entry = valid_entry();
    entry.set_state(v1::SERVING_READINESS_STATE_UNKNOWN);
    entry.clear_present_roles();
    entry.clear_missing_roles();
    entry.clear_duplicate_role_endpoints();
    entry.clear_adapters();
    CHECK(describe_with_class(check_topology_entry(entry, "")) == "ok");
  }

  SECTION("namespace and canonical id are valid text") {
    auto entry = valid_entry();
    entry.set_namespace_("");
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "InvalidText malformed @ t.namespace");
    entry = valid_entry();
    entry.set_canonical_model_id("llama\t");
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "InvalidText malformed @ t.canonical_model_id");
  }

  SECTION("an unknown state is unsupported") {
    for (const int state : {3, 99, -1}) {
      auto entry = valid_entry();
      entry.set_state(raw<v1::ServingReadinessState>(state));
      CHECK(describe_with_class(check_topology_entry(entry, "t")) == "ReadinessState unsupported @ t.state");
    }
  }

  SECTION("present and missing roles are sets of known roles") {
    auto entry = valid_entry();
    entry.add_present_roles(v1::WORKER_ROLE_PREFILL);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "DuplicateRole malformed @ t.present_roles[2]");
    entry = valid_entry();
    entry.add_present_roles(v1::WORKER_ROLE_UNSPECIFIED);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "WorkerRole malformed @ t.present_roles[2]");
    entry = valid_entry();
    entry.add_missing_roles(raw<v1::WorkerRole>(17));
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "WorkerRole unsupported @ t.missing_roles[0]");
    entry = valid_entry();
    entry.add_missing_roles(v1::WORKER_ROLE_ENCODE);
    entry.add_missing_roles(v1::WORKER_ROLE_ENCODE);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "DuplicateRole malformed @ t.missing_roles[1]");
  }

  SECTION("duplicate_role_endpoints: a set of PREFILL/DECODE only") {
    for (const auto role : {v1::WORKER_ROLE_ENCODE, v1::WORKER_ROLE_AGGREGATED, v1::WORKER_ROLE_LEGACY}) {
      auto entry = valid_entry();
      entry.clear_duplicate_role_endpoints();
      entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_DECODE);
      entry.add_duplicate_role_endpoints(role);
      CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
            "DuplicateEndpointRole malformed @ t.duplicate_role_endpoints[1]");
    }
    auto entry = valid_entry();
    entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_UNSPECIFIED);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "WorkerRole malformed @ t.duplicate_role_endpoints[2]");
    entry = valid_entry();
    entry.add_duplicate_role_endpoints(raw<v1::WorkerRole>(99));
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "WorkerRole unsupported @ t.duplicate_role_endpoints[2]");
    entry = valid_entry();
    entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_DECODE);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "DuplicateRole malformed @ t.duplicate_role_endpoints[2]");
    // The set rules cover the whole list first: a later unknown role beats an earlier LEGACY.
    entry = valid_entry();
    entry.clear_duplicate_role_endpoints();
    entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_LEGACY);
    entry.add_duplicate_role_endpoints(raw<v1::WorkerRole>(99));
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "WorkerRole unsupported @ t.duplicate_role_endpoints[1]");
  }
}

TEST_CASE("topology entry: members and adapters", "[wire]") {
  SECTION("at least one member") {
    auto entry = valid_entry();
    entry.clear_members();
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "NoMembers malformed @ t.members");
  }

  SECTION("member endpoint present, valid, in the entry namespace") {
    auto entry = valid_entry();
    entry.mutable_members(1)->clear_endpoint();
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "MissingField malformed @ t.members[1].endpoint");
    entry = valid_entry();
    entry.mutable_members(0)->mutable_endpoint()->set_endpoint(" generate");
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "InvalidText malformed @ t.members[0].endpoint.endpoint");
    entry = valid_entry();
    entry.mutable_members(1)->mutable_endpoint()->set_namespace_("staging");
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "MemberNamespace malformed @ t.members[1].endpoint.namespace");
  }

  SECTION("member roles are a non-empty valid set") {
    auto entry = valid_entry();
    entry.mutable_members(0)->clear_roles();
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "EmptyRoles malformed @ t.members[0].roles");
    entry = valid_entry();
    entry.mutable_members(0)->add_roles(raw<v1::WorkerRole>(77));
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "WorkerRole unsupported @ t.members[0].roles[1]");
  }

  SECTION("member pool id is optional but valid when present") {
    auto entry = valid_entry();
    entry.mutable_members(0)->clear_pool_id();
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "ok");
    entry = valid_entry();
    entry.mutable_members(1)->mutable_pool_id()->set_identity_version(2);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "IdentityVersion unsupported @ t.members[1].pool_id.identity_version");
    entry = valid_entry();
    auto* domain = entry.mutable_members(1)->mutable_pool_id()->mutable_indexer_domain();
    domain->mutable_routing_scope()->set_digest("x");
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "DigestLength malformed @ t.members[1].pool_id.indexer_domain.routing_scope.digest");
  }

  SECTION("members are unique as (namespace, component, endpoint) tuples") {
    auto entry = valid_entry();
    *entry.add_members() = member("decode", v1::WORKER_ROLE_DECODE);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "DuplicateMember malformed @ t.members[2].endpoint");
    // Dots inside names must not make distinct tuples collide ("backend.a"+"generate" vs
    // "backend"+"a.generate" share the text form "prod.backend.a.generate").
    entry = valid_entry();
    entry.clear_members();
    *entry.add_members() = member("backend.a", v1::WORKER_ROLE_DECODE);
    auto second = member("backend", v1::WORKER_ROLE_DECODE);
    second.mutable_endpoint()->set_endpoint("a.generate");
    *entry.add_members() = second;
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "ok");
  }

  SECTION("adapters: id text, known state, missing_roles set, unique ids") {
    auto entry = valid_entry();
    entry.mutable_adapters(0)->set_canonical_model_id("");
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "InvalidText malformed @ t.adapters[0].canonical_model_id");
    entry = valid_entry();
    entry.mutable_adapters(0)->set_state(raw<v1::ServingReadinessState>(5));
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "ReadinessState unsupported @ t.adapters[0].state");
    entry = valid_entry();
    entry.mutable_adapters(0)->set_state(v1::SERVING_READINESS_STATE_UNKNOWN);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) == "ok");
    entry = valid_entry();
    entry.mutable_adapters(0)->add_missing_roles(v1::WORKER_ROLE_UNSPECIFIED);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "WorkerRole malformed @ t.adapters[0].missing_roles[1]");
    entry = valid_entry();
    *entry.add_adapters() = entry.adapters(0);
    CHECK(describe_with_class(check_topology_entry(entry, "t")) ==
          "DuplicateAdapter malformed @ t.adapters[1].canonical_model_id");
  }
}

TEST_CASE("topology entry check order", "[wire]") {
  auto entry = valid_entry();
  entry.set_canonical_model_id("");
  entry.set_state(raw<v1::ServingReadinessState>(9));
  entry.add_present_roles(raw<v1::WorkerRole>(99));
  entry.add_missing_roles(raw<v1::WorkerRole>(0));
  entry.add_duplicate_role_endpoints(v1::WORKER_ROLE_LEGACY);
  entry.mutable_members(0)->mutable_endpoint()->set_namespace_("other");
  entry.mutable_members(0)->clear_roles();
  entry.mutable_adapters(0)->set_canonical_model_id("");

  const std::vector<std::string> expected = {
      "InvalidText malformed @ canonical_model_id",
      "ReadinessState unsupported @ state",
      "WorkerRole unsupported @ present_roles[2]",
      "WorkerRole malformed @ missing_roles[0]",
      "DuplicateEndpointRole malformed @ duplicate_role_endpoints[2]",
      "MemberNamespace malformed @ members[0].endpoint.namespace",
      "EmptyRoles malformed @ members[0].roles",
      "InvalidText malformed @ adapters[0].canonical_model_id",
  };
  // Fix each reported fault in turn: the next one surfaces in the listed order.
  const std::vector<void (*)(v1::TopologyEntry&)> fixes = {
      [](v1::TopologyEntry& e) { e.set_canonical_model_id("llama"); },
      [](v1::TopologyEntry& e) { e.set_state(v1::SERVING_READINESS_STATE_READY); },
      [](v1::TopologyEntry& e) { e.mutable_present_roles()->RemoveLast(); },
      [](v1::TopologyEntry& e) { e.clear_missing_roles(); },
      [](v1::TopologyEntry& e) { e.mutable_duplicate_role_endpoints()->RemoveLast(); },
      [](v1::TopologyEntry& e) { e.mutable_members(0)->mutable_endpoint()->set_namespace_("prod"); },
      [](v1::TopologyEntry& e) { e.mutable_members(0)->add_roles(v1::WORKER_ROLE_PREFILL); },
      [](v1::TopologyEntry& e) { e.mutable_adapters(0)->set_canonical_model_id("tenant-a"); },
  };
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(describe_with_class(check_topology_entry(entry, "")) == expected[i]);
    fixes[i](entry);
  }
  CHECK(describe_with_class(check_topology_entry(entry, "")) == "ok");

  // Within a member: endpoint checks, namespace, roles, pool id, then uniqueness.
  entry = valid_entry();
  *entry.add_members() = member("decode", v1::WORKER_ROLE_DECODE);
  entry.mutable_members(2)->mutable_pool_id()->set_identity_version(0);
  CHECK(describe_with_class(check_topology_entry(entry, "")) ==
        "IdentityVersion malformed @ members[2].pool_id.identity_version");
}

// ===================================== unsupported list (docs/protocol/rpcs.md#unsupported-values)

TEST_CASE("request errors map to the RelayErrorReason the server sends", "[wire]") {
  const auto error_with = [](ErrorCode code, ErrorClass error_class) { return Error{code, error_class, "f", "m"}; };
  CHECK(request_error_reason(error_with(ErrorCode::kContractMarker, ErrorClass::kMalformed)) ==
        v1::RELAY_ERROR_REASON_CONTRACT_MISMATCH);
  CHECK(request_error_reason(error_with(ErrorCode::kIdentityVersion, ErrorClass::kUnsupported)) ==
        v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE);
  CHECK(request_error_reason(error_with(ErrorCode::kIdentityVersion, ErrorClass::kMalformed)) ==
        v1::RELAY_ERROR_REASON_INVALID_REQUEST);
  CHECK(request_error_reason(error_with(ErrorCode::kSubscriberIdTooLong, ErrorClass::kMalformed)) ==
        v1::RELAY_ERROR_REASON_INVALID_REQUEST);
}

// ================================================ frozen key (docs/protocol/pools.md#producer-key)

TEST_CASE("producer key: equal iff every frozen field is equal", "[wire]") {
  const auto base = valid_producer();
  CHECK(producer_key(base) == producer_key(v1::ProducerIdentity(base)));

  using Mutation = void (*)(v1::ProducerIdentity&);
  const std::vector<std::pair<const char*, Mutation>> mutations = {
      {"identity_version", [](v1::ProducerIdentity& p) { p.mutable_pool_id()->set_identity_version(2); }},
      {"cache_semantics.digest",
       [](v1::ProducerIdentity& p) {
         p.mutable_pool_id()->mutable_indexer_domain()->mutable_cache_semantics()->set_digest(std::string(16, '\x12'));
       }},
      {"cache_semantics.source",
       [](v1::ProducerIdentity& p) {
         p.mutable_pool_id()->mutable_indexer_domain()->mutable_cache_semantics()->set_source(
             v1::IDENTITY_SOURCE_EXPLICIT);
       }},
      {"routing_scope.digest",
       [](v1::ProducerIdentity& p) {
         p.mutable_pool_id()->mutable_indexer_domain()->mutable_routing_scope()->set_digest(std::string(16, '\x23'));
       }},
      {"routing_scope.source",
       [](v1::ProducerIdentity& p) {
         p.mutable_pool_id()->mutable_indexer_domain()->mutable_routing_scope()->set_source(
             v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
       }},
      {"dc_id", [](v1::ProducerIdentity& p) { p.mutable_pool_id()->set_dc_id(p.pool_id().dc_id() + 1); }},
      {"producer_incarnation",
       [](v1::ProducerIdentity& p) { p.set_producer_incarnation(p.producer_incarnation() + 1); }},
      {"layout_generation", [](v1::ProducerIdentity& p) { p.set_layout_generation(2); }},
      {"format_version", [](v1::ProducerIdentity& p) { p.mutable_ckf_format()->set_format_version(2); }},
      {"seed", [](v1::ProducerIdentity& p) { p.mutable_ckf_format()->set_seed(1); }},
      {"bucket_count", [](v1::ProducerIdentity& p) { p.mutable_ckf_format()->set_bucket_count(1024); }},
      {"fingerprint_bits", [](v1::ProducerIdentity& p) { p.mutable_ckf_format()->set_fingerprint_bits(8); }},
      {"slots_per_bucket", [](v1::ProducerIdentity& p) { p.mutable_ckf_format()->set_slots_per_bucket(8); }},
  };
  std::set<ProducerKey> distinct{producer_key(base)};
  for (const auto& [name, mutate] : mutations) {
    INFO(name);
    auto changed = base;
    mutate(changed);
    CHECK(producer_key(changed) != producer_key(base));
    distinct.insert(producer_key(changed));
  }
  // Each field on its own separates keys, also inside an ordered container.
  CHECK(distinct.size() == mutations.size() + 1);
}

TEST_CASE("producer key: descriptor metadata does not take part", "[wire]") {
  const auto first = valid_descriptor();
  auto second = valid_descriptor();
  *second.mutable_serving_endpoint() = endpoint("prod", "other-backend", "serve");
  second.clear_registrations();
  *second.add_registrations() = lora_registration();
  second.mutable_query_semantics()->set_kv_block_size(16);
  second.mutable_query_semantics()->set_hash_format(v1::KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1);
  second.clear_pool_roles();
  second.add_pool_roles(v1::WORKER_ROLE_AGGREGATED);
  CHECK(producer_key(first.producer()) == producer_key(second.producer()));

  // The stable pool key ignores the generation, the producer key does not.
  auto next_generation = valid_producer();
  next_generation.set_layout_generation(2);
  CHECK(pool_key(next_generation.pool_id()) == pool_key(valid_producer().pool_id()));
  CHECK(producer_key(next_generation) != producer_key(valid_producer()));
}

TEST_CASE("try_producer_key validates before building the key", "[wire]") {
  const auto key = try_producer_key(valid_producer(), "p");
  REQUIRE(key.has_value());
  CHECK(*key == producer_key(valid_producer()));
  CHECK(key->ckf_format.bucket_count == 524288);
  CHECK(key->pool.cache_semantics.digest == std::string(16, '\x11'));

  auto bad = valid_producer();
  bad.set_layout_generation(0);
  const auto refused = try_producer_key(bad, "p");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::kLayoutGeneration);
  CHECK(refused.error().field == "p.layout_generation");
}

// ===================================================================== responses

TEST_CASE("RelayInfo: envelope then relay identity", "[wire]") {
  v1::RelayInfo info;
  set_envelope(info);
  CHECK(describe_with_class(check_response(info)) == "ok");
  info.set_protocol_version(2);
  CHECK(describe_with_class(check_response(info)) == "ProtocolVersion malformed @ protocol_version");
  info.set_contract_marker(0);
  CHECK(describe_with_class(check_response(info)) == "ContractMarker malformed @ contract_marker");
  set_envelope(info);
  info.clear_relay();
  CHECK(describe_with_class(check_response(info)) == "MissingField malformed @ relay");
}

TEST_CASE("catalog update: snapshot present, pools identifiable and unique", "[wire]") {
  v1::KvPoolCatalogUpdate update;
  set_envelope(update);
  CHECK(describe_with_class(check_response(update)) == "MissingField malformed @ snapshot");
  update.mutable_snapshot();  // present and empty: nothing is published
  CHECK(describe_with_class(check_response(update)) == "ok");

  *update.mutable_snapshot()->add_pools() = valid_descriptor();
  auto other = valid_descriptor();
  other.mutable_producer()->mutable_pool_id()->set_dc_id(5);
  *update.mutable_snapshot()->add_pools() = other;
  CHECK(describe_with_class(check_response(update)) == "ok");

  SECTION("an entry-level fault quarantines only that entry, not the catalog") {
    update.mutable_snapshot()->mutable_pools(1)->clear_pool_roles();
    update.mutable_snapshot()->mutable_pools(1)->mutable_producer()->set_layout_generation(0);
    CHECK(describe_with_class(check_response(update)) == "ok");
    CHECK(describe_with_class(check_pool_descriptor(update.snapshot().pools(1), "snapshot.pools[1]")) ==
          "LayoutGeneration malformed @ snapshot.pools[1].producer.layout_generation");
  }

  SECTION("the same pool id twice is malformed, whatever the generation") {
    auto repeat = valid_descriptor();
    repeat.mutable_producer()->set_layout_generation(7);
    *update.mutable_snapshot()->add_pools() = repeat;
    CHECK(describe_with_class(check_response(update)) ==
          "DuplicatePool malformed @ snapshot.pools[2].producer.pool_id");
  }

  SECTION("unsupported pool ids are left to their entry check") {
    for (int i = 0; i < 2; ++i) {
      auto future = valid_descriptor();
      future.mutable_producer()->mutable_pool_id()->set_identity_version(2);
      *update.mutable_snapshot()->add_pools() = future;
    }
    CHECK(describe_with_class(check_response(update)) == "ok");
  }

  SECTION("a pool that cannot be identified invalidates the catalog") {
    auto* producer = update.mutable_snapshot()->mutable_pools(1)->mutable_producer();
    producer->mutable_pool_id()->set_identity_version(0);
    CHECK(describe_with_class(check_response(update)) ==
          "IdentityVersion malformed @ snapshot.pools[1].producer.pool_id.identity_version");
    producer->clear_pool_id();
    CHECK(describe_with_class(check_response(update)) == "MissingField malformed @ snapshot.pools[1].producer.pool_id");
    update.mutable_snapshot()->mutable_pools(1)->clear_producer();
    CHECK(describe_with_class(check_response(update)) == "MissingField malformed @ snapshot.pools[1].producer");
  }

  SECTION("envelope first") {
    update.set_protocol_version(0);
    update.clear_snapshot();
    CHECK(describe_with_class(check_response(update)) == "ProtocolVersion malformed @ protocol_version");
  }
}

TEST_CASE("filter update: producer, kind, payload and sequences", "[wire]") {
  for (const auto kind :
       {v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, v1::FILTER_UPDATE_KIND_DELTA, v1::FILTER_UPDATE_KIND_HEARTBEAT}) {
    CHECK(describe_with_class(check_response(valid_frame(kind))) == "ok");
  }

  auto frame = valid_frame(v1::FILTER_UPDATE_KIND_DELTA);
  frame.clear_relay();
  CHECK(describe_with_class(check_response(frame)) == "MissingField malformed @ relay");
  frame = valid_frame(v1::FILTER_UPDATE_KIND_DELTA);
  frame.clear_producer();
  CHECK(describe_with_class(check_response(frame)) == "MissingField malformed @ producer");
  frame = valid_frame(v1::FILTER_UPDATE_KIND_DELTA);
  frame.mutable_producer()->mutable_ckf_format()->set_format_version(2);
  CHECK(describe_with_class(check_response(frame)) == "CkfFormat unsupported @ producer.ckf_format.format_version");

  // Frame kinds are not on the unsupported list: an unknown kind invalidates the replica.
  for (const int kind : {0, 4, 99}) {
    frame = valid_frame(v1::FILTER_UPDATE_KIND_DELTA);
    frame.set_kind(raw<v1::FilterUpdateKind>(kind));
    CHECK(describe_with_class(check_response(frame)) == "FilterUpdateKind malformed @ kind");
  }

  frame = valid_frame(v1::FILTER_UPDATE_KIND_HEARTBEAT);
  frame.set_payload("x");
  CHECK(describe_with_class(check_response(frame)) == "FilterPayload malformed @ payload");
  frame = valid_frame(v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  frame.clear_payload();
  CHECK(describe_with_class(check_response(frame)) == "FilterPayload malformed @ payload");

  frame = valid_frame(v1::FILTER_UPDATE_KIND_DELTA);
  frame.set_sequence(43);
  CHECK(describe_with_class(check_response(frame)) == "FilterSequence malformed @ sequence");
  frame.set_base_sequence(std::numeric_limits<std::uint64_t>::max());
  frame.set_sequence(0);  // u64 wrap-around is a violation, not a successor
  CHECK(describe_with_class(check_response(frame)) == "FilterSequence malformed @ sequence");
  frame = valid_frame(v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  frame.set_sequence(42);
  CHECK(describe_with_class(check_response(frame)) == "FilterSequence malformed @ sequence");
  frame = valid_frame(v1::FILTER_UPDATE_KIND_HEARTBEAT);
  frame.set_sequence(0);
  CHECK(describe_with_class(check_response(frame)) == "FilterSequence malformed @ sequence");
  // A first snapshot of a new generation sits at sequence 0.
  frame = valid_frame(v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK);
  frame.set_base_sequence(0);
  frame.set_sequence(0);
  CHECK(describe_with_class(check_response(frame)) == "ok");
}

TEST_CASE("readiness update: entry keys valid and unique", "[wire]") {
  v1::ServingReadinessUpdate update;
  set_envelope(update);
  CHECK(describe_with_class(check_response(update)) == "ok");  // no entries is a valid topology
  *update.add_entries() = valid_entry();
  auto other = valid_entry();
  other.set_canonical_model_id("mistral");
  other.clear_members();  // an entry fault: quarantines that entry only
  *update.add_entries() = other;
  CHECK(describe_with_class(check_response(update)) == "ok");

  auto same_model_other_namespace = valid_entry();
  same_model_other_namespace.set_namespace_("staging");
  *update.add_entries() = same_model_other_namespace;
  CHECK(describe_with_class(check_response(update)) == "ok");

  *update.add_entries() = valid_entry();
  CHECK(describe_with_class(check_response(update)) == "DuplicateEntry malformed @ entries[3]");
  update.mutable_entries(3)->set_namespace_(" prod");
  CHECK(describe_with_class(check_response(update)) == "InvalidText malformed @ entries[3].namespace");
}

TEST_CASE("load update and entries: producers present, supported ones unique", "[wire]") {
  v1::KvPoolLoadEntry entry;
  CHECK(describe_with_class(check_load_entry(entry, "e")) == "MissingField malformed @ e.producer");
  *entry.mutable_producer() = valid_producer();
  entry.set_kv_used_blocks(10);
  entry.set_total_kv_blocks(100);
  CHECK(describe_with_class(check_load_entry(entry, "e")) == "ok");
  entry.mutable_producer()->set_layout_generation(0);
  CHECK(describe_with_class(check_load_entry(entry, "e")) ==
        "LayoutGeneration malformed @ e.producer.layout_generation");

  v1::KvPoolLoadUpdate update;
  set_envelope(update);
  CHECK(describe_with_class(check_response(update)) == "ok");  // an idle window
  update.add_pools()->mutable_producer()->CopyFrom(valid_producer());
  auto next = valid_producer();
  next.set_layout_generation(2);  // another generation of the same pool is another producer
  update.add_pools()->mutable_producer()->CopyFrom(next);
  CHECK(describe_with_class(check_response(update)) == "ok");

  SECTION("the same producer twice") {
    update.add_pools()->mutable_producer()->CopyFrom(valid_producer());
    CHECK(describe_with_class(check_response(update)) == "DuplicateProducer malformed @ pools[2].producer");
  }
  SECTION("unsupported producers are skipped, malformed ones invalidate the window") {
    for (int i = 0; i < 2; ++i) {
      auto future = valid_producer();
      future.mutable_ckf_format()->set_slots_per_bucket(8);
      update.add_pools()->mutable_producer()->CopyFrom(future);
    }
    CHECK(describe_with_class(check_response(update)) == "ok");
    update.mutable_pools(0)->mutable_producer()->clear_ckf_format();
    CHECK(describe_with_class(check_response(update)) == "MissingField malformed @ pools[0].producer.ckf_format");
    update.mutable_pools(0)->clear_producer();
    CHECK(describe_with_class(check_response(update)) == "MissingField malformed @ pools[0].producer");
  }
}

TEST_CASE("pool serving load: status and presence rules", "[wire]") {
  CHECK(describe_with_class(check_pool_serving_load(valid_pool_serving_load(true), "p")) == "ok");
  CHECK(describe_with_class(check_pool_serving_load(valid_pool_serving_load(false), "p")) == "ok");

  auto pool = valid_pool_serving_load(true);
  pool.clear_producer();
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "MissingField malformed @ p.producer");
  pool = valid_pool_serving_load(true);
  pool.mutable_producer()->mutable_pool_id()->set_identity_version(9);
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) ==
        "IdentityVersion unsupported @ p.producer.pool_id.identity_version");
  pool = valid_pool_serving_load(true);
  pool.clear_load();
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "MissingField malformed @ p.load");

  pool = valid_pool_serving_load(true);
  pool.mutable_load()->set_status(v1::DATA_STATUS_UNSPECIFIED);
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "DataStatus malformed @ p.load.status");
  pool.mutable_load()->set_status(raw<v1::DataStatus>(4));
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "DataStatus unsupported @ p.load.status");

  pool = valid_pool_serving_load(true);
  pool.mutable_load()->mutable_requests();
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "LoadViewField malformed @ p.load.requests");
  pool = valid_pool_serving_load(true);
  pool.mutable_load()->clear_tokens();
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "MissingField malformed @ p.load.tokens");

  // Aggregate gauges are set iff COMPLETE.
  pool = valid_pool_serving_load(true);
  pool.mutable_load()->mutable_tokens()->clear_active_decode_blocks();
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) ==
        "LoadViewField malformed @ p.load.tokens.active_decode_blocks");
  pool = valid_pool_serving_load(false);
  pool.mutable_load()->mutable_tokens()->set_active_prefill_tokens(0);
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) ==
        "LoadViewField malformed @ p.load.tokens.active_prefill_tokens");
  // Model-only token fields never appear on a pool.
  pool = valid_pool_serving_load(true);
  pool.mutable_load()->mutable_tokens()->set_output_tokens_total(1);
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) ==
        "LoadViewField malformed @ p.load.tokens.output_tokens_total");

  pool = valid_pool_serving_load(true);
  pool.clear_deployment();
  CHECK(describe_with_class(check_pool_serving_load(pool, "p")) == "MissingField malformed @ p.deployment");
}

TEST_CASE("model serving load: keys, status, presence rules, serving pools", "[wire]") {
  CHECK(describe_with_class(check_model_serving_load(valid_model_serving_load(true), "m")) == "ok");
  CHECK(describe_with_class(check_model_serving_load(valid_model_serving_load(false), "m")) == "ok");

  auto model = valid_model_serving_load(true);
  model.set_namespace_("");
  CHECK(describe_with_class(check_model_serving_load(model, "m")) == "InvalidText malformed @ m.namespace");
  model = valid_model_serving_load(true);
  model.mutable_load()->set_status(raw<v1::DataStatus>(12));
  CHECK(describe_with_class(check_model_serving_load(model, "m")) == "DataStatus unsupported @ m.load.status");
  model = valid_model_serving_load(true);
  model.mutable_load()->clear_requests();
  CHECK(describe_with_class(check_model_serving_load(model, "m")) == "MissingField malformed @ m.load.requests");
  model = valid_model_serving_load(true);
  model.mutable_load()->mutable_requests()->clear_requests_generating();
  CHECK(describe_with_class(check_model_serving_load(model, "m")) ==
        "LoadViewField malformed @ m.load.requests.requests_generating");
  model = valid_model_serving_load(false);
  model.mutable_load()->mutable_tokens()->set_inflight_input_tokens(1);
  CHECK(describe_with_class(check_model_serving_load(model, "m")) ==
        "LoadViewField malformed @ m.load.tokens.inflight_input_tokens");
  model = valid_model_serving_load(false);
  model.mutable_load()->mutable_tokens()->clear_input_tokens_total();
  CHECK(describe_with_class(check_model_serving_load(model, "m")) ==
        "LoadViewField malformed @ m.load.tokens.input_tokens_total");
  model = valid_model_serving_load(true);
  model.mutable_load()->mutable_tokens()->set_active_decode_blocks(3);
  CHECK(describe_with_class(check_model_serving_load(model, "m")) ==
        "LoadViewField malformed @ m.load.tokens.active_decode_blocks");
  model = valid_model_serving_load(true);
  model.clear_deployment();
  CHECK(describe_with_class(check_model_serving_load(model, "m")) == "MissingField malformed @ m.deployment");

  model = valid_model_serving_load(true);
  *model.mutable_deployment()->add_serving_pools() = valid_pool_id();
  CHECK(describe_with_class(check_model_serving_load(model, "m")) ==
        "DuplicateServingPool malformed @ m.deployment.serving_pools[1]");
  model.mutable_deployment()->mutable_serving_pools(1)->set_dc_id(1);
  CHECK(describe_with_class(check_model_serving_load(model, "m")) == "ok");
  model.mutable_deployment()->mutable_serving_pools(1)->set_identity_version(0);
  CHECK(describe_with_class(check_model_serving_load(model, "m")) ==
        "IdentityVersion malformed @ m.deployment.serving_pools[1].identity_version");
}

TEST_CASE("serving load window: envelope, unique producers and models", "[wire]") {
  v1::ServingLoadUpdate update;
  set_envelope(update);
  *update.add_pools() = valid_pool_serving_load(true);
  *update.add_models() = valid_model_serving_load(true);
  auto other_model = valid_model_serving_load(false);
  other_model.set_namespace_("staging");
  *update.add_models() = other_model;
  CHECK(describe_with_class(check_response(update)) == "ok");

  SECTION("duplicates") {
    *update.add_models() = valid_model_serving_load(false);
    CHECK(describe_with_class(check_response(update)) == "DuplicateModel malformed @ models[2]");
    update.mutable_models()->RemoveLast();
    *update.add_pools() = valid_pool_serving_load(false);
    CHECK(describe_with_class(check_response(update)) == "DuplicateProducer malformed @ pools[1].producer");
  }
  SECTION("an unsupported pool identity is skipped at window level") {
    auto future = valid_pool_serving_load(true);
    auto* domain = future.mutable_producer()->mutable_pool_id()->mutable_indexer_domain();
    domain->mutable_cache_semantics()->set_source(raw<v1::IdentitySource>(3));
    *update.add_pools() = future;
    *update.add_pools() = future;
    CHECK(describe_with_class(check_response(update)) == "ok");
  }
  SECTION("keys and envelope") {
    update.mutable_models(1)->set_canonical_model_id("");
    CHECK(describe_with_class(check_response(update)) == "InvalidText malformed @ models[1].canonical_model_id");
    update.mutable_pools(0)->clear_producer();
    CHECK(describe_with_class(check_response(update)) == "MissingField malformed @ pools[0].producer");
    update.set_contract_marker(1);
    CHECK(describe_with_class(check_response(update)) == "ContractMarker malformed @ contract_marker");
  }
}
