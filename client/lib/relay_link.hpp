#pragma once
// Everything a consumer holds about one relay: its channel, the five planes, one subscription
// thread per supported pool, and the reactions that keep them converging on the relay's state.
// Planes are independent: a fault in one invalidates only that one (a new relay incarnation is
// the exception — it invalidates everything learned from the old one).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "client/lib/catalog_state.hpp"
#include "client/lib/load_state.hpp"
#include "client/lib/pool_replica.hpp"
#include "client/lib/query.hpp"
#include "client/lib/reaction.hpp"
#include "client/lib/readiness_state.hpp"
#include "client/lib/serving_load_state.hpp"
#include "client/lib/stream_control.hpp"
#include "core/backoff.hpp"
#include "dynamo/kvrelay/v1/relay.grpc.pb.h"
#include "kvrelay/client/consumer.hpp"

namespace kvrelay::client {

struct Consumer::Notifier {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t version = 0;
  void bump() {
    {
      std::lock_guard lock(mutex);
      ++version;
    }
    changed.notify_all();
  }
};

// How a stream ended: the relay's status and reason, or a local fault that made us cancel it.
struct StreamEnd {
  grpc::Status status;
  std::string reason_text;  // the trailer as sent: named in describe() also when this client does not know it
  std::optional<Fault> fault;
  std::optional<v1::RelayErrorReason> reason() const { return parse_reason(reason_text); }
  std::string describe() const;
};

class RelayLink {
 public:
  RelayLink(std::string target, const ConsumerOptions& options, std::shared_ptr<Consumer::Notifier> notifier);
  ~RelayLink();

  bool start();  // false once started or stopped
  void stop();
  RelayView view() const;
  const std::string& target() const { return target_; }
  std::optional<ReplicaDigest> replica_digest(std::string_view endpoint) const;
  void match(std::string_view model, PromptHashes& prompt, std::vector<PoolMatch>& out) const;

 private:
  struct Subscription {
    StreamControl control;
    std::thread thread;
    std::atomic<bool> finished{false};  // its thread has left run_pool: joining it cannot wait
  };
  struct PoolSlot {
    CatalogPool pool;
    std::unique_ptr<PoolReplica> replica;
    ReplicaStatus status = ReplicaStatus::kSubscribing;
    std::optional<Retry> parked;  // why the subscription stopped retrying, until the catalog moves
    std::uint64_t parked_at_revision = 0;
    std::uint64_t subscriptions = 0;
    std::string last_fault;
    std::optional<std::chrono::steady_clock::time_point> last_frame;
    std::shared_ptr<Subscription> subscription;
  };
  struct PlaneStats {
    std::uint64_t opens = 0;
    std::string last_error;
    std::optional<std::chrono::steady_clock::time_point> last_message;
    bool unavailable = false;  // the stream ended with Retry::kNever
  };
  template <class Response>
  using Reader = std::unique_ptr<grpc::ClientReaderInterface<Response>>;
  template <class Request, class Response>
  using Rpc = std::unique_ptr<grpc::ClientReader<Response>> (v1::KvEventRelay::Stub::*)(grpc::ClientContext*,
                                                                                        const Request&);

  template <class Request, class Response, class State>
  void launch_plane(Plane plane, StreamControl& control, PlaneStats& stats, Rpc<Request, Response> rpc, State& state,
                    void (RelayLink::*after_apply)() = nullptr);
  template <class Response>
  void run_plane(Plane plane, StreamControl& control, PlaneStats& stats,
                 const std::function<Reader<Response>(grpc::ClientContext*)>& open,
                 const std::function<Applied(const Response&)>& apply, const std::function<void()>& invalidate);
  // `stats` is null for pool streams (plane streams count their opens there). `usable` tells,
  // after a message applied, whether the stream now gives what it is for (a pool's installed
  // snapshot); the backoff hears how long it did.
  template <class Response>
  StreamEnd read_stream(StreamControl& control, PlaneStats* stats,
                        const std::function<Reader<Response>(grpc::ClientContext*)>& open,
                        const std::function<Applied(const Response&)>& apply, const std::function<bool()>& usable,
                        Backoff& backoff);
  void run_pool(std::shared_ptr<Subscription> subscription, wire::PoolKey key);
  bool prepare_pool_stream(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key,
                           v1::SubscribeKvPoolRequest& request);
  Applied apply_pool_frame(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key,
                           const v1::FilterUpdate& update);
  bool replica_installed(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key);
  bool settle_pool_stream(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key,
                          const StreamEnd& end, const Reaction& reaction);

  // Asks GetRelayInfo once per backoff cap until another incarnation than the one of
  // `changes_seen` identity changes answers (or another stream saw one); false once stopped.
  bool await_new_incarnation(StreamControl& control, PlaneStats& stats, std::uint64_t changes_seen);
  // GetRelayInfo, its identity observed: false when the relay is unreachable, incompatible, or
  // answered for an incarnation that another stream has since left.
  bool verify_relay(StreamControl& control, PlaneStats& stats);
  // Under the lock. Adopts the identity a message speaks for: one of another relay incarnation
  // drops everything from the old one. False for a stream opened before the last change that
  // still speaks for another relay: its message must not undo the change.
  bool observe_identity(const v1::RelayIdentity& relay, std::uint64_t changes_at_open);
  // Under the lock: every plane invalidated and every subscription retired.
  void forget_relay_state();
  void reconcile_pools();
  void subscribe(PoolSlot& slot);
  void retire(PoolSlot& slot);
  void mark_incompatible(std::string why);
  void note_error(PlaneStats& stats, std::string what);
  // Applies `change` to the view under the lock, then wakes whoever awaits the view: every
  // change an await may look for goes through here or through a message's apply.
  template <class Change>
  void change_view(Change&& change) {
    {
      std::unique_lock lock(mutex_);
      change();
    }
    notifier_->bump();
  }
  void stop_planes();
  // Joins the retired subscription threads that have finished, or all of them (stop): a plane
  // thread never waits for a pool thread still in a tap. Never under the lock.
  void reap(bool all = false);
  PoolSlot* slot_of(const wire::PoolKey& key, const std::shared_ptr<Subscription>& subscription);
  v1::SubscribeKvPoolRequest pool_request(const PoolSlot& slot) const;
  PoolView pool_view(const PoolSlot& slot) const;
  std::optional<LoadFacts> load_of(const wire::ProducerKey& producer) const;
  static PlaneView plane_view(bool valid, const PlaneStats& stats);
  void add_serving_load(RelayView& view) const;
  std::optional<v1::ServingReadinessState> readiness_of(const CatalogPool& pool, const Binding& binding) const;
  std::optional<v1::ServingReadinessState> base_readiness(const CatalogPool& pool) const;

  const std::string target_;
  const ConsumerOptions options_;
  const std::shared_ptr<Consumer::Notifier> notifier_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvEventRelay::Stub> stub_;

  mutable std::shared_mutex mutex_;  // guards everything below
  std::optional<v1::RelayIdentity> identity_;
  std::uint64_t identity_changes_ = 0;
  bool incompatible_ = false;
  std::string incompatibility_;  // what the first contract mismatch was
  CatalogState catalog_;
  ReadinessState readiness_;
  LoadState load_;
  ServingLoadState serving_load_;
  PlaneStats catalog_stats_, readiness_stats_, load_stats_, serving_load_stats_;
  std::map<wire::PoolKey, PoolSlot> slots_;
  std::vector<std::shared_ptr<Subscription>> retired_;

  StreamControl catalog_control_, readiness_control_, load_control_, serving_load_control_;
  std::vector<std::thread> plane_threads_;
  // A link runs once: start() after the first, or after stop(), does nothing, and stop() may
  // come more than once (and from the destructor).
  enum class Phase { kNew, kRunning, kStopped };
  std::mutex lifecycle_;
  Phase phase_ = Phase::kNew;
};

}  // namespace kvrelay::client
