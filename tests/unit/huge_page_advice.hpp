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

// Each mapping of a process's smaps (/proc/self/smaps by default) with its VmFlags line:
// visit(begin, end, flags).
template <class Visit>
void for_each_mapping(Visit visit, const std::string& smaps_path = "/proc/self/smaps") {
  std::ifstream smaps(smaps_path);
  std::string line;
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  while (std::getline(smaps, line)) {
    char dash = 0;
    std::istringstream header(line);
    std::uintptr_t header_begin = 0;
    std::uintptr_t header_end = 0;
    if (header >> std::hex >> header_begin >> dash >> header_end && dash == '-') {
      begin = header_begin;
      end = header_end;
    } else if (line.rfind("VmFlags:", 0) == 0) {
      visit(begin, end, line);
    }
  }
}

// The VmFlags of the mapping that holds `address`, if any.
inline std::optional<std::string> vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::optional<std::string> found;
  for_each_mapping([&](std::uintptr_t begin, std::uintptr_t end, const std::string& flags) {
    if (begin <= at && at < end) found = flags;
  });
  return found;
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
