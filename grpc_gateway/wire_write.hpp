#pragma once
// One write as gRPC takes it. A protobuf message goes as itself (gRPC serializes it for this
// stream). A FilterFrame is already serialized: it goes as a ByteBuffer of its pieces, the
// shared ones (identity, payload) referenced rather than copied, so a delta's payload exists
// once however many streams send it (docs/architecture.md#one-serialization-per-frame).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "core/filter_frame.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

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

template <class Message>
class WireWrite {
 public:
  using Wire = Message;  // what the stream's ServerWriteReactor writes

  explicit WireWrite(std::shared_ptr<const Message> message) : message_(std::move(message)) {}

  const Wire* wire() const { return message_.get(); }
  metrics::FrameKind kind() const { return frame_kind(*message_); }
  std::size_t bytes() const { return message_->ByteSizeLong(); }

 private:
  std::shared_ptr<const Message> message_;
};

// A slice that holds a reference to the shared bytes it points into, for as long as gRPC
// holds the slice (which may be after the write completed).
inline grpc::Slice shared_slice(const std::shared_ptr<const std::string>& bytes) {
  auto* owner = new std::shared_ptr<const std::string>(bytes);
  return grpc::Slice(
      const_cast<char*>(bytes->data()), bytes->size(),
      [](void* held) { delete static_cast<std::shared_ptr<const std::string>*>(held); }, owner);
}

template <>
class WireWrite<wire::FilterFrame> {
 public:
  using Wire = grpc::ByteBuffer;

  explicit WireWrite(std::shared_ptr<const wire::FilterFrame> frame)
      : kind_(frame_kind(*frame)), bytes_(frame->size()) {
    const std::string_view header = frame->header_bytes();
    const std::string_view trailer = frame->trailer_bytes();
    grpc::Slice slices[4];
    std::size_t count = 0;
    slices[count++] = shared_slice(frame->shared_identity());
    slices[count++] = grpc::Slice(header.data(), header.size());
    if (frame->shared_payload()) slices[count++] = shared_slice(frame->shared_payload());
    slices[count++] = grpc::Slice(trailer.data(), trailer.size(), grpc::Slice::STATIC_SLICE);
    buffer_ = grpc::ByteBuffer(slices, count);
  }

  const Wire* wire() const { return &buffer_; }
  metrics::FrameKind kind() const { return kind_; }
  std::size_t bytes() const { return bytes_; }

 private:
  metrics::FrameKind kind_;
  std::size_t bytes_;
  grpc::ByteBuffer buffer_;
};

}  // namespace kvrelay::gateway
