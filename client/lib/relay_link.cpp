#include "client/lib/relay_link.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace kvrelay::client {

namespace {

constexpr auto kInfoDeadline = std::chrono::seconds(5);

bool same_relay(const v1::RelayIdentity& a, const v1::RelayIdentity& b) {
  return a.drt_instance_id() == b.drt_instance_id() && a.relay_incarnation() == b.relay_incarnation();
}

// The envelope of a streamed message, checked before its relay identity is trusted.
template <class Response>
bool envelope_ok(const Response& message) {
  return !wire::check_envelope(message.contract_marker(), message.protocol_version()) && message.has_relay();
}

// Whether the pool's stream opens again by itself, or waits for a catalog or a new incarnation.
bool retries(const Reaction& reaction) {
  return reaction.retry == Retry::kBackoff || reaction.retry == Retry::kVerifyRelay;
}

Reaction reaction_to(Plane plane, const StreamEnd& end) {
  return end.fault ? react_to_fault(*end.fault) : react(plane, end.status, end.reason());
}

}  // namespace

std::string StreamEnd::describe() const {
  if (fault) return fmt::format("local fault {}: {}", fault->kind, fault->detail);
  const auto reason = this->reason();
  const auto reason_name = reason                ? v1::RelayErrorReason_Name(*reason)
                           : reason_text.empty() ? std::string("no reason")
                                                 : fmt::format("{}, unknown to this client", reason_text);
  if (status.ok()) return "the relay ended the stream cleanly (state invalidated)";
  return fmt::format("status {} [{}]: {}", static_cast<int>(status.error_code()), reason_name, status.error_message());
}

RelayLink::RelayLink(std::string target, const ConsumerOptions& options, std::shared_ptr<Consumer::Notifier> notifier)
    : target_(std::move(target)), options_(options), notifier_(std::move(notifier)) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_receive_bytes);
  // Pool streams must stay on one connection: each relay replica has its own identity.
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A server stream sends the relay nothing, so without pings of its own the consumer would
  // wait on a dead connection for ever. The relay accepts pings at any rate (d24); gRPC stops
  // pinging after two pings without data sent unless told otherwise.
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options_.keepalive_time.count()));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options_.keepalive_timeout.count()));
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  channel_ = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), arguments);
  stub_ = v1::KvEventRelay::NewStub(channel_);
}

RelayLink::~RelayLink() { stop(); }

bool RelayLink::start() {
  std::lock_guard lifecycle(lifecycle_);
  if (phase_ != Phase::kNew) return false;
  phase_ = Phase::kRunning;
  launch_plane(Plane::kCatalog, catalog_control_, catalog_stats_, &v1::KvEventRelay::Stub::WatchKvPoolCatalog, catalog_,
               &RelayLink::reconcile_pools);
  launch_plane(Plane::kReadiness, readiness_control_, readiness_stats_,
               &v1::KvEventRelay::Stub::SubscribeServingReadiness, readiness_);
  launch_plane(Plane::kLoad, load_control_, load_stats_, &v1::KvEventRelay::Stub::SubscribeKvPoolLoad, load_);
  launch_plane(Plane::kServingLoad, serving_load_control_, serving_load_stats_,
               &v1::KvEventRelay::Stub::SubscribeServingLoad, serving_load_);
  return true;
}

// A plane's thread: its stream feeds `state` under the lock, once the message's relay identity
// has been observed; `after_apply` runs (still under the lock) after every applied snapshot.
template <class Request, class Response, class State>
void RelayLink::launch_plane(Plane plane, StreamControl& control, PlaneStats& stats, Rpc<Request, Response> rpc,
                             State& state, void (RelayLink::*after_apply)()) {
  plane_threads_.emplace_back([=, this, &control, &stats, &state] {
    Request request;
    request.set_subscriber_id(options_.subscriber_id);
    request.set_contract_marker(wire::kContractMarker);
    std::uint64_t changes_at_open = 0;  // identity changes seen when the current stream opened
    const auto open = [&](grpc::ClientContext* context) -> Reader<Response> {
      {
        std::unique_lock lock(mutex_);
        changes_at_open = identity_changes_;
      }
      return (stub_.get()->*rpc)(context, request);
    };
    const auto apply = [&](const Response& update) -> Applied {
      std::unique_lock lock(mutex_);
      // Found incompatible by another stream, whose stop of this one may not have landed yet:
      // nothing more of this relay is applied (a catalog would subscribe its pools again).
      if (incompatible_) return std::nullopt;
      if (envelope_ok(update) && !observe_identity(update.relay(), changes_at_open)) {
        return Fault{"RelayIdentityDrift", "a stream opened before the relay changed speaks for another incarnation"};
      }
      auto fault = state.apply(update);
      if (fault) return fault;
      stats.last_message = std::chrono::steady_clock::now();
      if (after_apply != nullptr) (this->*after_apply)();
      return fault;
    };
    run_plane<Response>(plane, control, stats, open, apply, [&] { state.invalidate(); });
  });
}

void RelayLink::stop() {
  std::lock_guard lifecycle(lifecycle_);
  if (phase_ == Phase::kStopped) return;
  phase_ = Phase::kStopped;
  stop_planes();
  for (auto& thread : plane_threads_) thread.join();
  plane_threads_.clear();
  change_view([this] { forget_relay_state(); });
  reap(true);
}

template <class Response>
StreamEnd RelayLink::read_stream(StreamControl& control, PlaneStats* stats,
                                 const std::function<Reader<Response>(grpc::ClientContext*)>& open,
                                 const std::function<Applied(const Response&)>& apply,
                                 const std::function<bool()>& usable, Backoff& backoff) {
  grpc::ClientContext context;
  control.attach(&context);
  auto reader = open(&context);
  if (stats != nullptr) change_view([stats] { ++stats->opens; });
  StreamEnd end;
  std::optional<std::chrono::steady_clock::time_point> usable_since;
  Response message;
  while (reader->Read(&message)) {
    end.fault = apply(message);
    notifier_->bump();
    // Plane threads join the subscriptions a message retired; a pool thread could be joining itself.
    if (stats != nullptr) reap();
    if (end.fault) {
      context.TryCancel();
      break;
    }
    if (!usable_since && usable()) usable_since = std::chrono::steady_clock::now();
  }
  end.status = reader->Finish();
  backoff.attempt_ended(usable_since, std::chrono::steady_clock::now());
  control.detach();
  end.reason_text = reason_trailer(context);
  return end;
}

template <class Response>
void RelayLink::run_plane(Plane plane, StreamControl& control, PlaneStats& stats,
                          const std::function<Reader<Response>(grpc::ClientContext*)>& open,
                          const std::function<Applied(const Response&)>& apply,
                          const std::function<void()>& invalidate) {
  Backoff backoff({options_.backoff_initial, options_.backoff_max});
  bool verify = true;
  while (!control.stopped()) {
    if (verify && !verify_relay(control, stats)) {
      if (!control.wait(backoff.next())) return;
      continue;
    }
    verify = false;
    const StreamEnd end = read_stream<Response>(
        control, &stats, open, apply, [] { return true; }, backoff);
    if (control.stopped()) return;
    const Reaction reaction = reaction_to(plane, end);
    std::uint64_t changes_at_end = 0;
    // Every end — an error, a local fault, even a clean end — leaves this plane's state stale.
    {
      std::unique_lock lock(mutex_);
      invalidate();
      stats.last_error = end.describe();
      stats.unavailable = reaction.retry == Retry::kNever && !reaction.stop_relay;
      changes_at_end = identity_changes_;
    }
    notifier_->bump();
    reap();
    if (reaction.stop_relay) return mark_incompatible(end.describe());
    if (reaction.retry == Retry::kNever) {
      // Not for this incarnation; a relay that restarts (an upgrade, say) may serve it.
      if (!await_new_incarnation(control, stats, changes_at_end)) return;
      change_view([&stats] { stats.unavailable = false; });
      verify = true;
      continue;
    }
    verify = reaction.retry == Retry::kVerifyRelay;
    if (!control.wait(backoff.next())) return;
  }
}

bool RelayLink::await_new_incarnation(StreamControl& control, PlaneStats& stats, std::uint64_t changes_seen) {
  const auto period = std::max(options_.backoff_max, std::chrono::milliseconds(1));
  while (control.wait(period)) {
    verify_relay(control, stats);
    std::shared_lock lock(mutex_);
    if (identity_changes_ > changes_seen) return true;
  }
  return false;
}

bool RelayLink::verify_relay(StreamControl& control, PlaneStats& stats) {
  std::uint64_t changes_at_call = 0;
  {
    std::shared_lock lock(mutex_);
    changes_at_call = identity_changes_;
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kInfoDeadline);
  control.attach(&context);
  v1::RelayInfoRequest request;
  request.set_contract_marker(wire::kContractMarker);
  v1::RelayInfo info;
  const grpc::Status status = stub_->GetRelayInfo(&context, request, &info);
  control.detach();
  if (control.stopped()) return false;
  if (!status.ok()) {
    const std::string what =
        fmt::format("GetRelayInfo: status {}: {}", static_cast<int>(status.error_code()), status.error_message());
    // A relay of another contract refuses our marker rather than answering with its own.
    if (react(Plane::kCatalog, status, parse_reason(reason_trailer(context))).stop_relay) {
      mark_incompatible(what + " (CONTRACT_MISMATCH)");
      return false;
    }
    note_error(stats, what);
    return false;
  }
  // Another marker or protocol version is another contract; any other invalid answer is a
  // fault of this answer, asked again after the backoff (docs/consumer.md#validation).
  if (auto error = wire::check_response(info)) {
    const std::string what = fmt::format("GetRelayInfo: {} ({})", wire::to_string(error->code), error->message);
    if (react_to_fault(fault_of(*error)).stop_relay) {
      mark_incompatible(what);
    } else {
      note_error(stats, what);
    }
    return false;
  }
  // The answer names the relay as it is now: a new incarnation voids what the old one said.
  bool current = false;
  change_view([&] { current = observe_identity(info.relay(), changes_at_call); });
  return current;
}

// What a plane shows while it waits to check again; those awaiting a view are told.
// A plane this incarnation refused keeps the refusal as its error: the checks for a new
// incarnation meanwhile are background work.
void RelayLink::note_error(PlaneStats& stats, std::string what) {
  change_view([&] {
    if (!stats.unavailable) stats.last_error = std::move(what);
  });
}

void RelayLink::mark_incompatible(std::string why) {
  {
    std::unique_lock lock(mutex_);
    if (!incompatible_) incompatibility_ = std::move(why);
    incompatible_ = true;
    forget_relay_state();
  }
  stop_planes();
  notifier_->bump();
}

void RelayLink::stop_planes() {
  for (auto* control : {&catalog_control_, &readiness_control_, &load_control_, &serving_load_control_}) {
    control->stop();
  }
}

// Only a stream opened since the last change may change the identity again: a late message
// of an older stream, from the relay the change left, is no news. Which of two incarnations is
// newer cannot be told from their random ids, so the order streams opened in decides.
bool RelayLink::observe_identity(const v1::RelayIdentity& relay, std::uint64_t changes_at_open) {
  if (identity_ && same_relay(*identity_, relay)) return true;
  if (identity_) {
    if (changes_at_open < identity_changes_) return false;
    ++identity_changes_;
    forget_relay_state();
  }
  identity_ = relay;
  return true;
}

void RelayLink::forget_relay_state() {
  catalog_.invalidate();
  readiness_.invalidate();
  load_.invalidate();
  serving_load_.invalidate();
  for (auto& [key, slot] : slots_) retire(slot);
  slots_.clear();
}

// A new producer for a known pool replaces its slot; a pool absent or quarantined is dropped;
// a subscription parked until "a newer catalog" restarts once one arrives.
void RelayLink::reconcile_pools() {
  const auto& pools = catalog_.pools();
  for (auto it = slots_.begin(); it != slots_.end();) {
    const auto* pool = catalog_.find(it->first);
    if (pool != nullptr && pool->producer == it->second.pool.producer) {
      ++it;
      continue;
    }
    retire(it->second);
    it = slots_.erase(it);
  }
  for (const auto& [key, pool] : pools) {
    auto [it, inserted] = slots_.try_emplace(key);
    auto& slot = it->second;
    slot.pool = pool;
    const bool retry_now = slot.parked == Retry::kAwaitNewCatalog && catalog_.revision() > slot.parked_at_revision;
    if (inserted || retry_now) subscribe(slot);
  }
}

void RelayLink::subscribe(PoolSlot& slot) {
  retire(slot);
  slot.parked.reset();
  slot.status = ReplicaStatus::kSubscribing;
  if (!options_.subscribe_pools) return;
  auto subscription = std::make_shared<Subscription>();
  slot.subscription = subscription;
  subscription->thread = std::thread([this, subscription, key = slot.pool.producer.pool] {
    run_pool(subscription, key);
    subscription->finished.store(true, std::memory_order_release);
  });
}

void RelayLink::retire(PoolSlot& slot) {
  slot.replica.reset();
  if (!slot.subscription) return;
  slot.subscription->control.stop();
  retired_.push_back(std::move(slot.subscription));
}

void RelayLink::reap(bool all) {
  std::vector<std::shared_ptr<Subscription>> done;
  {
    std::unique_lock lock(mutex_);
    const auto still_running = std::partition(retired_.begin(), retired_.end(), [all](const auto& subscription) {
      return !all && !subscription->finished.load(std::memory_order_acquire);
    });
    done.assign(std::make_move_iterator(still_running), std::make_move_iterator(retired_.end()));
    retired_.erase(still_running, retired_.end());
  }
  for (auto& subscription : done) subscription->thread.join();
}

RelayLink::PoolSlot* RelayLink::slot_of(const wire::PoolKey& key, const std::shared_ptr<Subscription>& subscription) {
  const auto it = slots_.find(key);
  if (it == slots_.end() || it->second.subscription != subscription) return nullptr;
  return &it->second;
}

void RelayLink::run_pool(std::shared_ptr<Subscription> subscription, wire::PoolKey key) {
  Backoff backoff({options_.backoff_initial, options_.backoff_max});
  const auto open = [&](grpc::ClientContext* context) -> Reader<v1::FilterUpdate> {
    v1::SubscribeKvPoolRequest request;
    if (!prepare_pool_stream(subscription, key, request)) context->TryCancel();
    notifier_->bump();  // a new subscription shows in the view
    return stub_->SubscribeKvPool(context, request);
  };
  const auto apply = [&](const v1::FilterUpdate& update) {
    if (options_.frame_tap) options_.frame_tap(update);
    return apply_pool_frame(subscription, key, update);
  };
  while (!subscription->control.stopped()) {
    const StreamEnd end = read_stream<v1::FilterUpdate>(
        subscription->control, nullptr, open, apply, [&] { return replica_installed(subscription, key); }, backoff);
    if (subscription->control.stopped()) return;
    const Reaction reaction = reaction_to(Plane::kPool, end);
    if (reaction.stop_relay) return mark_incompatible(end.describe());
    if (!settle_pool_stream(subscription, key, end, reaction)) return;
    if (!subscription->control.wait(backoff.next())) return;
  }
}

// A fresh replica for every stream: a pool stream always starts with a new snapshot.
bool RelayLink::prepare_pool_stream(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key,
                                    v1::SubscribeKvPoolRequest& request) {
  std::unique_lock lock(mutex_);
  auto* slot = slot_of(key, subscription);
  if (slot == nullptr || !identity_) return false;
  request.set_subscriber_id(options_.subscriber_id);
  request.set_contract_marker(wire::kContractMarker);
  *request.mutable_expected_producer() = slot->pool.descriptor.producer();
  slot->replica = std::make_unique<PoolReplica>(slot->pool.descriptor.producer(), *identity_);
  slot->status = ReplicaStatus::kSubscribing;
  ++slot->subscriptions;
  return true;
}

Applied RelayLink::apply_pool_frame(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key,
                                    const v1::FilterUpdate& update) {
  std::vector<BucketImage> applied;  // filled only for the delta tap
  {
    std::unique_lock lock(mutex_);
    auto* slot = slot_of(key, subscription);
    if (slot == nullptr || !slot->replica) return Fault{"Retired", "the subscription was retired"};
    auto fault = slot->replica->apply(update, options_.delta_tap ? &applied : nullptr);
    if (fault) return fault;
    slot->last_frame = std::chrono::steady_clock::now();
    if (slot->replica->installed()) slot->status = ReplicaStatus::kInstalled;
  }
  // Outside the lock, as the frame tap: the tap may query the consumer. Images were handed over
  // only if a delta was applied (a delta without images is a fault).
  if (!applied.empty()) options_.delta_tap({update.producer(), update.sequence(), applied});
  return std::nullopt;
}

bool RelayLink::replica_installed(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key) {
  std::unique_lock lock(mutex_);
  const auto* slot = slot_of(key, subscription);
  return slot != nullptr && slot->replica && slot->replica->installed();
}

// Drops the replica and records what the reaction decided; false when the thread should end.
bool RelayLink::settle_pool_stream(const std::shared_ptr<Subscription>& subscription, const wire::PoolKey& key,
                                   const StreamEnd& end, const Reaction& reaction) {
  {
    std::unique_lock lock(mutex_);
    auto* slot = slot_of(key, subscription);
    if (slot == nullptr) return false;
    slot->replica.reset();
    slot->last_fault = end.describe();
    slot->status = reaction.quarantine_pool ? ReplicaStatus::kQuarantined
                   : retries(reaction)      ? ReplicaStatus::kSubscribing
                                            : ReplicaStatus::kWaiting;
    if (!retries(reaction)) {
      slot->parked = reaction.retry;
      slot->parked_at_revision = catalog_.revision();
    }
  }
  notifier_->bump();
  return retries(reaction);
}

std::optional<LoadFacts> RelayLink::load_of(const wire::ProducerKey& producer) const {
  const auto* entry = load_.find_pool(producer);
  if (entry == nullptr) return std::nullopt;
  return load_facts(*entry);
}

// Readiness is keyed by the serving namespace and the base model; a LoRA binding reads its
// adapter's row of the base entry.
std::optional<v1::ServingReadinessState> RelayLink::readiness_of(const CatalogPool& pool,
                                                                 const Binding& binding) const {
  if (!readiness_.valid()) return std::nullopt;
  const auto& ns = pool.descriptor.serving_endpoint().namespace_();
  const auto* entry = readiness_.find({ns, binding.base_model});
  if (entry == nullptr) return std::nullopt;
  if (!binding.adapter) return entry->state();
  for (const auto& adapter : entry->adapters()) {
    if (adapter.canonical_model_id() == binding.canonical_model_id) return adapter.state();
  }
  return std::nullopt;
}

// A pool's readiness: the first entry one of its base registrations has.
std::optional<v1::ServingReadinessState> RelayLink::base_readiness(const CatalogPool& pool) const {
  for (const auto& registration : pool.descriptor.registrations()) {
    if (!registration.target().has_base()) continue;
    if (auto state = readiness_of(pool, binding_of(registration))) return state;
  }
  return std::nullopt;
}

void RelayLink::match(std::string_view model, PromptHashes& prompt, std::vector<PoolMatch>& out) const {
  std::shared_lock lock(mutex_);
  if (!catalog_.valid()) return;
  const auto resolution = catalog_.resolve(model);
  if (!resolution) return;
  for (const auto& key : resolution->pools) {
    const auto& slot = slots_.at(key);
    if (slot.status == ReplicaStatus::kQuarantined) continue;  // its names stop resolving (docs/consumer.md)
    const auto& descriptor = slot.pool.descriptor;
    const auto semantics = semantics_of(descriptor, resolution->binding);
    const auto hashes = prompt.sequence_hashes(semantics);
    PoolMatch match;
    match.target = target_;
    match.dc_id = key.dc_id;
    match.endpoint = endpoint_name(descriptor.serving_endpoint());
    match.canonical_model_id = resolution->binding.canonical_model_id;
    match.adapter = resolution->binding.adapter;
    match.block_size = semantics.block_size;
    match.prompt_blocks = hashes.size();
    if (slot.replica && slot.replica->installed()) {
      match.depth = prefix_depth(slot.replica->words(), slot.replica->addressing(), hashes);
      match.sequence = slot.replica->sequence();
    }
    match.readiness = readiness_of(slot.pool, resolution->binding);
    match.load = load_of(slot.pool.producer);
    out.push_back(std::move(match));
  }
}

PoolView RelayLink::pool_view(const PoolSlot& slot) const {
  PoolView view;
  view.descriptor = slot.pool.descriptor;
  view.endpoint = endpoint_name(slot.pool.descriptor.serving_endpoint());
  view.status = slot.status;
  view.bucket_count = slot.pool.producer.ckf_format.bucket_count;
  view.subscriptions = slot.subscriptions;
  view.last_fault = slot.last_fault;
  view.last_frame = slot.last_frame;
  view.readiness = base_readiness(slot.pool);  // its model's, whatever becomes of its replica
  // A quarantined pool's load goes with its replica (docs/consumer.md): no fallback.
  if (slot.status != ReplicaStatus::kQuarantined) {
    view.load = load_of(slot.pool.producer);
    if (const auto* serving = serving_load_.find_pool(slot.pool.producer)) view.serving_load = *serving;
  }
  if (const auto* replica = slot.replica.get(); replica != nullptr && replica->installed()) {
    view.sequence = replica->sequence();
    view.deltas_applied = replica->deltas_applied();
    view.images_applied = replica->images_applied();
    view.stale_deltas = replica->stale_deltas();
    view.occupied_slots = replica->occupied_slots();
  }
  return view;
}

PlaneView RelayLink::plane_view(bool valid, const PlaneStats& stats) {
  return {.valid = valid,
          .unavailable = stats.unavailable,
          .opens = stats.opens,
          .last_error = stats.last_error,
          .last_message = stats.last_message};
}

void RelayLink::add_serving_load(RelayView& view) const {
  view.serving_load = plane_view(serving_load_.valid(), serving_load_stats_);
  view.serving_load_window = serving_load_.window_sequence();
  const auto& window = serving_load_.window();
  for (const auto& [key, pool] : window.pools) view.serving_pools.push_back(pool);
  for (const auto& [key, model] : window.models) view.serving_models.push_back(model);
  view.serving_load_quarantined = window.quarantined;
}

std::optional<ReplicaDigest> RelayLink::replica_digest(std::string_view endpoint) const {
  std::shared_lock lock(mutex_);
  for (const auto& [key, slot] : slots_) {
    if (endpoint_name(slot.pool.descriptor.serving_endpoint()) != endpoint) continue;
    if (!slot.replica || !slot.replica->installed()) return std::nullopt;
    return ReplicaDigest{slot.replica->sequence(), slot.replica->digest()};
  }
  return std::nullopt;
}

RelayView RelayLink::view() const {
  std::shared_lock lock(mutex_);
  RelayView view;
  view.target = target_;
  view.identity = identity_;
  view.incompatible = incompatible_;
  view.incompatibility = incompatibility_;
  view.identity_changes = identity_changes_;
  view.catalog = plane_view(catalog_.valid(), catalog_stats_);
  view.readiness = plane_view(readiness_.valid(), readiness_stats_);
  view.load = plane_view(load_.valid(), load_stats_);
  view.catalog_revision = catalog_.revision();
  view.readiness_revision = readiness_.revision();
  view.load_window = load_.window_sequence();
  add_serving_load(view);
  for (const auto& [key, slot] : slots_) view.pools.push_back(pool_view(slot));
  for (const auto& quarantined : catalog_.quarantined()) {
    view.quarantined_pools.push_back(
        fmt::format("{} ({})", wire::to_string(quarantined.error.code), quarantined.error.field));
  }
  for (const auto& [key, entry] : readiness_.entries()) view.readiness_entries.push_back(entry);
  for (const auto& [key, fault] : readiness_.quarantined()) {
    view.quarantined_entries.push_back(fmt::format("{}/{}: {}", key.first, key.second, fault.kind));
  }
  return view;
}

}  // namespace kvrelay::client
