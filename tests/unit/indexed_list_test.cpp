#include <catch2/catch.hpp>

#include <vector>

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

  list.erase_if([](std::uint64_t v) { return v % 2 == 0; });
  std::vector<std::uint64_t> odd;
  for (std::uint64_t i = 0; i < count; ++i) {
    if ((1000 - 7 * i) % 2 == 1) odd.push_back(1000 - 7 * i);
  }
  REQUIRE(std::vector<std::uint64_t>(list.values().begin(), list.values().end()) == odd);
  for (std::size_t i = 0; i < odd.size(); ++i) CHECK(list.find(odd[i]) == i);  // positions follow the erase
  CHECK_FALSE(list.contains(1000));

  list.clear();
  CHECK(list.empty());
  CHECK_FALSE(list.contains(odd.front()));
  CHECK(list.push_unique(odd.front()));
  CHECK(list.find(odd.front()) == 0);
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
