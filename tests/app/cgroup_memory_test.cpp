// The cgroup memory limit the default budget follows: v2 first, then v1, "max" and v1's
// "unlimited" value as no limit.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "app/cgroup_memory.hpp"

using namespace kvrelay;

namespace {

std::string fake_cgroup(const std::string& name, const std::string& file, const std::string& text) {
  const auto root = std::filesystem::path(KVRELAY_TEST_TMP_DIR) / ("cgroup-" + name);
  std::filesystem::remove_all(root);
  std::filesystem::create_directories((root / file).parent_path());
  std::ofstream(root / file) << text;
  return root.string();
}

}  // namespace

TEST_CASE("cgroup limit text: bytes, or none for max and v1's unlimited", "[cgroup]") {
  CHECK(parse_cgroup_limit("2147483648\n") == 2147483648u);
  CHECK_FALSE(parse_cgroup_limit("max\n").has_value());
  CHECK_FALSE(parse_cgroup_limit("9223372036854771712\n").has_value());
  CHECK_FALSE(parse_cgroup_limit("").has_value());
  CHECK_FALSE(parse_cgroup_limit("12 34").has_value());
}

TEST_CASE("cgroup limit: v2's memory.max, else v1's memory.limit_in_bytes, else none", "[cgroup]") {
  CHECK(cgroup_memory_limit(fake_cgroup("v2", "memory.max", "1073741824\n")) == 1073741824u);
  CHECK(cgroup_memory_limit(fake_cgroup("v1", "memory/memory.limit_in_bytes", "536870912\n")) == 536870912u);
  CHECK_FALSE(cgroup_memory_limit(fake_cgroup("v2-max", "memory.max", "max\n")).has_value());
  CHECK_FALSE(cgroup_memory_limit(fake_cgroup("none", "cpu.max", "max\n")).has_value());
}
