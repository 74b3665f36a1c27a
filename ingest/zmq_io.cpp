#include "ingest/zmq_io.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <variant>

#include "core/rate_limited_log.hpp"

namespace kvrelay::engine_io {

std::vector<engine::Frame> Multipart::views() const {
  std::vector<engine::Frame> views;
  views.reserve(frames.size());
  for (const zmq::message_t& frame : frames) views.emplace_back(frame.data<std::byte>(), frame.size());
  return views;
}

namespace {

constexpr int kConnectionEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED;

// libzmq dials a lost connection again on its own, reporting CONNECT_RETRIED at once, unless
// the peer broke the protocol (a frame above ZMQ_MAXMSGSIZE, say): that session just ends. A
// disconnection with no retry reported within this grace is dialed again by the I/O thread.
constexpr std::chrono::milliseconds kRedialGrace{1000};

}  // namespace

std::size_t Multipart::bytes() const {
  std::size_t total = 0;
  for (const zmq::message_t& frame : frames) total += frame.size();
  return total;
}

struct ZmqIo::Source {
  Id id = 0;
  SourceCallbacks callbacks;
  std::shared_ptr<std::atomic<long>> credit;
  SubscriptionConfig config;
  // A lost connection libzmq will not dial again unless told (below): when to dial it, and the
  // wait before the next such redial (doubling up to reconnect_max until a message arrives).
  std::optional<std::chrono::steady_clock::time_point> redial_at;
  std::chrono::milliseconds redial_delay = kRedialGrace;
  std::uint64_t replays_requested = 0;
  zmq::socket_t sub;
  zmq::socket_t monitor;  // PAIR end of the SUB socket's monitor
  std::optional<zmq::socket_t> replay;
};

struct ZmqIo::Command {
  struct Subscribe {
    Id id;
    SubscriptionConfig config;
    SourceCallbacks callbacks;
  };
  struct Unsubscribe {
    Id id;
  };
  struct Replay {
    Id id;
    std::string endpoint;
    std::uint64_t from;
  };
  struct CancelReplay {
    Id id;
  };
  std::variant<Subscribe, Unsubscribe, Replay, CancelReplay> what;

  Id id() const {
    return std::visit([](const auto& c) { return c.id; }, what);
  }
};

namespace {

// Receives every frame of one message that is waiting; nullopt when none is.
std::optional<Multipart> receive(zmq::socket_t& socket) {
  Multipart message;
  do {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) {
      if (message.frames.empty()) return std::nullopt;
      throw std::logic_error("zmq: a message ended without its last frame");  // cannot happen: atomic delivery
    }
    message.frames.push_back(std::move(frame));
  } while (message.frames.back().more());
  return message;
}

// What ZeroMQ refuses and what engines break is logged once a second at most, whatever the
// number of sources, each kind apart: one engine that keeps dropping its connection must not
// hide the sockets ZeroMQ refuses.
RateLimitedLog& refused_socket_log() {  // past the process's limits (descriptors, sockets)
  static RateLimitedLog log;
  return log;
}
RateLimitedLog& connect_log() {  // an address ZeroMQ cannot dial
  static RateLimitedLog log;
  return log;
}
RateLimitedLog& redial_log() {  // a connection that ended without libzmq retrying it
  static RateLimitedLog log;
  return log;
}

// Polls; false when a signal interrupted the wait (a handled signal, such as a profiler's, may
// land on this thread), which is not an error: the caller polls again.
bool poll_interruptible(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout) {
  try {
    zmq::poll(items, timeout);
    return true;
  } catch (const zmq::error_t& error) {
    if (error.num() == EINTR) return false;
    throw;
  }
}

}  // namespace

ZmqIo::ZmqIo() : context_(1), wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (wake_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  // Each source holds three sockets (SUB, its monitor's pair, the monitor libzmq makes inside
  // the SUB) and a fourth while it replays: ZeroMQ's default of 1 023 would stop the sources at
  // about 340, far below --max-kv-sources. Sockets are made only as sources come.
  context_.set(zmq::ctxopt::max_sockets, context_.get(zmq::ctxopt::socket_limit));
  thread_ = std::thread([this] { run(); });
}

ZmqIo::~ZmqIo() {
  stopping_ = true;
  wake();
  thread_.join();
  close(wake_fd_);
}

ZmqIo::Id ZmqIo::subscribe(SubscriptionConfig config, SourceCallbacks callbacks) {
  const Id id = next_id_++;
  post({Command::Subscribe{id, std::move(config), std::move(callbacks)}});
  return id;
}

void ZmqIo::unsubscribe(Id id) { post({Command::Unsubscribe{id}}); }

void ZmqIo::request_replay(Id id, std::string endpoint, std::uint64_t from) {
  post({Command::Replay{id, std::move(endpoint), from}});
}

void ZmqIo::cancel_replay(Id id) { post({Command::CancelReplay{id}}); }

void ZmqIo::return_credit(Id id, std::size_t count) {
  std::shared_ptr<std::atomic<long>> credit;
  {
    std::lock_guard lock(mutex_);
    const auto it = credits_.find(id);
    if (it == credits_.end()) return;
    credit = it->second;
  }
  // Only a socket that ran out of credit is left out of the poll: only then is a wake-up owed.
  if (credit->fetch_add(static_cast<long>(count)) <= 0) wake();
}

void ZmqIo::post(Command command) {
  {
    std::lock_guard lock(mutex_);
    if (auto* subscribe = std::get_if<Command::Subscribe>(&command.what)) {
      credits_[subscribe->id] = std::make_shared<std::atomic<long>>(static_cast<long>(subscribe->config.credit));
    } else if (auto* unsubscribe = std::get_if<Command::Unsubscribe>(&command.what)) {
      credits_.erase(unsubscribe->id);
    }
    commands_.push_back(std::move(command));
  }
  wake();
}

void ZmqIo::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = write(wake_fd_, &one, sizeof one);  // full counter: already awake
}

void ZmqIo::open(Id id, SubscriptionConfig config, SourceCallbacks callbacks) {
  auto source = std::make_unique<Source>();
  source->id = id;
  source->callbacks = std::move(callbacks);
  {
    std::lock_guard lock(mutex_);
    const auto credit = credits_.find(id);
    if (credit == credits_.end()) return;  // unsubscribed before it was opened
    source->credit = credit->second;
  }
  source->sub = zmq::socket_t(context_, zmq::socket_type::sub);
  source->sub.set(zmq::sockopt::linger, 0);
  source->sub.set(zmq::sockopt::rcvhwm, config.receive_hwm);
  source->sub.set(zmq::sockopt::maxmsgsize, config.max_message_bytes);
  source->sub.set(zmq::sockopt::reconnect_ivl, 100);
  source->sub.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(config.reconnect_max.count()));
  // ZMTP heartbeats notice an engine that vanished without closing its connection.
  source->sub.set(zmq::sockopt::heartbeat_ivl, 2000);
  source->sub.set(zmq::sockopt::heartbeat_timeout, 6000);
  source->sub.set(zmq::sockopt::subscribe, config.topic);
  const std::string monitor_endpoint = "inproc://kvrelay-source-monitor-" + std::to_string(id);
  if (zmq_socket_monitor(source->sub.handle(), monitor_endpoint.c_str(), kConnectionEvents) != 0) {
    throw zmq::error_t();
  }
  source->monitor = zmq::socket_t(context_, zmq::socket_type::pair);
  source->monitor.connect(monitor_endpoint);
  try {
    source->sub.connect(config.endpoint);
  } catch (const zmq::error_t& error) {
    // Validation refuses malformed endpoints; this is an address ZeroMQ cannot use here.
    connect_log().error(
        [&] { return fmt::format("engine source {}: cannot connect to {}: {}", id, config.endpoint, error.what()); });
  }
  source->config = std::move(config);
  sources_.emplace(id, std::move(source));
}

void ZmqIo::carry_out(std::vector<Command>& commands) {
  for (Command& command : commands) {
    try {
      carry_out(command);
    } catch (const zmq::error_t& error) {
      // Validation refuses the addresses libzmq cannot parse; what is left is ZeroMQ refusing
      // a socket here (out of file descriptors, say). That source goes without, the thread goes
      // on: a replay that could not start runs out its deadline and resets the source.
      refused_socket_log().error([&] {
        return fmt::format("engine source {}: ZeroMQ refused a socket operation: {}", command.id(), error.what());
      });
    }
  }
}

void ZmqIo::carry_out(Command& command) {
  std::visit(
      [this](auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, Command::Subscribe>) {
          open(c.id, std::move(c.config), std::move(c.callbacks));
        } else if constexpr (std::is_same_v<T, Command::Unsubscribe>) {
          if (const auto it = sources_.find(c.id); it != sources_.end()) {
            zmq_socket_monitor(it->second->sub.handle(), nullptr, 0);
            sources_.erase(it);
          }
        } else {
          const auto it = sources_.find(c.id);
          if (it == sources_.end()) return;
          Source& source = *it->second;
          source.replay.reset();
          if constexpr (std::is_same_v<T, Command::Replay>) {
            ++source.replays_requested;  // counted even if ZeroMQ refuses it: the receiver counted it
            // Kept only once it is asked: a socket ZeroMQ refused is never polled.
            zmq::socket_t replay(context_, zmq::socket_type::dealer);
            replay.set(zmq::sockopt::linger, 0);
            // Replies wait unread without credit: the queue must hold a whole replay buffer
            // (vLLM's is 10 000 batches), or the engine's ROUTER drops past its own 1 000.
            replay.set(zmq::sockopt::rcvhwm, source.config.receive_hwm);
            replay.set(zmq::sockopt::maxmsgsize, source.config.max_message_bytes);
            replay.connect(c.endpoint);
            const std::string request = engine::replay_request(c.from);
            replay.send(zmq::message_t(), zmq::send_flags::sndmore);
            replay.send(zmq::buffer(request), zmq::send_flags::none);
            source.replay = std::move(replay);
          }
        }
      },
      command.what);
}

// The SUB socket keeps what a lost connection delivered and nobody read (a source without
// credit reads nothing). The cold reset that follows makes those batches moot, and read after
// it they would start the source again from a process that may be gone for good
// (docs/protocol/engine-sources.md#activity).
void ZmqIo::discard_unread(Source& source) {
  std::size_t discarded = 0;
  while (receive(source.sub)) ++discarded;
  if (discarded > 0) {
    spdlog::info("engine source {}: {} messages of the lost connection to {} discarded unread", source.id, discarded,
                 source.config.endpoint);
  }
}

void ZmqIo::read_monitor(Source& source) {
  while (auto event = receive(source.monitor)) {
    if (event->frames.empty() || event->frames[0].size() < sizeof(std::uint16_t)) continue;
    std::uint16_t id = 0;
    std::memcpy(&id, event->frames[0].data(), sizeof id);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || id == ZMQ_EVENT_CONNECT_RETRIED) source.redial_at.reset();
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) source.callbacks.connection(true);
    if (id == ZMQ_EVENT_DISCONNECTED) {
      source.redial_at = std::chrono::steady_clock::now() + source.redial_delay;
      discard_unread(source);
      source.callbacks.connection(false);
    }
  }
}

void ZmqIo::redial_due(std::chrono::steady_clock::time_point now) {
  for (auto& [id, source] : sources_) {
    if (!source->redial_at || *source->redial_at > now) continue;
    read_monitor(*source);  // a retry reported since the poll returned still counts
    if (!source->redial_at) continue;
    source->redial_at.reset();
    source->redial_delay = std::min(2 * source->redial_delay, source->config.reconnect_max);
    const std::string& endpoint = source->config.endpoint;
    redial_log().warn([&] {
      return fmt::format(
          "engine source {}: the connection to {} ended without a retry (a protocol error, or a frame above "
          "--max-engine-message-bytes); dialing again",
          id, endpoint);
    });
    try {
      source->sub.disconnect(endpoint);  // forgets the ended session
    } catch (const zmq::error_t&) {
      // ENOENT: libzmq had already forgotten it
    }
    try {
      source->sub.connect(endpoint);
    } catch (const zmq::error_t& error) {
      connect_log().error(
          [&] { return fmt::format("engine source {}: cannot connect to {}: {}", id, endpoint, error.what()); });
    }
  }
}

// Until the earliest redial, or for ever.
std::chrono::milliseconds ZmqIo::poll_timeout(std::chrono::steady_clock::time_point now) const {
  std::optional<std::chrono::steady_clock::time_point> earliest;
  for (const auto& [id, source] : sources_) {
    if (source->redial_at && (!earliest || *source->redial_at < *earliest)) earliest = source->redial_at;
  }
  if (!earliest) return std::chrono::milliseconds(-1);
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*earliest - now);
  return std::max(left, std::chrono::milliseconds(0));
}

void ZmqIo::read_live(Source& source) {
  while (source.credit->load() > 0) {
    auto message = receive(source.sub);
    if (!message) return;
    source.credit->fetch_sub(1);
    source.redial_delay = kRedialGrace;  // the connection works
    source.callbacks.live(std::make_shared<const Multipart>(std::move(*message)));
  }
}

void ZmqIo::read_replay(Source& source) {
  while (source.replay && source.credit->load() > 0) {
    auto message = receive(*source.replay);
    if (!message) return;
    source.credit->fetch_sub(1);
    // A DEALER receives the ROUTER's reply behind one empty delimiter frame.
    if (!message->frames.empty() && message->frames.front().size() == 0) message->frames.erase(message->frames.begin());
    source.callbacks.replay(std::make_shared<const Multipart>(std::move(*message)), source.replays_requested);
  }
}

void ZmqIo::run() {
  enum class Socket { kMonitor, kLive, kReplay };
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<Source*, Socket>> owners;  // of items[1..]
  std::vector<Command> commands;
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    redial_due(now);
    items.assign(1, zmq::pollitem_t{nullptr, wake_fd_, ZMQ_POLLIN, 0});
    owners.clear();
    const auto poll_on = [&](Source* source, zmq::socket_t& socket, Socket kind) {
      items.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
      owners.emplace_back(source, kind);
    };
    for (auto& [id, source] : sources_) {
      poll_on(source.get(), source->monitor, Socket::kMonitor);
      if (source->credit->load() <= 0) continue;
      // Replies first: the live messages that wait meanwhile are held by the receiver, and a
      // replay that cannot get ahead of them overflows the hold or runs out its deadline.
      if (source->replay) poll_on(source.get(), *source->replay, Socket::kReplay);
      poll_on(source.get(), source->sub, Socket::kLive);
    }
    if (!poll_interruptible(items, poll_timeout(now))) continue;
    if (items[0].revents & ZMQ_POLLIN) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto read_bytes = read(wake_fd_, &count, sizeof count);
      {
        std::lock_guard lock(mutex_);
        commands.swap(commands_);
      }
      carry_out(commands);
      commands.clear();
      continue;  // the set of sockets may have changed: poll again
    }
    for (std::size_t i = 0; i < owners.size(); ++i) {
      if ((items[i + 1].revents & ZMQ_POLLIN) == 0) continue;
      auto [source, kind] = owners[i];
      if (kind == Socket::kMonitor) read_monitor(*source);
      if (kind == Socket::kReplay) read_replay(*source);
      if (kind == Socket::kLive) read_live(*source);
    }
  }
  sources_.clear();
}

}  // namespace kvrelay::engine_io
