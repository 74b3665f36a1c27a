#pragma once
// One write as gRPC takes it: a ByteBuffer of bytes serialized once and shared, referenced
// rather than copied. A catalog, readiness or load update was serialized by the actor that
// published it; a FilterFrame goes as its pieces, so a delta's payload exists once however
// many streams send it (docs/architecture.md#one-serialization-per-frame).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "core/filter_frame.hpp"
#include "core/serialized.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

namespace v1 = ::dynamo::kvrelay::v1;

// What a frame carries, for kv_relay_frames_sent_total{kind}.
inline metrics::FrameKind frame_kind(const wire::FilterFrame& frame) {
  switch (frame.kind()) {
    case v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK:
      return metrics::FrameKind::kSnapshotChunk;
    case v1::FILTER_UPDATE_KIND_HEARTBEAT:
      return metrics::FrameKind::kHeartbeat;
    default:
      return metrics::FrameKind::kDelta;
  }
}
inline metrics::FrameKind frame_kind(const v1::KvPoolCatalogUpdate&) { return metrics::FrameKind::kCatalog; }
inline metrics::FrameKind frame_kind(const v1::ServingReadinessUpdate&) { return metrics::FrameKind::kReadiness; }
inline metrics::FrameKind frame_kind(const v1::KvPoolLoadUpdate&) { return metrics::FrameKind::kLoad; }
inline metrics::FrameKind frame_kind(const v1::ServingLoadUpdate&) { return metrics::FrameKind::kServingLoad; }

// A slice of `bytes`, which `owner` keeps alive for as long as gRPC holds the slice (which may
// be after the write completed).
template <class Owner>
grpc::Slice shared_slice(std::shared_ptr<const Owner> owner, std::string_view bytes) {
  auto* held = new std::shared_ptr<const Owner>(std::move(owner));
  return grpc::Slice(
      const_cast<char*>(bytes.data()), bytes.size(),
      [](void* held) { delete static_cast<std::shared_ptr<const Owner>*>(held); }, held);
}

// One write: a ByteBuffer over shared bytes, and what it carries for the frame metrics.
class WireWrite {
 public:
  WireWrite(metrics::FrameKind kind, grpc::ByteBuffer buffer) : kind_(kind), buffer_(std::move(buffer)) {}

  const grpc::ByteBuffer* wire() const { return &buffer_; }
  metrics::FrameKind kind() const { return kind_; }
  std::size_t bytes() const { return buffer_.Length(); }

 private:
  metrics::FrameKind kind_;
  grpc::ByteBuffer buffer_;
};

// A catalog, readiness or load update: one slice of the bytes its publisher serialized.
template <class Message>
WireWrite wire_write(const std::shared_ptr<const wire::Serialized<Message>>& update) {
  grpc::Slice slice = shared_slice(update, update->bytes());
  return {frame_kind(update->message()), grpc::ByteBuffer(&slice, 1)};
}

// A pool frame: its pieces, the shared ones (identity, payload) referenced, with send_ts_us
// stamped now, as it goes to gRPC (docs/protocol/rpcs.md#filter-frames).
inline WireWrite wire_write(const std::shared_ptr<const wire::FilterFrame>& queued) {
  const wire::FilterFrame frame = queued->stamped(wire::wall_clock_us());
  const std::string_view header = frame.header_bytes();
  const std::string_view trailer = frame.trailer_bytes();
  grpc::Slice slices[4];
  std::size_t count = 0;
  slices[count++] = shared_slice(frame.shared_identity(), frame.identity_bytes());
  slices[count++] = grpc::Slice(header.data(), header.size());  // copied: the stamped header is this call's
  if (frame.shared_payload()) slices[count++] = shared_slice(frame.shared_payload(), frame.payload());
  slices[count++] = grpc::Slice(trailer.data(), trailer.size(), grpc::Slice::STATIC_SLICE);
  return {frame_kind(frame), grpc::ByteBuffer(slices, count)};
}

}  // namespace kvrelay::gateway
