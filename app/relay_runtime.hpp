#pragma once
// A running relay: the actor system, its actors, and the two gRPC listeners (WAN and
// ingest). Used by the kv-relay binary and, in-process, by the integration tests.
#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay {

struct RelayOptions {
  std::string listen = "0.0.0.0:50051";
  std::string ingest_listen = "127.0.0.1:50052";
  std::string dc_id = "dc-local";
  std::optional<std::uint64_t> instance_id;  // default: derived from the host name
  std::uint64_t expected_unique_blocks = 1'048'576;
  std::uint32_t publication_threshold = 16;
  std::uint32_t publication_delay_ms = 1;
  std::uint32_t load_window_ms = 1000;
  std::size_t stream_queue_frames = 16;
  std::size_t stream_queue_bytes = 16u << 20;
  std::size_t load_queue_windows = 16;
  std::size_t max_message_bytes = 8u << 20;
  std::size_t actor_threads = 2;
  std::optional<::kvrelay::ingest::v1::TopologyFile> topology;
};

class RelayRuntime {
 public:
  // Starts everything and binds both listeners (port 0 binds an ephemeral port).
  static std::expected<std::unique_ptr<RelayRuntime>, std::string> start(const RelayOptions& options);

  ~RelayRuntime();
  RelayRuntime(const RelayRuntime&) = delete;
  RelayRuntime& operator=(const RelayRuntime&) = delete;

  // host:port actually bound.
  const std::string& wan_address() const;
  const std::string& ingest_address() const;
  std::uint64_t relay_incarnation() const;
  std::uint64_t dc_id() const;

  // Ends every open stream with UNAVAILABLE / PUBLICATION_UNAVAILABLE, stops accepting,
  // and waits at most `drain` for calls to finish. Idempotent.
  void shutdown(std::chrono::milliseconds drain = std::chrono::milliseconds(5000));

 private:
  struct Impl;
  explicit RelayRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrelay
