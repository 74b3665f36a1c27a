// What libprotobuf reports while parsing requests reaches the relay's log, rate-limited
// (grpc_gateway/protobuf_log.hpp): a client sending strings that are not UTF-8 in a loop
// cannot flood it.
#include <catch2/catch.hpp>

#include "dynamo/kvrelay/v1/relay.pb.h"
#include "grpc_gateway/protobuf_log.hpp"
#include "tests/log_capture.hpp"

namespace v1 = dynamo::kvrelay::v1;

TEST_CASE("protobuf log: a parse report goes to the relay's log, at most one a second", "[gateway]") {
  kvrelay::gateway::route_protobuf_log();
  // A subscriber_id (field 1) of bytes that are not UTF-8, as a client could send it, and the
  // contract marker (field 127, fixed32); written by hand, as serializing it would be reported too.
  const std::string bytes = {0x0A, 0x03, 'o', 'k', '\xff', '\xfd', 0x07, 0x31, 0x52, 0x56, 0x4B};

  std::size_t reports = 0;
  int refused = 0;
  constexpr int kRequests = 20;
  {
    kvrelay::test::CapturedLog log;
    for (int i = 0; i < kRequests; ++i) {
      v1::WatchKvPoolCatalogRequest parsed;
      if (!parsed.ParseFromString(bytes)) ++refused;
    }
    reports = log.count({"libprotobuf", "UTF-8", "parsing"});
  }
  CHECK(refused == kRequests);
  CHECK(reports >= 1);             // routed to spdlog, not stderr
  CHECK(reports < kRequests / 2);  // held back: the 20 reports come far faster than one a second
}
