// Every WAN request validator (core/wire_validation.hpp, docs/protocol/rpcs.md#request-validation):
// the bytes after byte 0 are parsed as the dynamo.kvrelay.v1 request message byte 0 picks, and
// checked as the gateway checks it before anything else happens.
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "core/wire_validation.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace v1 = ::dynamo::kvrelay::v1;

namespace {

// A rejection must map to a reason the server can send and name itself.
void check_rejection(const wire::Status& status) {
  if (!status) return;
  require(!wire::to_string(status->code).empty(), "an error code has a name");
  require(!wire::to_string(status->error_class).empty(), "an error class has a name");
  require(wire::request_error_reason(*status) != v1::RELAY_ERROR_REASON_UNSPECIFIED, "a rejected request has a reason");
}

template <class Request>
void check(std::string_view bytes) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  const wire::Status status = wire::check_request(request);
  check_rejection(status);
  if constexpr (std::is_same_v<Request, v1::SubscribeKvPoolRequest>) {
    // An admitted subscription always has a producer key to look its pool up by.
    if (!status) {
      const auto key = wire::try_producer_key(request.expected_producer(), "expected_producer");
      require(key.has_value() && *key == wire::producer_key(request.expected_producer()),
              "an admitted subscription names a valid producer");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  fuzz::silence_protobuf_logs();
  const std::string_view bytes = fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 7) {
    case 0:
      check<v1::RelayInfoRequest>(bytes);
      break;
    case 1:
      check<v1::WatchKvPoolCatalogRequest>(bytes);
      break;
    case 2:
      check<v1::SubscribeKvPoolRequest>(bytes);
      break;
    case 3:
      check<v1::SubscribeServingReadinessRequest>(bytes);
      break;
    case 4:
      check<v1::SubscribeKvPoolLoadRequest>(bytes);
      break;
    case 5:
      check<v1::SubscribeServingLoadRequest>(bytes);
      break;
    case 6:
      // The subscriber id alone, as text straight off the wire (no protobuf UTF-8 check before it).
      check_rejection(wire::check_subscriber_id(bytes));
      break;
  }
  return 0;
}
