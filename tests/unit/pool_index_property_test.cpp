// Randomized store / remove / clear sequences over several sources, checked against a plain
// reference model (a multiset of canonical hashes) and against a consumer replica built
// from CBI1 frames.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "core/cbi1.hpp"
#include "core/pool_index.hpp"
#include "core/token_hashing.hpp"

using namespace kvrelay;

namespace {

// What the pool should hold: per source, engine id -> canonical hash.
struct ReferenceModel {
  std::map<SourceKey, std::map<std::uint64_t, std::uint64_t>> lineage;

  std::map<std::uint64_t, std::uint32_t> owners() const {
    std::map<std::uint64_t, std::uint32_t> counts;
    for (const auto& [source, blocks] : lineage) {
      for (const auto& [engine_id, canonical] : blocks) ++counts[canonical];
    }
    return counts;
  }
};

class RandomWorkload {
 public:
  RandomWorkload(std::uint64_t seed, PoolIndex& index) : rng_(seed), index_(index) {}

  void step() {
    const SourceKey source{pick(1, 3), static_cast<std::uint32_t>(pick(0, 1))};
    const auto roll = pick(0, 99);
    if (roll < 60)
      store(source);
    else if (roll < 95)
      remove(source);
    else
      clear(source);
  }

  void remove_everything() {
    for (auto& [source, blocks] : model.lineage) REQUIRE_FALSE(index_.clear(source));
    model.lineage.clear();
  }

  ReferenceModel model;

 private:
  std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }

  void store(SourceKey source) {
    auto& known = model.lineage[source];
    std::optional<std::uint64_t> parent;
    std::optional<std::uint64_t> previous;
    if (!known.empty() && pick(0, 1) == 1) {
      auto it = known.begin();
      std::advance(it, static_cast<long>(pick(0, known.size() - 1)));
      parent = it->first;
      previous = it->second;
    }
    std::vector<StoredBlockRef> blocks;
    for (std::uint64_t n = pick(1, 6); n > 0; --n) {
      // A small alphabet of block contents makes sources share prefixes, as real prompts do.
      const std::uint64_t local = pick(1, 40);
      const std::uint64_t canonical = previous ? hashing::next_sequence_hash(*previous, local) : local;
      previous = canonical;
      blocks.push_back({rng_(), local});
      known.emplace(blocks.back().engine_id, canonical);
    }
    REQUIRE_FALSE(index_.store(source, parent, std::nullopt, blocks));
  }

  void remove(SourceKey source) {
    auto& known = model.lineage[source];
    std::vector<std::uint64_t> ids{rng_()};  // an unknown id is a harmless no-op
    for (const auto& [engine_id, canonical] : known) {
      if (pick(0, 2) == 0) ids.push_back(engine_id);
    }
    for (std::uint64_t id : ids) known.erase(id);
    REQUIRE_FALSE(index_.remove(source, ids));
  }

  void clear(SourceKey source) {
    model.lineage.erase(source);
    REQUIRE_FALSE(index_.clear(source));
  }

  std::mt19937_64 rng_;
  PoolIndex& index_;
};

void check_against_model(const PoolIndex& index, const ReferenceModel& model) {
  const auto owners = model.owners();
  REQUIRE(index.unique_blocks() == owners.size());
  for (const auto& [canonical, count] : owners) {
    REQUIRE(index.owner_count(canonical) == count);
    REQUIRE(index.filter().contains(canonical));  // never a false negative
  }
  REQUIRE(index.filter().occupied_slots() == owners.size());  // one copy per held hash
  REQUIRE(index.filter().occupied_count() == owners.size());  // the running count agrees
}

// A consumer's view of the pool, built only from CBI1 frames.
struct Replica {
  cbi1::FilterFormat format;
  RandomAccessWords words;
  std::uint64_t sequence = 0;

  void install(const std::vector<std::string>& chunks) {
    cbi1::SnapshotAssembly assembly(format.bucket_count);
    for (const auto& chunk : chunks) {
      const auto decoded = cbi1::decode(chunk, format);
      REQUIRE(decoded.has_value());
      auto outcome = assembly.absorb(*decoded);
      REQUIRE(outcome.has_value());
      if (!*outcome) continue;
      words = std::move((*outcome)->words);
      sequence = (*outcome)->epoch;
    }
  }

  void apply(const std::string& frame) {
    const auto decoded = cbi1::decode(frame, format);
    REQUIRE(decoded.has_value());
    const auto& delta = std::get<cbi1::DecodedDelta>(*decoded);
    REQUIRE(delta.base_epoch == sequence);
    REQUIRE(delta.header.epoch == sequence + 1);
    REQUIRE_FALSE(delta.images.empty());
    for (const auto& image : delta.images) words[image.bucket] = image.word;
    sequence = delta.header.epoch;
  }
};

}  // namespace

TEST_CASE("random event sequences agree with the reference model", "[pool][property]") {
  const std::uint64_t seed = GENERATE(1, 2, 3, 4, 5, 6, 7, 8);
  PoolIndex index({*ckf::bucket_count_for(4096)});
  RandomWorkload workload(seed, index);
  for (int i = 0; i < 3000; ++i) {
    workload.step();
    if (i % 97 == 0) check_against_model(index, workload.model);
  }
  check_against_model(index, workload.model);
  CHECK(index.capacity_failures() == 0);

  workload.remove_everything();
  CHECK(index.unique_blocks() == 0);
  CHECK(std::all_of(index.filter().words().begin(), index.filter().words().end(),
                    [](std::uint64_t w) { return w == 0; }));
}

TEST_CASE("a snapshot plus the deltas since rebuilds the producer's buckets", "[pool][property]") {
  const std::uint64_t seed = GENERATE(11, 12, 13, 14);
  // A small filter under pressure also exercises relocation and capacity omissions.
  const std::uint64_t bucket_count = GENERATE(as<std::uint64_t>{}, 64, 4096);
  PoolIndex index({bucket_count});
  RandomWorkload workload(seed, index);
  const auto format = *cbi1::FilterFormat::make(ckf::kDefaultSeed, bucket_count);
  constexpr std::uint64_t kDcId = 77;

  std::uint64_t sequence = 0;
  std::optional<Replica> replica;
  std::optional<Replica> joined_while_pending;
  for (int i = 0; i < 4000; ++i) {
    workload.step();
    if (i == 2003) {  // another joins between publications: a snapshot of the published words
      const auto chunks = cbi1::encode_snapshot(format, kDcId, sequence, index.published_words());
      REQUIRE(chunks.has_value());
      joined_while_pending = Replica{format, {}, 0};
      joined_while_pending->install(*chunks);
      // Both at the published sequence: the changes since wait for the next delta.
      REQUIRE(joined_while_pending->sequence == replica->sequence);
      CHECK(joined_while_pending->words == replica->words);
    }
    if (i % 16 != 15) continue;  // publish every 16 events, like the relay's default
    const auto images = index.drain_publication();
    if (!images.empty()) {
      const auto frame = cbi1::encode_delta(format, kDcId, sequence, sequence + 1, images);
      REQUIRE(frame.has_value());
      ++sequence;
      if (replica) replica->apply(*frame);
      if (joined_while_pending) joined_while_pending->apply(*frame);
    }
    if (i == 1007) {  // a subscriber joins mid-stream with a barrier snapshot
      const auto chunks = cbi1::encode_snapshot(format, kDcId, sequence, index.filter().words());
      REQUIRE(chunks.has_value());
      replica = Replica{format, {}, 0};
      replica->install(*chunks);
      REQUIRE(replica->sequence == sequence);
    }
  }
  REQUIRE(replica.has_value());
  REQUIRE(joined_while_pending.has_value());
  const auto images = index.drain_publication();
  if (!images.empty()) {
    const auto frame = cbi1::encode_delta(format, kDcId, sequence, sequence + 1, images);
    replica->apply(*frame);
    joined_while_pending->apply(*frame);
  }
  CHECK(std::equal(replica->words.begin(), replica->words.end(), index.filter().words().begin(),
                   index.filter().words().end()));
  CHECK(std::equal(joined_while_pending->words.begin(), joined_while_pending->words.end(), replica->words.begin(),
                   replica->words.end()));
}
