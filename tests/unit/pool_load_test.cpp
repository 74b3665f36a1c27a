// The load examples of docs/protocol/load.md#examples.
#include <catch2/catch.hpp>

#include <limits>

#include "core/pool_load.hpp"

using namespace kvrelay;

namespace {

RuntimeConfig ranks(std::uint32_t size, std::optional<std::uint64_t> total, std::uint32_t start = 0) {
  RuntimeConfig config;
  config.data_parallel_start_rank = start;
  config.data_parallel_size = size;
  config.total_kv_blocks = total;
  return config;
}

PoolLoadSnapshot entry(std::uint64_t used, std::uint64_t total, std::uint32_t observed, std::uint32_t expected) {
  return {used, total, observed, expected};
}

}  // namespace

TEST_CASE("load: one rank fully reported", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(1, 100)}}));
  CHECK(load.observe({9, 0}, 40));
  CHECK(load.snapshot() == entry(40, 100, 1, 1));
}

TEST_CASE("load: partial usage is published as 0 used, never as low load", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(2, 100)}}));
  load.observe({9, 0}, 40);
  CHECK(load.snapshot() == entry(0, 200, 1, 2));
  load.observe({9, 1}, 30);
  CHECK(load.snapshot() == entry(70, 200, 2, 2));
}

TEST_CASE("load: capacity 0 or absent is unknown", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(2, 0)}}));
  load.observe({9, 0}, 40);
  load.observe({9, 1}, 30);
  CHECK(load.snapshot() == entry(70, 0, 2, 2));

  PoolLoad mixed;
  REQUIRE(mixed.set_capacity({{9, ranks(1, 100)}, {10, ranks(1, std::nullopt)}}));
  mixed.observe({9, 0}, 5);
  mixed.observe({10, 0}, 6);
  CHECK(mixed.snapshot() == entry(11, 0, 2, 2));
}

TEST_CASE("load: undeclared ranks are ignored", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(1, 100)}}));
  CHECK_FALSE(load.observe({9, 1}, 40));
  CHECK_FALSE(load.observe({8, 0}, 40));
  CHECK(load.snapshot() == entry(0, 100, 0, 1));
}

TEST_CASE("load: a capacity change drops that rank's observation only", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(1, 100)}, {10, ranks(1, 100)}}));
  load.observe({9, 0}, 40);
  load.observe({10, 0}, 30);
  REQUIRE(load.set_capacity({{9, ranks(1, 200)}, {10, ranks(1, 100)}}));
  CHECK(load.snapshot() == entry(0, 300, 1, 2));
}

TEST_CASE("load: clearing observations keeps the declared capacity", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(2, 100)}}));
  load.observe({9, 0}, 1);
  load.observe({9, 1}, 2);
  load.clear_observations();
  CHECK(load.snapshot() == entry(0, 200, 0, 2));
}

TEST_CASE("load: sums saturate at u64 max", "[load]") {
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(2, kMax)}}));
  load.observe({9, 0}, kMax);
  load.observe({9, 1}, kMax);
  CHECK(load.snapshot() == entry(kMax, kMax, 2, 2));
}

TEST_CASE("load: no workers, nothing expected", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({}));
  CHECK(load.snapshot() == entry(0, 0, 0, 0));
}

TEST_CASE("load: invalid rank declarations clear the pool's load state", "[load]") {
  PoolLoad load;
  REQUIRE(load.set_capacity({{9, ranks(1, 100)}}));
  load.observe({9, 0}, 40);
  CHECK_FALSE(load.set_capacity({{9, ranks(4097, 100)}}));
  CHECK(load.snapshot() == entry(0, 0, 0, 0));
  CHECK_FALSE(load.set_capacity({{9, ranks(2, 100, std::numeric_limits<std::uint32_t>::max())}}));
  CHECK(load.set_capacity({{9, ranks(1, 100, std::numeric_limits<std::uint32_t>::max())}}).has_value());
}
