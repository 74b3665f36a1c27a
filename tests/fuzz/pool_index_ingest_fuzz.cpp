// Ingest batches applied to a live PoolIndex (core/kv_events.hpp, core/pool_index.hpp,
// docs/protocol/pools.md#lineage): each record is one serialized kvrelay.ingest.v1.KvEventBatch;
// a batch the ingest gateway would refuse (core/ingest_validation.hpp) is skipped, the others are
// applied event by event to one small index, fresh per input, as a pool publisher applies them.
//
// Every event's outcome is checked against a reference lineage model, and after every batch the
// index's invariants (tests/unit/pool_index_property_test.cpp checks the same): owner counts
// agree with the model, every resident hash is in the filter, the filter's running slot count
// equals its words' and the resident blocks', and the publication (the published digest, then
// the drained delta) rebuilds exactly the filter on a replica of the bucket lane.
//
// Byte 0: bits 0-2 the pool's block size minus 1, bit 3 Eagle hashing, bits 4-5 the filter's size
// (4 << n buckets: small, so capacity omissions and relocation happen), bit 6: a batch that
// leaves a block omitted re-lays the index out into twice the buckets, as its publisher would
// (docs/protocol/capacity.md#relayout), and the replica starts over from the new layout.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/ingest_validation.hpp"
#include "core/kv_events.hpp"
#include "core/pool_index.hpp"
#include "core/token_hashing.hpp"
#include "core/xxh3.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

struct Expected {
  EventDisposition disposition = EventDisposition::kApplied;
  std::optional<EventError> error;  // the lineage error of a rejected event
};

// Per source, engine id -> canonical hash: what the index's lineage must hold.
class ReferenceLineage {
 public:
  Expected apply(SourceKey source, const ingest_v1::KvEvent& event, const QuerySemantics& semantics) {
    if (event.tier() != ingest_v1::STORAGE_TIER_DEVICE) return {EventDisposition::kIgnored, std::nullopt};
    switch (event.data_case()) {
      case ingest_v1::KvEvent::kStored:
        return store(lineage_[source], event.stored(), semantics);
      case ingest_v1::KvEvent::kRemoved:
        for (std::uint64_t engine_id : event.removed().block_hashes()) lineage_[source].erase(engine_id);
        return {};
      case ingest_v1::KvEvent::kCleared:
        lineage_.erase(source);
        return {};
      case ingest_v1::KvEvent::DATA_NOT_SET:
        break;
    }
    return {EventDisposition::kRejected, std::nullopt};
  }

  std::map<std::uint64_t, std::uint32_t> owners() const {
    std::map<std::uint64_t, std::uint32_t> counts;
    for (const auto& [source, blocks] : lineage_) {
      for (const auto& [engine_id, canonical] : blocks) ++counts[canonical];
    }
    return counts;
  }

 private:
  using Blocks = std::map<std::uint64_t, std::uint64_t>;

  static std::optional<std::uint64_t> mapping(const Blocks& blocks, std::uint64_t engine_id) {
    const auto it = blocks.find(engine_id);
    return it == blocks.end() ? std::nullopt : std::optional(it->second);
  }

  static Expected store(Blocks& known, const ingest_v1::BlocksStored& stored, const QuerySemantics& semantics) {
    const std::size_t width = semantics.kv_block_size + (semantics.format == hashing::HashFormat::kEagle ? 1 : 0);
    const std::uint64_t seed = hashing::block_hash_seed(stored.lora_name(), stored.cache_namespace());
    std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;  // engine id, local hash
    for (const auto& block : stored.blocks()) {
      if (!block.has_tokens()) {
        blocks.emplace_back(block.block_hash(), block.tokens_hash());
        continue;
      }
      const auto& tokens = block.tokens().token_ids();
      if (static_cast<std::size_t>(tokens.size()) != width) return {EventDisposition::kRejected, std::nullopt};
      const auto& mm = block.tokens().mm_hashes();
      blocks.emplace_back(block.block_hash(),
                          hashing::hash_block({tokens.data(), static_cast<std::size_t>(tokens.size())}, seed,
                                              {mm.data(), static_cast<std::size_t>(mm.size())}));
    }
    if (blocks.empty()) return {};
    std::optional<std::uint64_t> previous;
    if (stored.has_parent_block_hash()) {
      const auto parent = known.find(stored.parent_block_hash());
      if (parent == known.end()) return {EventDisposition::kRejected, EventError::kParentBlockNotFound};
      previous = parent->second;
    } else if (stored.start_position() != 0) {
      return {EventDisposition::kRejected, EventError::kInvalidBlockSequence};
    }
    Blocks added;
    for (const auto& [engine_id, local] : blocks) {
      const std::uint64_t canonical = previous ? hashing::next_sequence_hash(*previous, local) : local;
      previous = canonical;
      const std::optional<std::uint64_t> mapped =
          mapping(known, engine_id).or_else([&] { return mapping(added, engine_id); });
      if (!mapped) {
        added.emplace(engine_id, canonical);
      } else if (*mapped != canonical) {
        return {EventDisposition::kRejected, EventError::kInvalidBlockSequence};
      }
    }
    known.merge(added);
    return {};
  }

  std::map<SourceKey, Blocks> lineage_;
};

void check_outcome(const EventResult& actual, const Expected& expected) {
  require(actual.disposition == expected.disposition, "the event's disposition matches the model");
  if (actual.disposition == EventDisposition::kRejected) {
    require(actual.error == expected.error, "a rejected event names the model's lineage error");
  } else {
    require(!actual.error || actual.error == EventError::kCapacityExhausted, "an applied event fails only on capacity");
  }
}

void check_index(const PoolIndex& index, const ReferenceLineage& model) {
  const auto owners = model.owners();
  require(index.unique_blocks() == owners.size(), "one owner entry per live canonical hash");
  std::uint64_t resident = 0;
  for (const auto& [canonical, count] : owners) {
    require(index.owner_count(canonical) == count, "owner counts match the model");
    if (!index.is_resident(canonical)) continue;  // a capacity omission
    ++resident;
    require(index.filter().contains(canonical), "a resident hash is in the filter");
  }
  require(index.filter().occupied_count() == index.filter().occupied_slots(), "the running slot count is exact");
  require(index.filter().occupied_slots() == resident, "one fingerprint copy per resident hash");
  require(index.omitted_blocks() == owners.size() - resident, "every live block is resident or omitted");
}

// A consumer's lane, kept only from what the index publishes.
void check_publication(PoolIndex& index, std::vector<std::uint64_t>& lane) {
  require(index.published_digest() == xxh3(lane.data(), lane.size() * sizeof(std::uint64_t), 0),
          "the published digest is the replica's");
  require(index.published_words() == lane, "the published words are the replica's");
  for (const BucketImage& image : index.drain_publication()) {
    require(image.bucket < lane.size(), "a published image is inside the lane");
    lane[image.bucket] = image.word;
  }
  const auto words = index.filter().words();
  require(std::equal(lane.begin(), lane.end(), words.begin(), words.end()), "the deltas rebuild the filter");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  fuzz::silence_protobuf_logs();
  const QuerySemantics semantics{static_cast<std::uint32_t>(1 + (data[0] & 7)),
                                 (data[0] & 8) != 0 ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard};
  const std::uint64_t bucket_count = std::uint64_t{4} << ((data[0] >> 4) & 3);
  const bool grows = (data[0] & 0x40) != 0;
  PoolIndexConfig config{bucket_count};
  if ((data[0] & 0x80) != 0) {  // a declared capacity: tables made room for at once, same contents
    config.expected.unique = bucket_count * 3;
    for (std::uint64_t worker = 0; worker < 4; ++worker) {
      for (std::uint32_t rank = 0; rank < 2; ++rank) config.expected.per_source[{worker, rank}] = bucket_count * 2;
    }
  }
  PoolIndex index(config);
  KvEventApplier events(semantics);
  std::vector<std::uint64_t> lane(bucket_count, 0);
  ReferenceLineage model;
  for (const auto record : fuzz::records_of(fuzz::as_text(data + 1, size - 1))) {
    ingest_v1::KvEventBatch batch;
    if (!batch.ParseFromArray(record.data(), static_cast<int>(record.size()))) continue;
    if (ingest_check::kv_event_batch(batch)) continue;  // INVALID_ARGUMENT: nothing of it applies
    const SourceKey source{batch.worker_id(), batch.dp_rank()};
    for (const auto& event : batch.events()) {
      const Expected expected = model.apply(source, event, semantics);
      check_outcome(events.apply(index, source, event), expected);
    }
    check_index(index, model);
    check_publication(index, lane);
    if (grows && index.omitted_blocks() > 0 && index.filter().bucket_count() < 1024) {
      index.relayout(index.filter().bucket_count() * 2);
      require(!index.publication_pending(), "a re-layout is published as a snapshot, not a delta");
      lane.assign(index.filter().words().begin(), index.filter().words().end());
      check_index(index, model);
    }
  }
  return 0;
}
