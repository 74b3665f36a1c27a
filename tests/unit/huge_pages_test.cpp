// Large random-access arrays start on a huge page's boundary and are advised for transparent huge
// pages (core/huge_pages.hpp): the kernel records the advice as the `hg` flag of the memory's
// mapping in /proc/self/smaps.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/cbi1.hpp"
#include "core/ckf.hpp"
#include "core/huge_pages.hpp"
#include "core/probe_table.hpp"

using namespace kvrelay;

namespace {

// The VmFlags of the mapping that holds `address`, if any.
std::optional<std::string> vm_flags_at(const void* address) {
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

bool advised(const void* address) {
  const auto flags = vm_flags_at(address);
  REQUIRE(flags.has_value());
  return flags->find(" hg") != std::string::npos;
}

}  // namespace

TEST_CASE(
    "a pool's filter words, index tables and a consumer's snapshot lane are advised for huge pages when large, small "
    "ones not",
    "[pool]") {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    WARN("this kernel has no transparent huge pages: the advice is ignored, nothing to check");
    return;
  }
  const ckf::Filter large(std::uint64_t{1} << 22, ckf::kDefaultSeed, ckf::kDefaultMaxKicks);  // 32 MiB
  // All of it, from its first word to its last: it starts on a huge page's boundary.
  CHECK(reinterpret_cast<std::uintptr_t>(large.words().data()) % (std::uintptr_t{2} << 20) == 0);
  CHECK(advised(large.words().data()));
  CHECK(advised(&large.words().back()));
  // A consumer's snapshot is assembled into the same kind of array, which its replica keeps.
  static_assert(std::is_same_v<decltype(cbi1::AssembledSnapshot::words), RandomAccessWords>);
  const ckf::Filter small(std::uint64_t{1} << 17, ckf::kDefaultSeed, ckf::kDefaultMaxKicks);  // 1 MiB
  CHECK_FALSE(advised(small.words().data() + small.words().size() / 2));

  ProbeTable<std::uint64_t> table;  // grows past 4 MiB of slots
  for (std::uint64_t key = 1; key <= 600'000; ++key) {
    table.find_or_insert(
        mix_key(key), [&](std::uint64_t held) { return held == key; }, [&] { return key; },
        [&](auto emit) { table.for_each([&](std::size_t, std::uint64_t held) { emit(mix_key(held), held); }); });
  }
  CHECK(advised(&table.at(table.capacity() / 2)));
}
