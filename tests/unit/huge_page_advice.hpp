#pragma once
// Whether memory was advised for transparent huge pages (core/huge_pages.hpp): the kernel
// records the advice as the `hg` flag of the memory's mapping in /proc/self/smaps.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace kvrelay::test {

// The VmFlags of the mapping that holds `address`, if any.
inline std::optional<std::string> vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return std::nullopt;
}

inline bool advised(const void* address) {
  const auto flags = vm_flags_at(address);
  REQUIRE(flags.has_value());
  return flags->find(" hg") != std::string::npos;
}

// False on a kernel without transparent huge pages: it ignores the advice, kNoHugePages says so.
inline bool kernel_has_huge_pages() { return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage"); }
inline constexpr const char* kNoHugePages = "this kernel has no transparent huge pages: it ignores the advice";

}  // namespace kvrelay::test
