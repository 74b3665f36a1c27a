#pragma once
// How a KV event batch reaches its pool (docs/architecture.md#batch-routing). Every declared
// source has one lane: its cursor (docs/protocol/decisions.md#d16) and the pool generation its
// batches go to. Membership makes and updates the lanes and publishes the set of them, after
// every change, as an immutable routing view. Whoever carries a source's batches -- a
// PublishKvEvents stream on a gRPC thread, an engine source actor -- finds the source's lane
// in the current view and sends each batch from there straight to the pool's publisher, so
// batches of different pools never queue behind one another in one actor.
#include <caf/all.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "actors/messages.hpp"
#include "actors/pool_publisher.hpp"
#include "actors/published_view.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

// A pool generation as seen by the sources that feed it. A re-layout keeps the publisher and
// the lineage (MaterializedPool::lineage); a rebuilt pool has a new one of each.
struct PoolRoute {
  PoolPublisherActor publisher;
  std::uint64_t lineage = 0;
};

// What membership says of a source: how it is declared and where its batches go now.
struct LaneDeclaration {
  SourceTransport transport = SourceTransport::kPush;
  caf::actor_addr feeder;         // zmq: the engine source actor reading it now (its predecessors are refused)
  std::optional<PoolRoute> pool;  // none: its endpoint holds no pool now, so its batches are refused
};

// A source's place in its stream of batches: the epoch and next sequence it is at, and the
// lineage of the pool its last batch went to.
struct SourceCursor {
  std::uint64_t epoch = 0;
  std::uint64_t next_sequence = 0;
  std::uint64_t lineage = 0;
};

// A lane as GetState reports it.
struct LaneReport {
  std::optional<std::uint64_t> last_sequence;  // none before the first accepted batch
  std::uint64_t resets = 0;                    // since the source was declared
};

// A batch on its way to its pool, with who waits for its outcome.
struct CarriedBatch {
  EventBatchPtr batch;
  BatchReplyPtr reply;
  std::int64_t receipt_ns = 0;  // when it reached the relay (steady clock)
  SourceTransport transport = SourceTransport::kPush;
  caf::actor_addr carrier;  // zmq: the engine source actor that read it
};

// Shared by membership (declare, retire, report) and the source's carriers (carry), on any
// thread. A batch is sequenced and sent on under the lane's lock, so a source's batches reach
// its publisher in the order their sequencing saw them, even from two streams at once.
class SourceLane {
 public:
  void declare(LaneDeclaration declaration);
  // The source is no longer declared. Once this returns nothing more is carried, so a reset
  // the caller sends the pool afterwards arrives after the source's last batch.
  void retire();
  // The relay is stopping: from now on every batch is refused as draining. Once this returns
  // nothing more is carried, so a pool retired afterwards receives no batch after its retirement.
  void drain();
  LaneReport report() const;

  // Sequences the batch and sends it on; a batch it refuses (undeclared source, no pool, a
  // replaced engine source, a stale sequence) is answered here and counted.
  void carry(CarriedBatch carried, metrics::RelayMetrics* metrics);

 private:
  enum class Verdict { kStale, kInOrder, kEpochChanged, kSequenceGap, kNewGeneration };
  bool accepts(const CarriedBatch& carried) const;
  Verdict sequence(const ingest_v1::KvEventBatch& batch, std::uint64_t lineage);

  mutable std::mutex mutex_;
  LaneDeclaration declaration_;
  std::optional<SourceCursor> cursor_;
  std::uint64_t resets_ = 0;
  bool retired_ = false;
  bool draining_ = false;
};

// Every declared source's lane, as membership last published them.
struct RoutingView {
  std::map<SourceId, std::shared_ptr<SourceLane>> lanes;
  bool open = true;  // false once membership is gone: batches are answered lost

  static std::shared_ptr<const RoutingView> closed() {
    auto view = std::make_shared<RoutingView>();
    view->open = false;
    return view;
  }
};
using RoutingRegistry = PublishedView<RoutingView>;

// What a carrier holds to hand batches on: the published routing view, read per batch. A
// router made without one answers every batch lost.
class BatchRouter {
 public:
  BatchRouter() = default;
  BatchRouter(std::shared_ptr<const RoutingRegistry> routes, metrics::RelayMetrics* metrics)
      : routes_(std::move(routes)), metrics_(metrics) {}

  void route(CarriedBatch carried) const;

 private:
  std::shared_ptr<const RoutingRegistry> routes_;
  metrics::RelayMetrics* metrics_ = nullptr;  // none: nothing is recorded
};

}  // namespace kvrelay
