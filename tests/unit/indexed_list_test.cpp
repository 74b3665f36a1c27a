#include <catch2/catch.hpp>

#include "core/indexed_list.hpp"

using namespace kvrelay;

TEST_CASE("IndexedList: first-seen order and positions, scanned or hashed alike", "[pool]") {
  const std::size_t count = GENERATE(std::size_t{3}, IndexedList::kScanLimit, 4 * IndexedList::kScanLimit);
  INFO(count);
  IndexedList list;
  for (std::uint64_t i = 0; i < count; ++i) CHECK(list.push_unique(1000 - 7 * i));
  for (std::uint64_t i = 0; i < count; ++i) CHECK_FALSE(list.push_unique(1000 - 7 * i));  // held already
  REQUIRE(list.size() == count);
  for (std::size_t i = 0; i < count; ++i) {
    CHECK(list.values()[i] == 1000 - 7 * i);
    CHECK(list.find(1000 - 7 * i) == i);
  }
  CHECK_FALSE(list.contains(1));

  const std::uint64_t last = 1000 - 7 * (count - 1);
  list.clear();
  CHECK(list.empty());
  CHECK_FALSE(list.contains(last));
  CHECK(list.push_unique(last));
  CHECK(list.find(last) == 0);
}

TEST_CASE("IndexedList: absent values are told apart from held ones that share their mask bit", "[pool]") {
  // 300 held values set most of the mask's 256 bits, so most absent values pass the mask and
  // are settled by the scan or the hash index, as events with more blocks are.
  const std::size_t count = GENERATE(std::size_t{20}, std::size_t{300});
  INFO(count);
  IndexedList list;
  for (std::uint64_t i = 0; i < count; ++i) list.push_new(i * 2);
  for (std::uint64_t i = 0; i < count; ++i) {
    CHECK(list.find(i * 2) == i);
    CHECK_FALSE(list.contains(i * 2 + 1));
  }
}
