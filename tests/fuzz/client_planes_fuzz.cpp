// The consumer library's revisioned and windowed planes (client/lib/catalog_state.hpp,
// readiness_state.hpp, load_state.hpp, serving_load_state.hpp; docs/protocol/rpcs.md#message-validation)
// fed a stream of updates off the wire: each record is one update for one plane, applied in
// order to planes held across the records, and the catalog's name index is queried after each.
//
// Record: byte 0 bits 0-1 pick the plane (catalog, readiness, load, serving load); bit 2 gives the
// update a valid envelope, so mutations reach the entry checks; the rest is the serialized update.
#include <cstdint>
#include <string_view>

#include "client/lib/catalog_state.hpp"
#include "client/lib/load_state.hpp"
#include "client/lib/readiness_state.hpp"
#include "client/lib/serving_load_state.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace v1 = ::dynamo::kvrelay::v1;

namespace {

struct Planes {
  client::CatalogState catalog;
  client::ReadinessState readiness;
  client::LoadState load;
  client::ServingLoadState serving_load;
};

template <class Update>
bool parse(std::string_view bytes, bool valid_envelope, Update& update) {
  if (!update.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return false;
  if (valid_envelope) {
    update.set_contract_marker(wire::kContractMarker);
    update.set_protocol_version(wire::kProtocolVersion);
    update.mutable_relay()->set_drt_instance_id(42);
  }
  return true;
}

// Every name the catalog resolves leads to pools it holds, all under the one binding.
void check_catalog(const client::CatalogState& catalog) {
  if (!catalog.valid()) {
    require(catalog.pools().empty(), "an invalid catalog holds no pools");
    return;
  }
  for (const auto& [key, pool] : catalog.pools()) {
    require(catalog.find(key) == &pool, "a held pool is found by its key");
    for (const auto& registration : pool.descriptor.registrations()) {
      const auto resolution = catalog.resolve(registration.canonical_model_id());
      if (!resolution) continue;  // ambiguous names are omitted
      for (const auto& resolved : resolution->pools) {
        require(catalog.find(resolved) != nullptr, "a resolved pool is held");
      }
    }
  }
}

template <class Update, class Plane>
void apply(std::string_view bytes, bool valid_envelope, Plane& plane) {
  Update update;
  if (!parse(bytes, valid_envelope, update)) return;
  const client::Applied applied = plane.apply(update);
  require(plane.valid() == !applied, "a plane is valid exactly when its last update applied");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::silence_protobuf_logs();
  Planes planes;
  for (const auto record : fuzz::records_of(fuzz::as_text(data, size))) {
    if (record.empty()) continue;
    const auto selector = static_cast<std::uint8_t>(record.front());
    const bool valid_envelope = (selector & 4) != 0;
    const std::string_view bytes = record.substr(1);
    switch (selector & 3) {
      case 0:
        apply<v1::KvPoolCatalogUpdate>(bytes, valid_envelope, planes.catalog);
        check_catalog(planes.catalog);
        break;
      case 1:
        apply<v1::ServingReadinessUpdate>(bytes, valid_envelope, planes.readiness);
        break;
      case 2:
        apply<v1::KvPoolLoadUpdate>(bytes, valid_envelope, planes.load);
        break;
      case 3:
        apply<v1::ServingLoadUpdate>(bytes, valid_envelope, planes.serving_load);
        break;
    }
  }
  return 0;
}
