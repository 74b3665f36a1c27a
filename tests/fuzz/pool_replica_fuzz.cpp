// The consumer library's pool replica (client/lib/pool_replica.hpp) fed FilterUpdate frames off
// the wire (docs/protocol/rpcs.md#consumer-rules, docs/protocol/cbi1-ckf.md#applying-deltas): each
// record is one serialized dynamo.kvrelay.v1.FilterUpdate, applied in order. The replica follows a
// producer whose CKF format and dc_id are those of the first record's CBI1 payload (or a small
// default); a replica that faults is replaced, as its owner resubscribes.
//
// Input: byte 0, then records. Byte 0 bit 0: give every frame the replica's own envelope (marker,
// version, relay, producer), so mutations reach the CBI1 and sequence checks; bit 1: recompute
// each payload's body checksum.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/lib/pool_replica.hpp"
#include "core/xxh3.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace v1 = ::dynamo::kvrelay::v1;

namespace {

// A replica holds the whole lane: small enough for thousands of inputs a second.
constexpr std::uint64_t kMaxBuckets = std::uint64_t{1} << 16;

struct Followed {
  std::uint64_t seed = 0x5eed;
  std::uint64_t bucket_count = 8;
  std::uint64_t dc_id = 9;
};

Followed followed_by(const std::vector<v1::FilterUpdate>& updates) {
  if (updates.empty() || updates.front().payload().size() < cbi1::kHeaderBytes) return {};
  const auto* header = reinterpret_cast<const std::uint8_t*>(updates.front().payload().data());
  const auto format = cbi1::FilterFormat::make(load_le64(header + 12), load_le64(header + 20));
  if (!format || format->bucket_count > kMaxBuckets) return {};
  return {format->seed, format->bucket_count, load_le64(header + 28)};
}

v1::ProducerIdentity producer_of(const Followed& followed) {
  v1::ProducerIdentity producer;
  auto* pool = producer.mutable_pool_id();
  pool->set_identity_version(wire::kPoolIdentityVersion);
  pool->set_dc_id(followed.dc_id);
  for (auto* digest : {pool->mutable_indexer_domain()->mutable_cache_semantics(),
                       pool->mutable_indexer_domain()->mutable_routing_scope()}) {
    digest->set_digest(std::string(wire::kDigestBytes, '\x11'));
    digest->set_source(v1::IDENTITY_SOURCE_DEFAULT_DERIVED);
  }
  producer.set_producer_incarnation(99);
  producer.set_layout_generation(1);
  auto* format = producer.mutable_ckf_format();
  format->set_format_version(wire::kCkfFormatVersion);
  format->set_seed(followed.seed);
  format->set_bucket_count(followed.bucket_count);
  format->set_fingerprint_bits(wire::kCkfFingerprintBits);
  format->set_slots_per_bucket(wire::kCkfSlotsPerBucket);
  return producer;
}

v1::RelayIdentity relay_identity() {
  v1::RelayIdentity relay;
  relay.set_drt_instance_id(42);
  relay.set_relay_incarnation(7);
  return relay;
}

void patch_checksum(std::string& payload) {
  if (payload.size() < cbi1::kHeaderBytes) return;
  auto* bytes = reinterpret_cast<std::uint8_t*>(payload.data());
  store_le32(bytes + 44,
             static_cast<std::uint32_t>(xxh3(bytes + cbi1::kHeaderBytes, payload.size() - cbi1::kHeaderBytes)));
}

// What the replica promises about itself after every frame; `before` is its sequence before
// the frame, if it was installed.
void check_replica(const client::PoolReplica& replica, const client::Applied& applied, const v1::FilterUpdate& update,
                   std::uint64_t bucket_count, std::optional<std::uint64_t> before) {
  if (applied) {
    require(replica.phase() == client::ReplicaPhase::kFaulted, "a refused frame retires the replica");
    require(replica.words().empty(), "a retired replica holds no lane");
    return;
  }
  require(replica.phase() != client::ReplicaPhase::kFaulted, "an applied frame leaves the replica usable");
  if (!replica.installed()) return;
  require(replica.words().size() == bucket_count, "an installed replica holds the whole lane");
  // A delta at or below the replica's sequence is stale: ignored (docs/protocol/cbi1-ckf.md#applying-deltas).
  const bool stale = before && update.kind() == v1::FILTER_UPDATE_KIND_DELTA && update.sequence() <= *before;
  require(replica.sequence() == (stale ? *before : update.sequence()),
          "an applied frame moves the replica to its sequence; a stale delta leaves it where it was");
  std::uint64_t occupied = 0;
  for (std::uint64_t word : replica.words()) occupied += ckf::occupied_in(word);
  require(replica.occupied_slots() == occupied, "the running slot count matches the lane");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  fuzz::silence_protobuf_logs();
  const bool own_envelope = (data[0] & 1) != 0;
  const bool fix_checksums = (data[0] & 2) != 0;
  std::vector<v1::FilterUpdate> updates;
  for (const auto record : fuzz::records_of(fuzz::as_text(data + 1, size - 1))) {
    v1::FilterUpdate update;
    if (update.ParseFromArray(record.data(), static_cast<int>(record.size()))) updates.push_back(std::move(update));
  }
  const Followed followed = followed_by(updates);
  const v1::ProducerIdentity producer = producer_of(followed);
  const v1::RelayIdentity relay = relay_identity();
  auto replica = std::make_unique<client::PoolReplica>(producer, relay);
  for (v1::FilterUpdate& update : updates) {
    if (own_envelope) {
      update.set_contract_marker(wire::kContractMarker);
      update.set_protocol_version(wire::kProtocolVersion);
      *update.mutable_relay() = relay;
      *update.mutable_producer() = producer;
    }
    if (fix_checksums) patch_checksum(*update.mutable_payload());
    const auto before = replica->installed() ? std::optional(replica->sequence()) : std::nullopt;
    const client::Applied applied = replica->apply(update);
    check_replica(*replica, applied, update, followed.bucket_count, before);
    if (applied) replica = std::make_unique<client::PoolReplica>(producer, relay);
  }
  return 0;
}
