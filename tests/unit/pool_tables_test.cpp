// The pool index's tables (docs/protocol/pools.md#index-layout): the probe table against a plain
// map through inserts, erasures and rebuilds, with well-spread and with deliberately clustered
// hashes; its load bounds; the owner slab's ids.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/capacity.hpp"
#include "core/pool_index.hpp"
#include "core/pool_tables.hpp"

using namespace kvrelay;

namespace {

struct Pair {
  std::uint64_t key;
  std::uint64_t value;
};

// Clustered: every hash's high bits (the home slot) come from 8 values, so runs are long, run
// past the last group on from slot 0 and mix keys of different homes; bits 32-38 (the tag)
// from 4.
std::uint64_t hash_for(std::uint64_t key, bool clustered) {
  if (!clustered) return mix_key(key);
  return (mix_key(key) % 8) << 61 | (key % 4) << 32;
}

void check_agrees(const ProbeTable<Pair>& table, const std::map<std::uint64_t, std::uint64_t>& model, bool clustered) {
  REQUIRE(table.size() == model.size());
  for (const auto& [key, value] : model) {
    const auto at = table.find(hash_for(key, clustered), [&](const Pair& p) { return p.key == key; });
    REQUIRE(at != ProbeTable<Pair>::kNotFound);
    REQUIRE(table.at(at).value == value);
  }
  std::map<std::uint64_t, std::uint64_t> listed;
  table.for_each([&](std::size_t, const Pair& p) { listed.emplace(p.key, p.value); });
  REQUIRE(listed == model);
}

}  // namespace

TEST_CASE("a probe table holds what a map holds through inserts, erasures and rebuilds", "[pool][tables]") {
  const bool clustered = GENERATE(false, true);
  INFO("clustered hashes: " << clustered);
  std::mt19937_64 rng(clustered ? 11 : 12);
  ProbeTable<Pair> table;
  std::map<std::uint64_t, std::uint64_t> model;
  std::vector<std::uint64_t> keys;  // the model's, for picking one at random
  auto find_or_insert = [&](std::uint64_t key) {
    return table.find_or_insert(
        hash_for(key, clustered), [&](const Pair& p) { return p.key == key; },
        [&] {
          return Pair{key, key * 3};
        },
        [&](auto emit) { table.for_each([&](std::size_t, const Pair& p) { emit(hash_for(p.key, clustered), p); }); });
  };
  auto insert = [&](std::uint64_t key) {
    REQUIRE(find_or_insert(key).second);
    model.emplace(key, key * 3);
    keys.push_back(key);
  };
  // A held key is found where it is, and nothing is added.
  auto find_held = [&] {
    const std::uint64_t key = keys[rng() % keys.size()];
    const auto [position, added] = find_or_insert(key);
    REQUIRE_FALSE(added);
    REQUIRE(table.at(position).key == key);
    REQUIRE(table.size() == model.size());
  };
  auto erase_random = [&] {
    const std::size_t pick = rng() % keys.size();
    const std::uint64_t key = keys[pick];
    keys[pick] = keys.back();
    keys.pop_back();
    table.erase_at(table.find(hash_for(key, clustered), [&](const Pair& p) { return p.key == key; }));
    model.erase(key);
  };
  // Grow, churn at a steady size (tombstones, same-size rebuilds), shrink to nothing, regrow.
  const int steps = clustered ? 3'000 : 40'000;
  for (int i = 0; i < steps; ++i) insert(rng() | 1);
  check_agrees(table, model, clustered);
  for (int i = 0; i < 2 * steps; ++i) {
    erase_random();
    insert(rng() | 1);
    find_held();
    if (i % 997 == 0) check_agrees(table, model, clustered);
  }
  check_agrees(table, model, clustered);
  while (!keys.empty()) erase_random();
  check_agrees(table, model, clustered);
  for (int i = 0; i < steps / 10; ++i) insert(rng() | 1);
  check_agrees(table, model, clustered);
  // Keys never inserted (even ones: every inserted key is odd) are not found.
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t absent = rng() & ~std::uint64_t{1};
    CHECK(table.find(hash_for(absent, clustered), [&](const Pair& p) { return p.key == absent; }) ==
          ProbeTable<Pair>::kNotFound);
  }
}

TEST_CASE("probes that reach the table's end go on from slot 0, at every capacity", "[pool][tables]") {
  // Odd keys' home is the last group (the hash's high bits all set), even keys' the first: each
  // table from the smallest (one group) up fills from both ends, its probes run past the end on
  // from slot 0 and, where the last group overlaps the one before, through it.
  ProbeTable<Pair> table;
  auto hash = [](std::uint64_t key) { return (key % 2 == 1 ? ~std::uint64_t{0} << 40 : 0) | (key & 0x7f) << 32; };
  std::vector<std::uint64_t> keys;
  std::set<std::size_t> capacities;
  for (std::uint64_t key = 1; key <= 400; ++key) {
    const auto [position, added] = table.find_or_insert(
        hash(key), [&](const Pair& p) { return p.key == key; },
        [&] {
          return Pair{key, key};
        },
        [&](auto emit) { table.for_each([&](std::size_t, const Pair& p) { emit(hash(p.key), p); }); });
    REQUIRE(added);
    keys.push_back(key);
    capacities.insert(table.capacity());
    for (std::uint64_t held : keys) {
      REQUIRE(table.find(hash(held), [&](const Pair& p) { return p.key == held; }) != ProbeTable<Pair>::kNotFound);
    }
    REQUIRE(table.find(hash(0), [](const Pair& p) { return p.key == 0; }) == ProbeTable<Pair>::kNotFound);
  }
  CHECK(capacities.count(16) == 1);
  CHECK(std::ranges::any_of(capacities, [](std::size_t c) { return c > 16 && c < 32; }));  // groups overlap
  // Erasing every other key keeps the rest reachable past the tombstones.
  for (std::uint64_t key = 1; key <= 400; key += 2) {
    table.erase_at(table.find(hash(key), [&](const Pair& p) { return p.key == key; }));
  }
  for (std::uint64_t key = 2; key <= 400; key += 2) {
    REQUIRE(table.find(hash(key), [&](const Pair& p) { return p.key == key; }) != ProbeTable<Pair>::kNotFound);
  }
  std::size_t listed = 0;
  table.for_each([&](std::size_t, const Pair& p) { listed += p.key % 2 == 0 ? 1 : 1000; });
  CHECK(listed == 200);
}

TEST_CASE("a growing probe table stays between 7/10 and 7/8 full", "[pool][tables]") {
  ProbeTable<std::uint64_t> table;
  auto rebuild_from_self = [&](auto emit) {
    table.for_each([&](std::size_t, std::uint64_t key) { emit(mix_key(key), key); });
  };
  std::size_t rebuilds = 0;
  for (std::uint64_t key = 1; key <= 200'000; ++key) {
    const std::size_t before = table.capacity();
    REQUIRE(
        table
            .find_or_insert(
                mix_key(key), [&](std::uint64_t held) { return held == key; }, [&] { return key; }, rebuild_from_self)
            .second);
    if (table.capacity() != before) {
      ++rebuilds;
      // Grown by 1.25x (the rounding of small tables aside), not doubled.
      if (before >= 1000) CHECK(table.capacity() * 100 <= before * 126);
    }
    REQUIRE(table.size() * 8 <= table.capacity() * 7);
    if (table.capacity() > 16) REQUIRE(table.size() * 10 + 10 >= table.capacity() * 7);
  }
  CHECK(rebuilds > 30);
  CHECK(table.memory_bytes() <= table.size() * (sizeof(std::uint64_t) + 1) * 10 / 7 + 64);
}

TEST_CASE("a probe table made room for N entries takes them without a rebuild, and keeps what it held",
          "[pool][tables]") {
  constexpr std::uint64_t kEntries = 100'000;
  ProbeTable<std::uint64_t> table;
  auto rebuild_from_self = [&](auto emit) {
    table.for_each([&](std::size_t, std::uint64_t key) { emit(mix_key(key), key); });
  };
  const auto insert = [&](std::uint64_t key) {
    return table
        .find_or_insert(
            mix_key(key), [&](std::uint64_t held) { return held == key; }, [&] { return key; }, rebuild_from_self)
        .second;
  };
  for (std::uint64_t key = 1; key <= 1000; ++key) REQUIRE(insert(key));
  const std::size_t grown = table.rebuilds();
  table.reserve(kEntries, rebuild_from_self);
  const std::size_t reserved = table.capacity();
  const std::size_t made_room = table.rebuilds();
  CHECK(made_room == grown + 1);
  CHECK(reserved * 7 >= kEntries * 8);  // at most 7/8 used with all of them in
  CHECK(reserved * 7 <= kEntries * 8 + 6);
  for (std::uint64_t key = 1; key <= 1000; ++key) {  // the entries held before, moved once
    REQUIRE(table.find(mix_key(key), [&](std::uint64_t held) { return held == key; }) != table.kNotFound);
  }
  for (std::uint64_t key = 1001; key <= kEntries; ++key) REQUIRE(insert(key));
  CHECK(table.capacity() == reserved);
  table.reserve(10, rebuild_from_self);  // never shrinks
  CHECK(table.capacity() == reserved);
  CHECK(table.rebuilds() == made_room);
  CHECK(insert(kEntries + 1));  // past what it was made room for, it grows as before
  CHECK(table.capacity() > reserved);
  CHECK(table.rebuilds() == made_room + 1);
}

TEST_CASE("the owner slab reuses freed ids and finds every owner by its hash", "[pool][tables]") {
  OwnerTable owners;
  std::map<std::uint64_t, OwnerTable::Id> held;  // canonical -> id
  std::mt19937_64 rng(5);
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t canonical = rng();
    const auto added = owners.find_or_add(canonical);
    REQUIRE(added.added);
    held.emplace(canonical, added.id);
  }
  std::set<OwnerTable::Id> ids;
  for (const auto& [canonical, id] : held) ids.insert(id);
  REQUIRE(ids.size() == held.size());
  const OwnerTable::Id highest = *ids.rbegin();

  // Every other owner goes; as many new ones take exactly the freed ids.
  std::set<OwnerTable::Id> freed;
  for (auto it = held.begin(); it != held.end();) {
    if (freed.size() < held.size() / 2 && it->second % 2 == 0) {
      freed.insert(it->second);
      owners.erase(it->second);
      CHECK_FALSE(owners.find(it->first));
      it = held.erase(it);
    } else {
      ++it;
    }
  }
  std::set<OwnerTable::Id> reused;
  for (std::size_t i = 0; i < freed.size(); ++i) {
    const std::uint64_t canonical = rng();
    const OwnerTable::Id id = owners.find_or_add(canonical).id;
    reused.insert(id);
    held.emplace(canonical, id);
  }
  CHECK(reused == freed);
  REQUIRE(owners.size() == held.size());
  for (const auto& [canonical, id] : held) {
    REQUIRE(owners.find(canonical) == id);
    REQUIRE(owners.canonical(id) == canonical);
    REQUIRE(owners.mappings(id) == 1);
    REQUIRE(id <= highest);
  }
  std::size_t visited = 0;
  owners.for_each([&](OwnerTable::Id id, std::uint64_t canonical) {
    ++visited;
    CHECK(canonical == owners.canonical(id));
    CHECK(held.at(canonical) == id);
  });
  CHECK(visited == held.size());
}

TEST_CASE("an owner's mapping count and resident bit are its own", "[pool][tables]") {
  OwnerTable owners;
  std::vector<OwnerTable::Id> ids;
  for (std::uint64_t c = 1; c <= 300; ++c) ids.push_back(owners.find_or_add(c * 0x9E3779B97F4A7C15ULL).id);
  for (std::size_t i = 0; i < ids.size(); i += 3) owners.set_resident(ids[i], true);
  for (std::size_t i = 0; i < ids.size(); i += 5) owners.add_mapping(ids[i]);
  owners.set_resident(ids[3], false);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CHECK(owners.resident(ids[i]) == (i % 3 == 0 && i != 3));
    CHECK(owners.mappings(ids[i]) == (i % 5 == 0 ? 2u : 1u));
  }
  // A reused id starts with one mapping and not resident, whatever its predecessor had.
  owners.erase(ids[0]);
  const OwnerTable::Id again = owners.find_or_add(42).id;
  CHECK(again == ids[0]);
  CHECK_FALSE(owners.resident(again));
  CHECK(owners.mappings(again) == 1);
  // A held hash is found, not added again; its count is the caller's to raise.
  const auto found = owners.find_or_add(42);
  CHECK_FALSE(found.added);
  CHECK(found.id == again);
  CHECK(owners.mappings(again) == 1);
}

TEST_CASE("an owner counts mappings past what its slab entry holds, and back", "[pool][tables]") {
  // The slab entry holds a count below 2^15 - 1; from there on the count is kept aside.
  constexpr std::uint32_t kMany = 70'000;
  OwnerTable owners;
  const OwnerTable::Id shared = owners.find_or_add(7).id;
  const OwnerTable::Id neighbour = owners.find_or_add(8).id;
  const std::size_t few = owners.memory_bytes();
  // Up, not resident: the count never spills into the resident bit.
  for (std::uint32_t count = 1; count < kMany; ++count) {
    owners.add_mapping(shared);
    REQUIRE(owners.mappings(shared) == count + 1);
    REQUIRE_FALSE(owners.resident(shared));
  }
  CHECK(owners.memory_bytes() > few);  // the count kept aside is in the table's bytes
  CHECK(owners.mappings(neighbour) == 1);
  CHECK_FALSE(owners.resident(neighbour));
  // An owner whose count is kept aside is live like any other.
  std::vector<std::uint64_t> visited;
  owners.for_each([&](OwnerTable::Id, std::uint64_t canonical) { visited.push_back(canonical); });
  CHECK(visited == std::vector<std::uint64_t>{7, 8});
  // Down, resident: the bit stays as the count comes back into the slab entry.
  owners.set_resident(shared, true);
  for (std::uint32_t count = kMany; count > 1; --count) {
    owners.drop_mapping(shared);
    REQUIRE(owners.mappings(shared) == count - 1);
    REQUIRE(owners.resident(shared));
  }
  owners.erase(shared);
  CHECK(owners.find(7) == std::nullopt);
  CHECK(owners.find_or_add(9).id == shared);
  CHECK(owners.mappings(shared) == 1);
  CHECK_FALSE(owners.resident(shared));
  CHECK(owners.mappings(neighbour) == 1);
}

TEST_CASE("a lineage table maps engine ids of any width to owners of any id", "[pool][tables]") {
  LineageTable lineage;
  const std::vector<std::uint64_t> engine_ids{
      0, 1, 0xFFFF'FFFF, 0x1'0000'0000, ~std::uint64_t{0}, 0x8000'0000'0000'0001};
  // Owner ids across all 28 bits.
  const std::vector<OwnerTable::Id> owner_ids{0x7F, 0x80, 0, OwnerTable::kMaxOwners - 1, 0x0ABC'DEF1, 0x0800'0000};
  for (std::size_t i = 0; i < engine_ids.size(); ++i) {
    const auto [position, added] = lineage.find_or_add(engine_ids[i]);
    REQUIRE(added);
    lineage.set_owner(position, owner_ids[i]);
  }
  for (std::size_t i = 0; i < engine_ids.size(); ++i) {
    const auto [position, added] = lineage.find_or_add(engine_ids[i]);
    CHECK_FALSE(added);
    CHECK(lineage.owner_at(position) == owner_ids[i]);
  }
  // A new owner replaces the old one whole.
  lineage.set_owner(lineage.find(0), OwnerTable::kMaxOwners - 2);
  CHECK(lineage.owner_at(lineage.find(0)) == OwnerTable::kMaxOwners - 2);
  lineage.set_owner(lineage.find(0), owner_ids[0]);
  for (std::size_t i = 0; i < engine_ids.size(); ++i) {
    const auto at = lineage.find(engine_ids[i]);
    REQUIRE(at != LineageTable::kNotFound);
    CHECK(lineage.owner_at(at) == owner_ids[i]);
  }
  CHECK(lineage.find(2) == LineageTable::kNotFound);
  lineage.erase_at(lineage.find(0xFFFF'FFFF));
  CHECK(lineage.find(0xFFFF'FFFF) == LineageTable::kNotFound);
  CHECK(lineage.find(0x1'0000'0000) != LineageTable::kNotFound);  // the halves are not confused
  CHECK(lineage.size() == engine_ids.size() - 1);
  // Rebuilt as it grows, every entry kept and the erased one still gone.
  const auto owner_of = [](std::uint64_t id) { return static_cast<OwnerTable::Id>(id * 31 % OwnerTable::kMaxOwners); };
  for (std::uint64_t id = 100; id < 100'000; ++id) {
    lineage.set_owner(lineage.find_or_add(id * 977).first, owner_of(id));
  }
  CHECK(lineage.rebuilds() > 10);
  CHECK(lineage.size() == engine_ids.size() - 1 + 99'900);
  CHECK(lineage.find(0xFFFF'FFFF) == LineageTable::kNotFound);
  for (std::size_t i = 0; i < engine_ids.size(); ++i) {
    if (engine_ids[i] == 0xFFFF'FFFF) continue;
    const auto at = lineage.find(engine_ids[i]);
    REQUIRE(at != LineageTable::kNotFound);
    CHECK(lineage.owner_at(at) == owner_ids[i]);
  }
  for (std::uint64_t id = 100; id < 100'000; id += 997) {
    const auto at = lineage.find(id * 977);
    REQUIRE(at != LineageTable::kNotFound);
    CHECK(lineage.owner_at(at) == owner_of(id));
  }
}

TEST_CASE("the memory budget's bytes per live block cover a pool's tables at every size", "[pool][tables]") {
  // One slab page and the two smallest tables: what a pool of one block holds.
  constexpr std::size_t kFixedBytes = 2 << 10;
  PoolIndex index({std::uint64_t{1} << 17});
  std::mt19937_64 rng(3);
  std::vector<StoredBlockRef> event(16);
  std::uint64_t next_id = 0;
  std::uint64_t peak = 0;
  auto within_budget = [&] {
    peak = std::max(peak, index.unique_blocks());
    return index.table_bytes() <= capacity::kBytesPerLiveBlock * peak + kFixedBytes;
  };
  while (next_id < 300'000) {
    for (auto& block : event) block = {next_id++, rng()};
    REQUIRE_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, event));
    REQUIRE(within_budget());
  }
  // A steady churn leaves tombstones behind; the tables never outgrow the peak's charge.
  std::vector<std::uint64_t> oldest(16);
  for (std::uint64_t first = 0; first < 200'000; first += 16) {
    std::iota(oldest.begin(), oldest.end(), first);
    REQUIRE_FALSE(index.remove({1, 0}, oldest));
    for (auto& block : event) block = {next_id++, rng()};
    REQUIRE_FALSE(index.store({1, 0}, std::nullopt, std::nullopt, event));
    REQUIRE(within_budget());
  }
  CHECK(index.unique_blocks() == 300'000);
}
