#pragma once
// Hand-built dynamo.kvrelay.v1 messages for consumer tests: valid by default, so each test
// breaks exactly the field it is about.
#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cbi1.hpp"
#include "core/wire_validation.hpp"

namespace kvrelay::test {

namespace v1 = ::dynamo::kvrelay::v1;

inline constexpr std::uint64_t kSeed = 0x5DEECE66D1B54A33;
inline constexpr std::uint64_t kBuckets = 1024;

inline v1::RelayIdentity relay_identity(std::uint64_t incarnation = 7) {
  v1::RelayIdentity relay;
  relay.set_drt_instance_id(42);
  relay.set_relay_incarnation(incarnation);
  return relay;
}

template <class Message>
Message with_envelope(Message message, std::uint64_t incarnation = 7) {
  message.set_contract_marker(wire::kContractMarker);
  message.set_protocol_version(wire::kProtocolVersion);
  *message.mutable_relay() = relay_identity(incarnation);
  return message;
}

// Pools differ by their routing-scope digest byte `pool`.
inline v1::ProducerIdentity producer(std::uint8_t pool, std::uint64_t generation = 1, std::uint64_t dc_id = 0xDC,
                                     std::uint64_t bucket_count = kBuckets) {
  v1::ProducerIdentity identity;
  auto* id = identity.mutable_pool_id();
  id->set_identity_version(1);
  id->set_dc_id(dc_id);
  auto* cache = id->mutable_indexer_domain()->mutable_cache_semantics();
  cache->set_digest(std::string(16, '\x11'));
  cache->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  auto* scope = id->mutable_indexer_domain()->mutable_routing_scope();
  scope->set_digest(std::string(16, static_cast<char>(pool)));
  scope->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  identity.set_producer_incarnation(99);
  identity.set_layout_generation(generation);
  auto* format = identity.mutable_ckf_format();
  format->set_format_version(1);
  format->set_seed(kSeed);
  format->set_bucket_count(bucket_count);
  format->set_fingerprint_bits(16);
  format->set_slots_per_bucket(4);
  return identity;
}

inline v1::KvPoolDescriptor descriptor(std::uint8_t pool, const std::string& model = "llama",
                                       std::vector<std::string> aliases = {}, std::uint32_t block_size = 4) {
  v1::KvPoolDescriptor out;
  *out.mutable_producer() = producer(pool);
  out.mutable_serving_endpoint()->set_namespace_("prod");
  out.mutable_serving_endpoint()->set_component(fmt::format("backend-{}", pool));
  out.mutable_serving_endpoint()->set_endpoint("generate");
  auto* registration = out.add_registrations();
  registration->set_canonical_model_id(model);
  registration->mutable_target()->mutable_base()->set_base_model(model);
  for (auto& alias : aliases) registration->add_aliases(alias);
  out.mutable_query_semantics()->set_kv_block_size(block_size);
  out.mutable_query_semantics()->set_hash_format(v1::KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1);
  out.add_pool_roles(v1::WORKER_ROLE_AGGREGATED);
  return out;
}

inline void add_lora(v1::KvPoolDescriptor& pool, const std::string& adapter) {
  auto* registration = pool.add_registrations();
  registration->set_canonical_model_id(adapter);
  registration->mutable_target()->mutable_lora()->set_base_model(pool.registrations(0).canonical_model_id());
  registration->mutable_target()->mutable_lora()->set_adapter(adapter);
}

// One row of the contract's quarantine table for a catalog pool: how to break a valid
// descriptor, and whether its PoolId stays trustworthy.
struct PoolBreaker {
  std::string name;
  std::function<void(v1::KvPoolDescriptor&)> apply;
  bool keyed = true;
};

inline std::vector<PoolBreaker> pool_breakers() {
  return {
      {"unknown identity version",
       [](auto& pool) { pool.mutable_producer()->mutable_pool_id()->set_identity_version(2); }, false},
      {"unknown identity source",
       [](auto& pool) {
         pool.mutable_producer()->mutable_pool_id()->mutable_indexer_domain()->mutable_cache_semantics()->set_source(
             static_cast<v1::IdentitySource>(9));
       },
       false},
      {"unknown CKF format",
       [](auto& pool) { pool.mutable_producer()->mutable_ckf_format()->set_fingerprint_bits(8); }},
      {"unknown hash format",
       [](auto& pool) { pool.mutable_query_semantics()->set_hash_format(static_cast<v1::KvQueryHashFormat>(7)); }},
      {"unknown pool role", [](auto& pool) { pool.set_pool_roles(0, static_cast<v1::WorkerRole>(17)); }},
      {"missing or unknown model target alternative",
       [](auto& pool) { pool.mutable_registrations(0)->mutable_target()->Clear(); }},
      {"malformed entry with a trustworthy key: block size 0",
       [](auto& pool) { pool.mutable_query_semantics()->set_kv_block_size(0); }},
      {"unspecified role", [](auto& pool) { pool.set_pool_roles(0, v1::WORKER_ROLE_UNSPECIFIED); }},
  };
}

inline PoolBreaker pool_breaker(const std::string& name) {
  for (auto& breaker : pool_breakers()) {
    if (breaker.name == name) return breaker;
  }
  throw std::invalid_argument("no pool breaker named " + name);
}

inline v1::KvPoolCatalogUpdate catalog(std::uint64_t revision, std::vector<v1::KvPoolDescriptor> pools,
                                       std::uint64_t incarnation = 7) {
  v1::KvPoolCatalogUpdate update = with_envelope(v1::KvPoolCatalogUpdate{}, incarnation);
  update.set_revision(revision);
  auto* snapshot = update.mutable_snapshot();
  for (auto& pool : pools) *snapshot->add_pools() = std::move(pool);
  return update;
}

inline v1::TopologyEntry topology_entry(const std::string& model, v1::ServingReadinessState state,
                                        std::uint8_t pool = 1) {
  v1::TopologyEntry entry;
  entry.set_namespace_("prod");
  entry.set_canonical_model_id(model);
  entry.set_state(state);
  if (state != v1::SERVING_READINESS_STATE_UNKNOWN) entry.add_present_roles(v1::WORKER_ROLE_AGGREGATED);
  auto* member = entry.add_members();
  member->mutable_endpoint()->set_namespace_("prod");
  member->mutable_endpoint()->set_component(fmt::format("backend-{}", pool));
  member->mutable_endpoint()->set_endpoint("generate");
  member->add_roles(v1::WORKER_ROLE_AGGREGATED);
  return entry;
}

inline v1::ServingReadinessUpdate readiness(std::uint64_t revision, std::vector<v1::TopologyEntry> entries) {
  auto update = with_envelope(v1::ServingReadinessUpdate{});
  update.set_revision(revision);
  for (auto& entry : entries) *update.add_entries() = std::move(entry);
  return update;
}

inline v1::KvPoolLoadUpdate load_window(std::uint64_t window, std::vector<std::uint8_t> pools) {
  auto update = with_envelope(v1::KvPoolLoadUpdate{});
  update.set_window_sequence(window);
  update.set_window_ms(1000);
  for (auto pool : pools) {
    auto* entry = update.add_pools();
    *entry->mutable_producer() = producer(pool);
    entry->set_kv_used_blocks(10 * pool);
    entry->set_total_kv_blocks(100);
    entry->set_kv_observed_ranks(1);
    entry->set_kv_expected_ranks(1);
  }
  return update;
}

// A serving-load window, COMPLETE throughout: pool `p` reports 100·p prefill tokens and 10·p
// decode blocks, each model (namespace "prod") 1 request awaiting its first token and 2 generating.
inline v1::ServingLoadUpdate serving_load_window(std::uint64_t window, std::vector<std::uint8_t> pools,
                                                 std::vector<std::string> models = {"llama"}) {
  auto update = with_envelope(v1::ServingLoadUpdate{});
  update.set_window_sequence(window);
  update.set_window_ms(1000);
  for (auto pool : pools) {
    auto* entry = update.add_pools();
    *entry->mutable_producer() = producer(pool);
    entry->mutable_load()->set_status(v1::DATA_STATUS_COMPLETE);
    entry->mutable_load()->mutable_tokens()->set_active_prefill_tokens(100 * pool);
    entry->mutable_load()->mutable_tokens()->set_active_decode_blocks(10 * pool);
    entry->mutable_deployment()->set_live_workers(2);
  }
  for (const auto& model : models) {
    auto* entry = update.add_models();
    entry->set_namespace_("prod");
    entry->set_canonical_model_id(model);
    auto* load = entry->mutable_load();
    load->set_status(v1::DATA_STATUS_COMPLETE);
    load->mutable_requests()->set_requests_started_total(40);
    load->mutable_requests()->set_requests_completed_total(37);
    load->mutable_requests()->set_requests_awaiting_first_token(1);
    load->mutable_requests()->set_requests_generating(2);
    load->mutable_tokens()->set_awaiting_first_token_input_tokens(300);
    load->mutable_tokens()->set_inflight_input_tokens(900);
    load->mutable_tokens()->set_input_tokens_total(5000);
    load->mutable_tokens()->set_output_tokens_total(7000);
    entry->mutable_deployment()->set_expected_frontends(2);
    entry->mutable_deployment()->set_observed_frontends(2);
    entry->mutable_deployment()->set_ready_frontends(1);
    for (auto pool : pools) *entry->mutable_deployment()->add_serving_pools() = producer(pool).pool_id();
  }
  return update;
}

// Frames of one pool: the snapshot of `words` at `sequence`, deltas, heartbeats.
inline v1::FilterUpdate frame(const v1::ProducerIdentity& identity, v1::FilterUpdateKind kind, std::uint64_t base,
                              std::uint64_t sequence, std::string payload = {}) {
  auto update = with_envelope(v1::FilterUpdate{});
  *update.mutable_producer() = identity;
  update.set_kind(kind);
  update.set_base_sequence(base);
  update.set_sequence(sequence);
  update.set_payload(std::move(payload));
  return update;
}

inline std::vector<v1::FilterUpdate> snapshot_frames(const v1::ProducerIdentity& identity, std::uint64_t sequence,
                                                     const std::vector<std::uint64_t>& words) {
  const cbi1::FilterFormat format{kSeed, words.size()};
  auto chunks = cbi1::encode_snapshot(format, identity.pool_id().dc_id(), sequence, words);
  std::vector<v1::FilterUpdate> frames;
  for (auto& chunk : *chunks) {
    frames.push_back(frame(identity, v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, sequence, sequence, std::move(chunk)));
  }
  return frames;
}

inline v1::FilterUpdate delta_frame(const v1::ProducerIdentity& identity, std::uint64_t base,
                                    const std::vector<BucketImage>& images, std::uint64_t dc_id = 0xDC) {
  const cbi1::FilterFormat format{kSeed, kBuckets};
  auto payload = cbi1::encode_delta(format, dc_id, base, base + 1, images);
  return frame(identity, v1::FILTER_UPDATE_KIND_DELTA, base, base + 1, std::move(*payload));
}

}  // namespace kvrelay::test
