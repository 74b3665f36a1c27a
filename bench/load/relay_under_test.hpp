#pragma once
// The relay kvrelay-bench drives: a kv-relay process it starts on loopback, or one already
// running that it attaches to. Either way the bench reads the relay's CPU time and resident
// memory by its pid (bench/load/process_usage.hpp), so relay and clients are measured apart.
#include <sys/types.h>

#include <chrono>
#include <expected>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/load/process_usage.hpp"

namespace kvrelay::bench {

class RelayUnderTest {
 public:
  // Starts `binary` with loopback listeners and `extra_args`, and waits until it is ready. Its
  // output goes to `log_path`.
  static std::expected<RelayUnderTest, std::string> start(const std::string& binary,
                                                          const std::vector<std::string>& extra_args,
                                                          const std::string& log_path);
  // A relay someone else runs; `pid` 0 when it is not on this machine (no CPU or memory figures).
  static RelayUnderTest attach(std::string wan, std::string ingest, pid_t pid);

  RelayUnderTest(RelayUnderTest&& other) noexcept;
  RelayUnderTest& operator=(RelayUnderTest&&) = delete;
  ~RelayUnderTest();  // stops a relay it started (SIGTERM, then waits)

  const std::string& wan_address() const { return wan_; }
  const std::string& ingest_address() const { return ingest_; }
  // nullopt without a local pid, or once the process is gone.
  std::optional<ProcessUsage> usage() const;

 private:
  RelayUnderTest(std::string wan, std::string ingest, pid_t pid, bool owned)
      : wan_(std::move(wan)), ingest_(std::move(ingest)), pid_(pid), owned_(owned) {}

  std::string wan_;
  std::string ingest_;
  pid_t pid_ = 0;
  bool owned_ = false;
};

}  // namespace kvrelay::bench
