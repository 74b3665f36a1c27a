// What libprotobuf reports while parsing requests reaches the relay's log, rate-limited
// (grpc_gateway/protobuf_log.hpp): a client sending strings that are not UTF-8 in a loop
// cannot flood it.
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>

#include "dynamo/kvrelay/v1/relay.pb.h"
#include "grpc_gateway/protobuf_log.hpp"

namespace v1 = dynamo::kvrelay::v1;

TEST_CASE("protobuf log: a parse report goes to the relay's log, at most one a second", "[gateway]") {
  kvrelay::gateway::route_protobuf_log();
  // A subscriber_id (field 1) of bytes that are not UTF-8, as a client could send it, and the
  // contract marker (field 127, fixed32); written by hand, as serializing it would be reported too.
  const std::string bytes = {0x0A, 0x03, 'o', 'k', '\xff', '\xfd', 0x07, 0x31, 0x52, 0x56, 0x4B};

  auto lines = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", lines));
  constexpr int kRequests = 20;
  int refused = 0;
  for (int i = 0; i < kRequests; ++i) {
    v1::WatchKvPoolCatalogRequest parsed;
    if (!parsed.ParseFromString(bytes)) ++refused;
  }
  spdlog::set_default_logger(previous);

  CHECK(refused == kRequests);
  const auto logged = lines->last_formatted();
  const auto reports = std::count_if(logged.begin(), logged.end(), [](const std::string& line) {
    return line.find("libprotobuf") != std::string::npos && line.find("UTF-8") != std::string::npos &&
           line.find("parsing") != std::string::npos;
  });
  INFO(logged.size() << " lines logged");
  CHECK(reports >= 1);             // routed to spdlog, not stderr
  CHECK(reports < kRequests / 2);  // held back: the 20 reports come far faster than one a second
}
