// The window of touched buckets between publications (core/publication_window.hpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "core/publication_window.hpp"

using namespace kvrelay;

namespace {

// Touches `count` buckets from `first` on, each changed from its word at first touch.
void touch(PublicationWindow& window, std::vector<std::uint64_t>& words, std::uint64_t first, std::uint64_t count) {
  for (std::uint64_t bucket = first; bucket < first + count; ++bucket) {
    window.mark({bucket, words[bucket]});
    ++words[bucket];
  }
}

}  // namespace

TEST_CASE("a publication carries each touched bucket once, and only if its word changed", "[publication]") {
  std::vector<std::uint64_t> words(256, 0);
  PublicationWindow window(words.size());
  touch(window, words, 10, 3);
  touch(window, words, 11, 1);   // touched again: still one image, its word the latest
  window.mark({20, words[20]});  // touched, written back unchanged: no image
  const auto images = window.drain(words);
  REQUIRE(images.size() == 3);
  CHECK(images[0].bucket == 10);
  CHECK(images[1].bucket == 11);
  CHECK(images[1].word == 2);
  CHECK(images[2].bucket == 12);
  CHECK(window.empty());
  touch(window, words, 11, 1);  // a bucket drained before is a first touch again
  CHECK(window.touched() == 1);
}

TEST_CASE("after bursts, the window gives back the room its list took, and only then", "[publication]") {
  constexpr std::uint64_t kBurst = 100'000;
  constexpr unsigned kReview = PublicationWindow::kRoomReviewWindows;
  std::vector<std::uint64_t> words(1 << 17, 0);
  PublicationWindow window(words.size());
  const auto publish = [&](std::uint64_t count) {
    touch(window, words, 0, count);
    return window.drain(words).size();
  };
  REQUIRE(publish(kBurst) == kBurst);
  const void* burst_storage = window.list_storage();
  const std::size_t burst_bytes = window.list_bytes();
  // Bursts between small windows, as a busy pool's early and timed publications come: the list
  // keeps its room, never reallocated.
  for (unsigned i = 0; i < 4 * kReview; ++i) {
    const std::uint64_t count = i % 2 == 0 ? 10 : kBurst;
    REQUIRE(publish(count) == count);
    REQUIRE(window.list_storage() == burst_storage);
  }
  // Then small windows only: within two reviews the list is down to the least room it keeps.
  for (unsigned i = 0; i < 2 * kReview; ++i) REQUIRE(publish(10) == 10);
  CHECK(window.list_bytes() == PublicationWindow::kKeptTouches * sizeof(ckf::BucketWrite));
  CHECK(window.list_bytes() < burst_bytes);
  CHECK(window.memory_bytes() == window.list_bytes() + words.size() / 8);  // the list and a bit per bucket
  // Small windows after it reallocate no more, and a bucket touched twice is one image still.
  const void* small_storage = window.list_storage();
  for (unsigned i = 0; i < 2 * kReview; ++i) {
    touch(window, words, 5, 1);
    touch(window, words, 5, 1);
    REQUIRE(window.drain(words).size() == 1);
    REQUIRE(window.list_storage() == small_storage);
  }
}
