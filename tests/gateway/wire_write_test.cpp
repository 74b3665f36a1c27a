// The bytes a stream hands to gRPC (grpc_gateway/wire_write.hpp): a pool frame goes as its
// pieces with its send time stamped as it leaves its stream's queue.
#include "grpc_gateway/wire_write.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace kvrelay::gateway {
namespace {

std::string joined(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return bytes;
}

TEST_CASE("wire write: a pool frame is sent stamped with the time it leaves its queue", "[wire]") {
  v1::ProducerIdentity producer;
  producer.set_producer_incarnation(7);
  const auto payload = std::make_shared<const std::string>(3000, 'd');
  // As a pool stream queues it: no send time yet.
  const auto queued = std::make_shared<const wire::FilterFrame>(
      wire::encode_frame_identity({}, producer), wire::FilterFrameFields{v1::FILTER_UPDATE_KIND_DELTA, 41, 42, 0},
      payload);

  const std::uint64_t before = wire::wall_clock_us();
  const WireWrite write = wire_write(queued);
  const std::uint64_t after = wire::wall_clock_us();

  v1::FilterUpdate sent;
  REQUIRE(sent.ParseFromString(joined(*write.wire())));
  CHECK(sent.send_ts_us() >= before);
  CHECK(sent.send_ts_us() <= after);
  // Everything else is the queued frame's, byte for byte.
  v1::FilterUpdate unstamped = sent;
  unstamped.clear_send_ts_us();
  CHECK(unstamped.SerializeAsString() == queued->serialize());
  CHECK(write.kind() == metrics::FrameKind::kDelta);
  CHECK(write.bytes() == sent.ByteSizeLong());
}

}  // namespace
}  // namespace kvrelay::gateway
