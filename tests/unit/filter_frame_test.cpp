#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "core/filter_frame.hpp"
#include "core/wire_validation.hpp"  // kProtocolVersion, kContractMarker

using namespace kvrelay;
namespace v1 = ::dynamo::kvrelay::v1;

namespace {

v1::ProducerIdentity random_producer(std::mt19937_64& rng) {
  v1::ProducerIdentity producer;
  auto* pool = producer.mutable_pool_id();
  pool->set_identity_version(1);
  pool->mutable_indexer_domain()->mutable_cache_semantics()->set_digest(std::string(32, static_cast<char>(rng())));
  pool->mutable_indexer_domain()->mutable_routing_scope()->set_digest(std::string(32, static_cast<char>(rng())));
  pool->set_dc_id(rng());
  producer.set_producer_incarnation(rng());
  producer.set_layout_generation(rng() % 5);  // zero sometimes: then not on the wire
  producer.mutable_ckf_format()->set_format_version(1);
  producer.mutable_ckf_format()->set_seed(rng());
  producer.mutable_ckf_format()->set_bucket_count(std::uint64_t{1} << (rng() % 23));
  return producer;
}

// A value of every varint length, zero included.
std::uint64_t random_varint_value(std::mt19937_64& rng) {
  const unsigned bits = rng() % 65;
  return bits == 0 ? 0 : rng() >> (64 - bits);
}

}  // namespace

TEST_CASE("FilterFrame: its pieces are exactly the FilterUpdate's serialization", "[wire]") {
  std::mt19937_64 rng(20261202);
  const v1::FilterUpdateKind kinds[] = {v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, v1::FILTER_UPDATE_KIND_DELTA,
                                        v1::FILTER_UPDATE_KIND_HEARTBEAT};
  for (int round = 0; round < 500; ++round) {
    v1::RelayIdentity relay;
    relay.set_drt_instance_id(rng());
    relay.set_relay_incarnation(rng());
    const v1::ProducerIdentity producer = random_producer(rng);
    const wire::FilterFrameFields fields{kinds[rng() % 3], random_varint_value(rng), random_varint_value(rng),
                                         random_varint_value(rng)};
    // Payload lengths across the 1-, 2- and 3-byte length prefixes, and none.
    const std::size_t payload_size = std::size_t{1} << (rng() % 18);
    auto payload = round % 7 == 0 ? nullptr : std::make_shared<const std::string>(payload_size - 1, 'p');

    const wire::FilterFrame frame(wire::encode_frame_identity(relay, producer), fields, payload);

    v1::FilterUpdate expected;
    expected.set_protocol_version(wire::kProtocolVersion);
    *expected.mutable_relay() = relay;
    *expected.mutable_producer() = producer;
    expected.set_base_sequence(fields.base_sequence);
    expected.set_sequence(fields.sequence);
    expected.set_send_ts_us(fields.send_ts_us);
    expected.set_kind(fields.kind);
    if (payload) expected.set_payload(*payload);
    expected.set_contract_marker(wire::kContractMarker);
    INFO("round " << round);
    REQUIRE(frame.serialize() == expected.SerializeAsString());
    CHECK(frame.size() == expected.ByteSizeLong());

    v1::FilterUpdate parsed;
    REQUIRE(parsed.ParseFromString(frame.serialize()));
    CHECK(parsed.sequence() == fields.sequence);
    CHECK(parsed.send_ts_us() == fields.send_ts_us);
    CHECK(parsed.payload() == frame.payload());

    // Stamped with another send time: that field alone changes, and the payload stays shared.
    const std::uint64_t send_ts_us = random_varint_value(rng);
    const wire::FilterFrame stamped = frame.stamped(send_ts_us);
    expected.set_send_ts_us(send_ts_us);
    REQUIRE(stamped.serialize() == expected.SerializeAsString());
    CHECK(stamped.payload().data() == frame.payload().data());
  }
}

TEST_CASE("FilterFrame: the largest field values fit its header", "[wire]") {
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  const auto payload = std::make_shared<const std::string>(std::size_t{1} << 21, 'x');
  const wire::FilterFrame frame(wire::encode_frame_identity({}, {}), {v1::FILTER_UPDATE_KIND_DELTA, kMax, kMax, kMax},
                                payload);
  v1::FilterUpdate parsed;
  REQUIRE(parsed.ParseFromString(frame.serialize()));
  CHECK(parsed.base_sequence() == kMax);
  CHECK(parsed.send_ts_us() == kMax);
  CHECK(parsed.payload().size() == payload->size());
  CHECK(frame.payload().data() == payload->data());  // shared, not copied
}
