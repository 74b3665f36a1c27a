#include "app/relay_runtime.hpp"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <caf/all.hpp>

#include <condition_variable>
#include <mutex>
#include <random>

#include "actors/catalog.hpp"
#include "actors/ingest_refusal.hpp"
#include "actors/load_window.hpp"
#include "actors/membership.hpp"
#include "actors/snapshot_encoders.hpp"
#include "actors/supervisor.hpp"
#include "actors/topology_projector.hpp"
#include "app/cgroup_memory.hpp"
#include "app/open_files.hpp"
#include "core/capacity.hpp"
#include "core/ckf.hpp"
#include "core/identity.hpp"
#include "core/ingest_limits.hpp"
#include "core/ingest_validation.hpp"
#include "core/xxh3.hpp"
#include "grpc_gateway/ingest_service.hpp"
#include "grpc_gateway/protobuf_log.hpp"
#include "grpc_gateway/reflection_service.hpp"
#include "grpc_gateway/relay_service.hpp"
#include "metrics/metrics.hpp"
#include "metrics/relay_metrics.hpp"

namespace kvrelay {

namespace {

constexpr std::uint64_t k63Bits = 0x7FFF'FFFF'FFFF'FFFF;
constexpr std::size_t kMinMessageBytes = 4'259'904;  // the largest CBI1 frame + 64 KiB of envelope
// Engine metrics GETs at once: an engine that answers slowly holds a thread for its GET (5 s at
// most); past this many such GETs, scrapes wait for a thread.
constexpr std::size_t kMaxScrapeThreads = 32;
// Reflection is the only synchronous service on a listener: each open reflection stream holds a
// thread of its own, and one thread always waits for the next call, so the stream that would
// take the last one is refused (RESOURCE_EXHAUSTED) rather than the process growing a thread
// per stream. Every other service runs on gRPC's callback threads, which this does not bound
// (docs/protocol/limits.md#admission-limits).
constexpr int kMaxSyncServiceThreads = 16;

// docs/protocol/decisions.md#d4: stable across restarts of one pod, fresh incarnation every start.
std::uint64_t default_instance_id() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return xxh3(host, std::strlen(host), 0) & k63Bits;
}

std::uint64_t fresh_incarnation() {
  std::random_device entropy;
  const std::uint64_t value = (std::uint64_t{entropy()} << 32) ^ entropy();
  return value & k63Bits;
}

std::string host_of(const std::string& address) {
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

ingest_check::Limits ingest_limits(const RelayOptions& options) {
  return {options.max_batch_events, options.max_event_blocks, options.max_event_tokens,
          options.max_ingest_string_bytes};
}

// The ingest plane's limits and credentials: a token file that cannot be read, or holds no
// token, stops the start (docs/protocol/ingest.md#authentication).
std::expected<gateway::IngestServiceConfig, std::string> ingest_service_config(const RelayOptions& options) {
  gateway::IngestServiceConfig config;
  config.limits = ingest_limits(options);
  config.max_streams = options.max_ingest_streams;
  if (options.ingest_token_file) {
    auto auth = gateway::IngestAuth::open(*options.ingest_token_file);
    if (!auth) return std::unexpected("--ingest-token-file: " + auth.error());
    config.auth = std::move(*auth);
  }
  return config;
}

// One request of the topology's load, answered: nothing, or why it was refused.
template <typename Response, typename Actor, typename... Message>
std::optional<std::string> refusal_of(caf::scoped_actor& self, const Actor& actor, Message&&... message) {
  std::optional<std::string> refusal;
  self->request(actor, caf::infinite, std::forward<Message>(message)...)
      .receive([](const Response&) {},
               [&](const caf::error& error) {
                 refusal = "topology: " + ingest_refusal_message(error).value_or(caf::to_string(error));
               });
  return refusal;
}

// Feeds the topology file through the same requests as PutWorker / SetAvailability calls,
// before the listeners open: a relay that starts serves its topology from its first call. The
// first refusal ends the load (and the start) with its reason.
std::expected<void, std::string> load_topology(caf::actor_system& system, const ingest_v1::TopologyFile& file,
                                               const MembershipActor& membership,
                                               const ServingLoadWindowActor& serving_load) {
  caf::scoped_actor self{system};
  for (const auto& spec : file.endpoints()) {
    for (const auto& worker : spec.workers()) {
      if (auto refusal = refusal_of<ingest_v1::PutWorkerResponse>(
              self, membership, atoms::put_worker_atom_v, membership::put_worker_request(spec.endpoint(), worker))) {
        return std::unexpected(std::move(*refusal));
      }
    }
    if (spec.has_live_workers()) {
      ingest_v1::SetAvailabilityRequest request;
      *request.mutable_endpoint() = spec.endpoint();
      *request.mutable_live_worker_ids() = spec.live_workers().worker_ids();
      if (auto refusal = refusal_of<ingest_v1::SetAvailabilityResponse>(self, membership, atoms::availability_atom_v,
                                                                        std::move(request))) {
        return std::unexpected(std::move(*refusal));
      }
    }
    if (spec.scheduler_router_ids_size() > 0) {
      ingest_v1::SetSchedulersRequest request;
      *request.mutable_endpoint() = spec.endpoint();
      *request.mutable_router_ids() = spec.scheduler_router_ids();
      if (auto refusal = refusal_of<ingest_v1::SetSchedulersResponse>(self, serving_load, atoms::schedulers_atom_v,
                                                                      std::move(request))) {
        return std::unexpected(std::move(*refusal));
      }
    }
  }
  for (const auto& frontends : file.frontends()) {
    ingest_v1::SetFrontendsRequest request;
    request.set_namespace_(frontends.namespace_());
    *request.mutable_frontend_ids() = frontends.frontend_ids();
    if (auto refusal = refusal_of<ingest_v1::SetFrontendsResponse>(self, serving_load, atoms::frontends_atom_v,
                                                                   std::move(request))) {
      return std::unexpected(std::move(*refusal));
    }
  }
  return {};
}

// Logged when it changed, or could not be raised: how many engine sources the relay can hold.
void log_open_files_limit(const OpenFilesLimit& limit) {
  if (!limit.error.empty()) {
    spdlog::warn("cannot raise the open files limit to the hard limit: {}", limit.error);
  } else if (limit.now != limit.before) {
    spdlog::info("open files limit raised from {} to {}", limit.before, limit.now);
  }
}

// What reflection lists on a listener serving `service_name`: it, health and both reflections.
std::vector<std::string> listed_services(const std::string& service_name) {
  return {service_name, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
          "grpc.reflection.v1alpha.ServerReflection"};
}

// The standard grpc.health.v1.Health service reports `service_name` (and "") SERVING.
std::expected<std::unique_ptr<grpc::Server>, std::string> start_server(
    const std::string& address, grpc::Service* service, grpc::Service* reflection, const std::string& service_name,
    const RelayOptions& options, std::string* bound) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  // gRPC binds with SO_REUSEPORT by default: a second relay given a taken port would start and
  // take a share of the first one's new connections instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  // docs/protocol/decisions.md#d7 and docs/protocol/decisions.md#d24: server keepalive 20 s / 10 s;
  // client pings of any rate are tolerated (no ping strikes).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  grpc::ResourceQuota threads("kv-relay " + address);
  threads.SetMaxThreads(kMaxSyncServiceThreads);
  builder.SetResourceQuota(threads);
  builder.RegisterService(service);
  builder.RegisterService(reflection);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) return std::unexpected("cannot listen on " + address);
  *bound = host_of(address) + ":" + std::to_string(port);
  server->GetHealthCheckService()->SetServingStatus(service_name, true);
  server->GetHealthCheckService()->SetServingStatus("", true);
  return server;
}

}  // namespace

namespace {

// A core actor ended while the relay serves: say so once, loudly, stop advertising health,
// and ask the owner of the runtime to stop the process (a relay serving a frozen state is
// worse than a restart).
void core_actor_failed(RelayRuntime::Impl& impl, const std::string& failure);

}  // namespace

struct RelayRuntime::Impl {
  // First, so that they outlive every actor and gRPC service that records into them.
  std::unique_ptr<metrics::RelayMetrics> metrics = std::make_unique<metrics::RelayMetrics>();
  std::unique_ptr<MetricsServer> metrics_server;
  caf::actor_system_config actor_config;
  std::unique_ptr<caf::actor_system> system;
  // The engine feeds' I/O threads: stopped after every actor has finished and before the actor
  // system goes, since their callbacks send to actors.
  std::unique_ptr<engine_io::ZmqIo> zmq_io = std::make_unique<engine_io::ZmqIo>();
  std::unique_ptr<engine_io::HttpScraper> http = std::make_unique<engine_io::HttpScraper>(kMaxScrapeThreads);
  std::shared_ptr<CatalogRegistry> catalog_view = std::make_shared<CatalogRegistry>();
  std::shared_ptr<RoutingRegistry> routes = std::make_shared<RoutingRegistry>();  // published by membership
  CatalogActor catalog;
  TopologyProjectorActor topology;
  LoadWindowActor load;
  ServingLoadWindowActor serving_load;
  MembershipActor membership;
  SnapshotEncodersActor encoders;
  SupervisorActor supervisor;
  // Why the relay should stop: a signal (main) or a failed core actor (the supervisor).
  std::mutex stop_mutex;
  std::condition_variable stop_requested;
  std::optional<RelayRuntime::StopReason> stop_reason;
  std::shared_ptr<StreamLimit> hub_slots;
  std::unique_ptr<gateway::RelayService> relay_service;
  std::unique_ptr<gateway::IngestService> ingest_service;
  std::unique_ptr<gateway::ReflectionService> wan_reflection, ingest_reflection;
  // Assigned by start() while the supervisor may already report a failure: both under stop_mutex.
  std::unique_ptr<grpc::Server> wan_server, ingest_server;
  std::string wan_address, ingest_address, metrics_address;
  v1::RelayIdentity relay;
  std::uint64_t dc_id = 0;
  std::chrono::milliseconds drain{5000};
  bool stopped = false;
};

namespace {

// The listeners open so far report NOT_SERVING once a core actor failed. Holds stop_mutex.
void withdraw_health_if_failed(RelayRuntime::Impl& impl) {
  if (!impl.stop_reason || !impl.stop_reason->failed) return;
  for (grpc::Server* server : {impl.wan_server.get(), impl.ingest_server.get()}) {
    if (server != nullptr) server->GetHealthCheckService()->SetServingStatus(false);
  }
}

void core_actor_failed(RelayRuntime::Impl& impl, const std::string& failure) {
  spdlog::critical("core actor failed: {}; the relay stops", failure);
  {
    std::lock_guard lock(impl.stop_mutex);
    impl.stop_reason = RelayRuntime::StopReason{failure, true};
    withdraw_health_if_failed(impl);
  }
  impl.stop_requested.notify_all();
}

// start() hands a listener over; one that opened after a core actor failed serves no health.
void adopt_listener(RelayRuntime::Impl& impl, std::unique_ptr<grpc::Server>& slot,
                    std::unique_ptr<grpc::Server> server) {
  std::lock_guard lock(impl.stop_mutex);
  slot = std::move(server);
  withdraw_health_if_failed(impl);
}

// --memory-budget-bytes: auto follows the cgroup limit, 0 turns the budget off.
std::optional<std::uint64_t> memory_budget(const RelayOptions& options) {
  const auto budget =
      options.memory_budget_bytes ? options.memory_budget_bytes : capacity::default_budget(cgroup_memory_limit());
  if (budget == std::uint64_t{0}) return std::nullopt;
  if (budget) spdlog::info("memory budget: {} bytes for every pool's filter and lineage", *budget);
  return budget;
}

// Ends the core actors and waits until every actor is done (publishers and streams go with
// them), then stops the engine feeds' I/O and the actor system. The supervisor must have been
// told of the shutdown first, or it reports the exits as failures.
void stop_actors(RelayRuntime::Impl& impl) {
  for (const caf::actor& actor :
       {caf::actor_cast<caf::actor>(impl.catalog), caf::actor_cast<caf::actor>(impl.topology),
        caf::actor_cast<caf::actor>(impl.load), caf::actor_cast<caf::actor>(impl.serving_load),
        caf::actor_cast<caf::actor>(impl.membership), caf::actor_cast<caf::actor>(impl.encoders)}) {
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
  impl.system->await_all_actors_done();
  impl.zmq_io.reset();
  impl.http.reset();
  impl.system.reset();
}

// A start that fails once the actors run: a listener already open closes and the actors are
// stopped. Left to the actor system's destructor, they would be waited for, and the load
// windows' and samplers' timers keep them alive for ever: the start would never return. Once
// every actor is done the supervisor has judged every end, so a core actor that failed meanwhile
// (the cause of `error`, or not) makes it a core failure.
std::unexpected<StartError> abandon_start(RelayRuntime::Impl& impl, std::string error) {
  if (impl.ingest_server) impl.ingest_server->Shutdown(std::chrono::system_clock::now());
  caf::anon_send(impl.supervisor, atoms::shutdown_atom_v,
                 RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "relay start failed"));
  stop_actors(impl);
  std::lock_guard lock(impl.stop_mutex);
  if (impl.stop_reason && impl.stop_reason->failed) {
    return std::unexpected(StartError{"core actor failed: " + impl.stop_reason->why + " (" + error + ")", true});
  }
  return std::unexpected(StartError{std::move(error)});
}

}  // namespace

void configure_actor_scheduler(caf::actor_system_config& config, std::size_t threads) {
  config.set("scheduler.max-threads", threads);
  // Work sharing wakes an idle worker at once; work stealing's relaxed polling can leave a
  // message waiting for up to its 10 ms sleep, which showed in event-to-wire tail latency.
  config.set("scheduler.policy", caf::atom("sharing"));
}

std::expected<std::unique_ptr<RelayRuntime>, StartError> RelayRuntime::start(const RelayOptions& options) {
  auto impl = std::make_unique<Impl>();
  if (options.dc_id.empty()) {
    return std::unexpected(std::string(
        "--dc-id is required: this data center's id, hashed into every PoolId (give each data center its own, "
        "and keep it across restarts)"));
  }
  gateway::route_protobuf_log();  // before any request is parsed
  const auto dc_id = identity::stable_dc_id(options.dc_id);
  if (!dc_id) return std::unexpected("--dc-id: " + std::string(identity::to_string(dc_id.error())));
  for (const auto& [flag, blocks] :
       {std::pair{"--expected-unique-blocks", options.expected_unique_blocks},
        std::pair{"--expected-unique-blocks-fallback", std::optional{options.expected_unique_blocks_fallback}}}) {
    if (!blocks) continue;
    if (const auto sized = ckf::bucket_count_for(*blocks); !sized) {
      return std::unexpected(std::string(flag) + ": " + std::string(ckf::to_string(sized.error())));
    }
  }
  if (options.topology) {
    if (auto over = ingest_check::oversize(*options.topology, ingest_limits(options))) {
      return std::unexpected("topology: " + over->message);
    }
    if (auto problem = ingest_check::topology_file(*options.topology)) return std::unexpected("topology: " + *problem);
  }
  auto ingest_config = ingest_service_config(options);
  if (!ingest_config) return std::unexpected(ingest_config.error());
  impl->dc_id = *dc_id;
  impl->relay.set_drt_instance_id(options.instance_id.value_or(default_instance_id()));
  impl->relay.set_relay_incarnation(fresh_incarnation());

  if (options.max_message_bytes < kMinMessageBytes) {
    return std::unexpected(std::string("--max-message-bytes must hold one full CBI1 frame plus envelope (>= 4259904)"));
  }
  impl->metrics->set_identity(impl->dc_id, impl->relay.relay_incarnation(), impl->relay.drt_instance_id());
  if (options.metrics_listen) {
    auto server = MetricsServer::start(*options.metrics_listen, impl->metrics->collectables());
    if (!server) return std::unexpected("--metrics-listen: " + server.error());
    impl->metrics_server = std::move(*server);
    impl->metrics_address = impl->metrics_server->address();
  }
  metrics::RelayMetrics* recorder = impl->metrics.get();
  impl->drain = std::chrono::milliseconds(options.drain_timeout_ms);
  configure_actor_scheduler(impl->actor_config, options.actor_threads);
  impl->system = std::make_unique<caf::actor_system>(impl->actor_config);
  auto& system = *impl->system;
  impl->catalog = system.spawn(catalog, impl->catalog_view, impl->relay,
                               metrics::mailbox_gauge(recorder, metrics::ActorKind::kCatalog));
  impl->topology = system.spawn(topology_projector, impl->relay, recorder);
  impl->load = system.spawn(load_window, impl->relay, std::chrono::milliseconds(options.load_window_ms), recorder);
  impl->serving_load = system.spawn(
      serving_load_window,
      ServingLoadWindowConfig{impl->relay, std::chrono::milliseconds(options.load_window_ms),
                              serving_load::Config{std::chrono::milliseconds(options.serving_load_freshness_ms),
                                                   std::chrono::milliseconds(options.serving_load_retention_ms),
                                                   options.max_serving_load_sources, options.max_serving_load_models,
                                                   options.max_message_bytes / 2},
                              recorder});
  impl->encoders = system.spawn(snapshot_encoders, options.snapshot_encoders,
                                metrics::mailbox_gauge(recorder, metrics::ActorKind::kSnapshotEncoders));
  impl->hub_slots = std::make_shared<StreamLimit>("initialized publication hub", options.max_initialized_pool_hubs);
  MembershipConfig membership_config;
  membership_config.relay = impl->relay;
  membership_config.dc_id = impl->dc_id;
  membership_config.sizing = {options.expected_unique_blocks, options.expected_unique_blocks_fallback};
  membership_config.seed = ckf::kDefaultSeed;
  membership_config.relayout_load = options.relayout_load;
  membership_config.relayout_min_interval = std::chrono::milliseconds(options.relayout_min_interval_ms);
  membership_config.memory_budget_bytes = memory_budget(options);
  membership_config.cadence = {options.publication_threshold, std::chrono::milliseconds(options.publication_delay_ms),
                               options.pool_stream_frames_per_s};
  membership_config.max_subscribers_per_pool = options.max_subscribers_per_pool;
  membership_config.hub_slots = impl->hub_slots;
  membership_config.metrics = recorder;
  membership_config.feeds.io = impl->zmq_io.get();
  membership_config.feeds.http = impl->http.get();
  membership_config.feeds.metrics = recorder;
  membership_config.feeds.max_message_bytes = options.max_engine_message_bytes;
  membership_config.limits = {options.max_serving_endpoints, options.max_workers_per_endpoint, options.max_kv_sources,
                              options.max_message_bytes / 2};
  membership_config.routes = impl->routes;
  log_open_files_limit(raise_open_files_limit());  // before membership opens any engine source
  impl->membership = system.spawn(membership_actor, membership_config,
                                  MembershipPeers{impl->catalog, impl->topology, impl->load, impl->serving_load});
  impl->supervisor = system.spawn(
      supervisor,
      std::vector<SupervisedActor>{{"membership", caf::actor_cast<caf::actor>(impl->membership)},
                                   {"catalog", caf::actor_cast<caf::actor>(impl->catalog)},
                                   {"topology projector", caf::actor_cast<caf::actor>(impl->topology)},
                                   {"load window", caf::actor_cast<caf::actor>(impl->load)},
                                   {"serving-load window", caf::actor_cast<caf::actor>(impl->serving_load)},
                                   {"snapshot encoders", caf::actor_cast<caf::actor>(impl->encoders)}},
      [raw = impl.get()](const std::string& failure) { core_actor_failed(*raw, failure); });
  if (options.crash_membership_at_start_for_test) caf::anon_send(impl->membership, atoms::crash_atom_v);
  if (options.topology) {
    if (auto loaded = load_topology(system, *options.topology, impl->membership, impl->serving_load); !loaded) {
      return abandon_start(*impl, loaded.error());
    }
  }

  gateway::RelayServiceConfig relay_config;
  relay_config.relay = impl->relay;
  relay_config.pool_outbox = OutboxLimits{options.stream_queue_frames, options.stream_queue_bytes};
  relay_config.load_outbox_windows = options.load_queue_windows;
  relay_config.max_catalog_subscribers = options.max_catalog_subscribers;
  relay_config.max_readiness_subscribers = options.max_readiness_subscribers;
  relay_config.max_load_subscribers = options.max_load_subscribers;
  relay_config.max_serving_load_subscribers = options.max_serving_load_subscribers;
  relay_config.max_pool_streams_total = options.max_pool_streams_total;
  relay_config.catalog_heartbeat = std::chrono::milliseconds(options.catalog_heartbeat_ms);
  relay_config.readiness_heartbeat = std::chrono::milliseconds(options.readiness_heartbeat_ms);
  relay_config.pool_heartbeat = std::chrono::milliseconds(options.pool_heartbeat_ms);
  relay_config.snapshot_progress_timeout = std::chrono::milliseconds(options.snapshot_progress_timeout_ms);
  relay_config.metrics = recorder;
  impl->relay_service = std::make_unique<gateway::RelayService>(
      system, relay_config,
      gateway::RelayServicePeers{impl->catalog_view, impl->encoders, impl->catalog, impl->topology, impl->load,
                                 impl->serving_load});
  impl->ingest_service = std::make_unique<gateway::IngestService>(
      gateway::IngestPeers{&system, impl->membership, BatchRouter(impl->routes, recorder), impl->load,
                           impl->serving_load},
      std::move(*ingest_config), recorder);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  impl->ingest_reflection =
      std::make_unique<gateway::ReflectionService>(listed_services("kvrelay.ingest.v1.RelayIngest"));
  impl->wan_reflection =
      std::make_unique<gateway::ReflectionService>(listed_services("dynamo.kvrelay.v1.KvEventRelay"));
  auto ingest = start_server(options.ingest_listen, impl->ingest_service.get(), impl->ingest_reflection.get(),
                             "kvrelay.ingest.v1.RelayIngest", options, &impl->ingest_address);
  if (!ingest) return abandon_start(*impl, ingest.error());
  adopt_listener(*impl, impl->ingest_server, std::move(*ingest));
  auto wan = start_server(options.listen, impl->relay_service.get(), impl->wan_reflection.get(),
                          "dynamo.kvrelay.v1.KvEventRelay", options, &impl->wan_address);
  if (!wan) return abandon_start(*impl, wan.error());
  adopt_listener(*impl, impl->wan_server, std::move(*wan));
  spdlog::info("relay started: wan={} ingest={} metrics={} dc_id={:#018x} incarnation={:#x}", impl->wan_address,
               impl->ingest_address, impl->metrics_address.empty() ? "off" : impl->metrics_address, impl->dc_id,
               impl->relay.relay_incarnation());
  return std::unique_ptr<RelayRuntime>(new RelayRuntime(std::move(impl)));
}

RelayRuntime::RelayRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RelayRuntime::~RelayRuntime() { shutdown(); }

const std::string& RelayRuntime::wan_address() const { return impl_->wan_address; }
const std::string& RelayRuntime::ingest_address() const { return impl_->ingest_address; }
const std::string& RelayRuntime::metrics_address() const { return impl_->metrics_address; }
std::uint64_t RelayRuntime::relay_incarnation() const { return impl_->relay.relay_incarnation(); }
std::uint64_t RelayRuntime::dc_id() const { return impl_->dc_id; }

namespace {

// Asks membership to pass a test fault on to every pool's publisher and waits for it to have
// done so: batches go straight to the publishers (docs/architecture.md#batch-routing), so a
// batch sent once this returns reaches a publisher after its fault.
template <class... Ts>
void fault_every_pool(caf::actor_system& system, const MembershipActor& membership, Ts... fault) {
  caf::scoped_actor self{system};
  self->request(membership, caf::infinite, fault...).receive([] {}, [](const caf::error&) {});
}

}  // namespace

void RelayRuntime::inject_publication_fault_for_test() {
  fault_every_pool(*impl_->system, impl_->membership, atoms::corrupt_atom_v);
}

std::uint64_t RelayRuntime::snapshot_image_bytes() const {
  return static_cast<std::uint64_t>(impl_->metrics->snapshot_image_bytes());
}

void RelayRuntime::inject_index_fault_for_test(std::uint64_t canonical_hash) {
  fault_every_pool(*impl_->system, impl_->membership, atoms::evict_atom_v, canonical_hash);
}

void RelayRuntime::crash_membership_for_test() { caf::anon_send(impl_->membership, atoms::crash_atom_v); }

void RelayRuntime::request_stop(std::string why) {
  {
    std::lock_guard lock(impl_->stop_mutex);
    if (!impl_->stop_reason) impl_->stop_reason = StopReason{std::move(why), false};
  }
  impl_->stop_requested.notify_all();
}

std::optional<RelayRuntime::StopReason> RelayRuntime::wait_for_stop(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->stop_mutex);
  impl_->stop_requested.wait_for(lock, timeout, [&] { return impl_->stop_reason.has_value(); });
  return impl_->stop_reason;
}

namespace {

const StreamLimit& limit_of(const RelayRuntime::Impl& impl, std::string_view kind) {
  if (kind == "ingest") return impl.ingest_service->streams();
  return kind == "hubs" ? *impl.hub_slots : impl.relay_service->limit_of(kind);
}

// Until then the listeners stay open and the services refuse new calls themselves, with
// UNAVAILABLE: a gRPC server shutting down would cancel them instead, which a client cannot
// tell from a call it cancelled itself.
void await_streams_ended(const RelayRuntime::Impl& impl, std::chrono::system_clock::time_point deadline) {
  const std::size_t wan = impl.relay_service->await_streams_ended(deadline);
  const std::size_t feeders = impl.ingest_service->streams().await_drained(deadline);
  if (wan + feeders > 0) {
    spdlog::warn("drain: --drain-timeout-ms passed with {} WAN and {} ingest streams still open; they are cancelled",
                 wan, feeders);
  }
}

// What a listener still serves once the relay's streams have ended: unary calls, which finish
// within this, and health watches, which never end by themselves (they have been told
// NOT_SERVING) and would otherwise hold the drain to its deadline.
constexpr auto kGraceAfterStreams = std::chrono::seconds(1);

}  // namespace

std::size_t RelayRuntime::open_streams(std::string_view kind) const { return limit_of(*impl_, kind).in_use(); }

bool RelayRuntime::await_open_streams_at_most(std::string_view kind, std::size_t count,
                                              std::chrono::milliseconds timeout) const {
  return limit_of(*impl_, kind).await_at_most(count, timeout);
}

std::size_t RelayRuntime::serving_streams(std::string_view kind) const { return limit_of(*impl_, kind).serving(); }

bool RelayRuntime::await_serving_streams_at_most(std::string_view kind, std::size_t count,
                                                 std::chrono::milliseconds timeout) const {
  return limit_of(*impl_, kind).await_serving_at_most(count, timeout);
}

bool RelayRuntime::await_open_streams_at_least(std::string_view kind, std::size_t count,
                                               std::chrono::milliseconds timeout) const {
  return limit_of(*impl_, kind).await_at_least(count, timeout);
}

void RelayRuntime::shutdown(std::optional<std::chrono::milliseconds> drain) {
  if (impl_->stopped) return;
  impl_->stopped = true;
  for (grpc::Server* server : {impl_->wan_server.get(), impl_->ingest_server.get()}) {
    server->GetHealthCheckService()->Shutdown();  // every service NOT_SERVING from now on
  }
  impl_->relay_service->begin_drain();
  impl_->ingest_service->begin_drain();
  const auto closing = RpcStatus::relay_error(v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, "relay shutting down");
  caf::anon_send(impl_->supervisor, atoms::shutdown_atom_v, closing);  // from now on, exits are expected
  caf::anon_send(impl_->catalog, atoms::shutdown_atom_v, closing);
  caf::anon_send(impl_->topology, atoms::shutdown_atom_v, closing);
  caf::anon_send(impl_->load, atoms::shutdown_atom_v, closing);
  caf::anon_send(impl_->serving_load, atoms::shutdown_atom_v, closing);
  caf::anon_send(impl_->membership, atoms::shutdown_atom_v, closing);
  // Calls still open at the deadline (clients that stopped reading) are cancelled.
  const auto deadline = std::chrono::system_clock::now() + drain.value_or(impl_->drain);
  await_streams_ended(*impl_, deadline);
  const auto cancel_at = std::min(deadline, std::chrono::system_clock::now() + kGraceAfterStreams);
  impl_->wan_server->Shutdown(cancel_at);
  impl_->ingest_server->Shutdown(cancel_at);
  impl_->wan_server->Wait();
  impl_->ingest_server->Wait();
  stop_actors(*impl_);
  spdlog::info("relay stopped");
}

}  // namespace kvrelay
