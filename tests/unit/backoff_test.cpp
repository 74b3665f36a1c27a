// Bounded exponential backoff with jitter, shared by the consumer library's stream reopening
// and the relay's rebuild of a fenced pool generation.
#include <catch2/catch.hpp>

#include <vector>

#include "core/backoff.hpp"

using namespace kvrelay;

TEST_CASE("backoff grows exponentially with jitter up to its bound, and resets", "[backoff]") {
  Backoff backoff({std::chrono::milliseconds(100), std::chrono::milliseconds(1000)}, 7);
  std::vector<std::int64_t> delays;
  for (int i = 0; i < 8; ++i) delays.push_back(backoff.next().count());
  CHECK((delays[0] >= 50 && delays[0] <= 100));
  CHECK((delays[2] >= 200 && delays[2] <= 400));
  for (int i = 4; i < 8; ++i) CHECK((delays[i] >= 500 && delays[i] <= 1000));
  backoff.reset();
  CHECK(backoff.next().count() <= 100);
}

TEST_CASE("backoff: only a stream usable for at least the longest wait resets it", "[backoff]") {
  using std::chrono::milliseconds;
  Backoff backoff({milliseconds(100), milliseconds(1000)}, 7);
  for (int i = 0; i < 4; ++i) backoff.next();  // the next wait is at least 500 ms
  const auto opened = std::chrono::steady_clock::now();
  SECTION("never usable") {
    backoff.attempt_ended(std::nullopt, opened + milliseconds(5000));
    CHECK(backoff.next().count() >= 500);
  }
  SECTION("usable, but for less than the longest wait") {
    backoff.attempt_ended(opened, opened + milliseconds(999));
    CHECK(backoff.next().count() >= 500);
  }
  SECTION("usable for the longest wait") {
    backoff.attempt_ended(opened, opened + milliseconds(1000));
    CHECK(backoff.next().count() <= 100);
  }
}
