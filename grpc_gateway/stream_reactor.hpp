#pragma once
// A server stream as seen from its stream actor: StreamLink implements StreamSink over a
// ServerWriteReactor. The link outlives the reactor (gRPC deletes the reactor in OnDone) and
// guards every call into it, so a late write or finish from the actor is harmless.
#include <caf/all.hpp>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "actors/messages.hpp"
#include "grpc_gateway/status.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay::gateway {

// Runs once when the stream ends, however it ends, with how it ended (admission permits,
// open-stream gauges, the lifecycle log line).
using StreamRelease = std::function<void(const RpcStatus&)>;

// What a frame carries, for kv_relay_frames_sent_total{kind}.
inline metrics::FrameKind frame_kind(const v1::FilterUpdate& frame) {
  switch (frame.kind()) {
    case v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK: return metrics::FrameKind::kSnapshotChunk;
    case v1::FILTER_UPDATE_KIND_HEARTBEAT: return metrics::FrameKind::kHeartbeat;
    default: return metrics::FrameKind::kDelta;
  }
}
inline metrics::FrameKind frame_kind(const v1::KvPoolCatalogUpdate&) { return metrics::FrameKind::kCatalog; }
inline metrics::FrameKind frame_kind(const v1::ServingReadinessUpdate&) { return metrics::FrameKind::kReadiness; }
inline metrics::FrameKind frame_kind(const v1::KvPoolLoadUpdate&) { return metrics::FrameKind::kLoad; }
inline metrics::FrameKind frame_kind(const v1::ServingLoadUpdate&) { return metrics::FrameKind::kServingLoad; }

template <class Message>
class StreamLink final : public StreamSink<Message> {
 public:
  // `metrics` (may be null) counts every frame handed to the transport.
  StreamLink(grpc::CallbackServerContext* context, grpc::ServerWriteReactor<Message>* reactor,
             StreamRelease release, metrics::RelayMetrics* metrics)
      : context_(context), reactor_(reactor), release_(std::move(release)), metrics_(metrics) {}

  // Set once the stream actor exists. The actor may already have written (a pool stream
  // attaches to its publisher as soon as it starts): a write completion or a cancellation
  // that came first is delivered now.
  void bind(caf::actor actor) {
    std::lock_guard lock(mutex_);
    actor_ = std::move(actor);
    if (unreported_write_done_) caf::anon_send(actor_, atoms::write_done_atom_v, *unreported_write_done_);
    if (cancelled_) caf::anon_send(actor_, atoms::cancelled_atom_v);
  }

  void write(std::shared_ptr<const Message> message, bool more_queued) override {
    std::lock_guard lock(mutex_);
    if (reactor_ == nullptr || finished_) return;
    if (metrics_ != nullptr) metrics_->frame_sent(frame_kind(*message), message->ByteSizeLong());
    in_flight_ = std::move(message);
    grpc::WriteOptions options;
    if (more_queued) options.set_buffer_hint();  // flushed with the next write that has no hint
    reactor_->StartWrite(in_flight_.get(), options);
  }

  void finish(RpcStatus status) override {
    std::lock_guard lock(mutex_);
    finish_locked(status);
  }

  // ---- reactions, on gRPC threads ----
  void on_write_done(bool ok) {
    std::lock_guard lock(mutex_);
    in_flight_.reset();
    if (actor_) {
      caf::anon_send(actor_, atoms::write_done_atom_v, ok);
    } else {
      unreported_write_done_ = ok;
    }
  }
  void on_cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    finish_locked(RpcStatus{StatusCode::kCancelled, "cancelled by the client", {}});
    if (actor_) caf::anon_send(actor_, atoms::cancelled_atom_v);
  }
  void on_done() {
    std::lock_guard lock(mutex_);
    release_once(RpcStatus{StatusCode::kCancelled, "the call ended", {}});
    reactor_ = nullptr;
    context_ = nullptr;
  }

 private:
  void finish_locked(const RpcStatus& status) {
    if (finished_ || reactor_ == nullptr) return;
    finished_ = true;
    release_once(status);
    reactor_->Finish(to_grpc(context_, status));
  }
  void release_once(const RpcStatus& status) {
    if (!release_) return;
    auto release = std::move(release_);
    release_ = nullptr;
    release(status);
  }

  std::recursive_mutex mutex_;  // gRPC may run a reaction inline from a Start* call
  grpc::CallbackServerContext* context_;
  grpc::ServerWriteReactor<Message>* reactor_;
  StreamRelease release_;
  metrics::RelayMetrics* metrics_;
  caf::actor actor_;
  std::shared_ptr<const Message> in_flight_;  // kept alive until OnWriteDone
  std::optional<bool> unreported_write_done_;  // a completion that came before bind()
  bool finished_ = false;
  bool cancelled_ = false;
};

template <class Message>
class StreamReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  StreamReactor(grpc::CallbackServerContext* context, StreamRelease release, metrics::RelayMetrics* metrics)
      : link_(std::make_shared<StreamLink<Message>>(context, this, std::move(release), metrics)) {}

  const std::shared_ptr<StreamLink<Message>>& link() const { return link_; }

  void OnWriteDone(bool ok) override { link_->on_write_done(ok); }
  void OnCancel() override { link_->on_cancel(); }
  void OnDone() override {
    link_->on_done();
    delete this;
  }

 private:
  std::shared_ptr<StreamLink<Message>> link_;
};

// A stream refused before it started: trailers-only, with the status and its reason.
template <class Message>
class RefusedStream final : public grpc::ServerWriteReactor<Message> {
 public:
  RefusedStream(grpc::CallbackServerContext* context, const RpcStatus& status) {
    this->Finish(to_grpc(context, status));
  }
  void OnDone() override { delete this; }
};

}  // namespace kvrelay::gateway
