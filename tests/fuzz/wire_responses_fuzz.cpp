// Every WAN response validator (core/wire_validation.hpp, docs/protocol/rpcs.md#message-validation
// and the validator sections after it): the bytes after byte 0 are parsed as the dynamo.kvrelay.v1
// response message byte 0 picks, checked as a whole, then entry by entry as a consumer
// quarantines entries. An entry that passes its check must yield the key the consumer files it
// under.
//
// Byte 0: bits 0-2 pick the message; bit 3 gives it a valid envelope first, so mutations reach
// the checks behind the envelope.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/wire_validation.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace v1 = ::dynamo::kvrelay::v1;

namespace {

template <class Response>
void give_envelope(Response& response) {
  response.set_contract_marker(wire::kContractMarker);
  response.set_protocol_version(wire::kProtocolVersion);
  response.mutable_relay()->set_drt_instance_id(42);
}

void require_keyed(const wire::Status& entry_status, const v1::ProducerIdentity& producer) {
  if (entry_status) return;
  const auto key = wire::try_producer_key(producer, "producer");
  require(key.has_value() && *key == wire::producer_key(producer), "a valid entry has a producer key");
}

void check_entries(const v1::KvPoolCatalogUpdate& update) {
  for (const auto& pool : update.snapshot().pools()) {
    require_keyed(wire::check_pool_descriptor(pool, "pool"), pool.producer());
  }
}

void check_entries(const v1::FilterUpdate& update) {
  if (!wire::check_response(update)) require_keyed(std::nullopt, update.producer());
}

void check_entries(const v1::ServingReadinessUpdate& update) {
  for (const auto& entry : update.entries()) {
    const wire::Status status = wire::check_topology_entry(entry, "entry");
    if (status) continue;
    for (const auto& member : entry.members()) {
      if (member.has_pool_id()) require(!wire::check_pool_id(member.pool_id(), "pool_id"), "valid member pool ids");
    }
  }
}

void check_entries(const v1::KvPoolLoadUpdate& update) {
  for (const auto& entry : update.pools()) require_keyed(wire::check_load_entry(entry, "entry"), entry.producer());
}

void check_entries(const v1::ServingLoadUpdate& update) {
  for (const auto& pool : update.pools()) require_keyed(wire::check_pool_serving_load(pool, "pool"), pool.producer());
  for (const auto& model : update.models()) wire::check_model_serving_load(model, "model");
}

void check_entries(const v1::RelayInfo&) {}

template <class Response>
void check(std::string_view bytes, bool valid_envelope) {
  Response response;
  if (!response.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  if (valid_envelope) give_envelope(response);
  if (const wire::Status status = wire::check_response(response)) {
    require(!wire::to_string(status->code).empty(), "an error code has a name");
  }
  // Consumers check entries whatever the message-level verdict, so every entry is checked here too.
  check_entries(response);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  fuzz::silence_protobuf_logs();
  const std::string_view bytes = fuzz::as_text(data + 1, size - 1);
  const bool valid_envelope = (data[0] & 8) != 0;
  switch ((data[0] & 7) % 6) {
    case 0:
      check<v1::RelayInfo>(bytes, valid_envelope);
      break;
    case 1:
      check<v1::KvPoolCatalogUpdate>(bytes, valid_envelope);
      break;
    case 2:
      check<v1::FilterUpdate>(bytes, valid_envelope);
      break;
    case 3:
      check<v1::ServingReadinessUpdate>(bytes, valid_envelope);
      break;
    case 4:
      check<v1::KvPoolLoadUpdate>(bytes, valid_envelope);
      break;
    case 5:
      check<v1::ServingLoadUpdate>(bytes, valid_envelope);
      break;
  }
  return 0;
}
