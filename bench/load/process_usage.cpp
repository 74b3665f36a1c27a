#include "bench/load/process_usage.hpp"

#include <time.h>

#include <fstream>
#include <string>

namespace kvrelay::bench {

std::optional<ProcessUsage> process_usage(pid_t pid) {
  // The process's CPU clock (every thread, to the nanosecond) rather than /proc's utime and
  // stime in clock ticks: a timed run of a few tenths of a second needs more than 10 ms.
  clockid_t clock{};
  timespec cpu{};
  if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &cpu) != 0) return std::nullopt;
  ProcessUsage usage;
  usage.cpu_seconds = static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) / 1e9;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) usage.resident_bytes = std::stoull(line.substr(6)) * 1024;
  }
  return usage;
}

}  // namespace kvrelay::bench
