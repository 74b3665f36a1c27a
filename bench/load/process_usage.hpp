#pragma once
// A process's CPU time and resident memory, read by pid: the relay under test's, or a
// benchmark's own (getpid()), so that relay and clients are measured apart.
#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace kvrelay::bench {

struct ProcessUsage {
  double cpu_seconds = 0;  // user + system, all threads
  std::uint64_t resident_bytes = 0;
};

// nullopt once the process is gone.
std::optional<ProcessUsage> process_usage(pid_t pid);

}  // namespace kvrelay::bench
