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

TEST_CASE("after a burst, the window gives back the room its list took", "[publication]") {
  constexpr std::uint64_t kBurst = 100'000;
  std::vector<std::uint64_t> words(1 << 17, 0);
  PublicationWindow window(words.size());
  touch(window, words, 0, kBurst);
  const std::size_t burst_bytes = window.list_bytes();
  CHECK(burst_bytes >= kBurst * sizeof(ckf::BucketWrite));
  CHECK(window.drain(words).size() == kBurst);
  // A window like the burst's keeps its room: consecutive bursts do not reallocate.
  CHECK(window.list_bytes() == burst_bytes);
  touch(window, words, 0, kBurst);
  CHECK(window.drain(words).size() == kBurst);
  CHECK(window.list_bytes() == burst_bytes);
  // An ordinary publication after it keeps room for windows like its own.
  touch(window, words, 0, 10);
  CHECK(window.drain(words).size() == 10);
  CHECK(window.list_bytes() < 4096 * sizeof(ckf::BucketWrite));
  touch(window, words, 0, 20);
  CHECK(window.drain(words).size() == 20);
}
