// A pool replica installs only complete, validated snapshots and applies only contiguous deltas
// from the relay and producer it follows; every fault retires it. Also the reaction table and
// the query side.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "client/lib/pool_replica.hpp"
#include "client/lib/query.hpp"
#include "client/lib/reaction.hpp"
#include "core/ckf.hpp"
#include "core/xxh3.hpp"
#include "tests/client/wire_builders.hpp"
#include "tests/skip.hpp"
#include "tests/unit/huge_page_advice.hpp"

using namespace kvrelay;
using namespace kvrelay::test;
using client::PoolReplica;

namespace {

std::vector<std::uint64_t> random_words(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> words(kBuckets);
  for (auto& word : words) word = rng() % 3 == 0 ? rng() : 0;
  return words;
}

PoolReplica installed_replica(const std::vector<std::uint64_t>& words, std::uint64_t sequence = 5) {
  PoolReplica replica(producer(1), relay_identity());
  for (const auto& chunk : snapshot_frames(producer(1), sequence, words)) REQUIRE_FALSE(replica.apply(chunk));
  REQUIRE(replica.installed());
  return replica;
}

std::string fault_kind(PoolReplica& replica, const v1::FilterUpdate& update) {
  const auto fault = replica.apply(update);
  REQUIRE(fault);
  CHECK(replica.phase() == client::ReplicaPhase::kFaulted);
  CHECK(replica.apply(frame(producer(1), v1::FILTER_UPDATE_KIND_HEARTBEAT, 5, 5))->kind == "Retired");
  CHECK(replica.occupied_slots() == 0);
  return fault->kind;
}

}  // namespace

TEST_CASE("replica: snapshot, deltas and heartbeats keep it equal to the producer's words", "[client][replica]") {
  auto words = random_words(1);
  auto replica = installed_replica(words);
  CHECK(replica.sequence() == 5);
  CHECK(replica.digest() == xxh3(words.data(), words.size() * 8, 0));
  std::uint64_t occupied = 0;
  for (auto word : words) occupied += ckf::occupied_in(word);
  CHECK(replica.occupied_slots() == occupied);

  REQUIRE_FALSE(replica.apply(delta_frame(producer(1), 5, {{3, 0xABCD}, {1000, 0}})));
  REQUIRE_FALSE(replica.apply(frame(producer(1), v1::FILTER_UPDATE_KIND_HEARTBEAT, 6, 6)));
  REQUIRE_FALSE(replica.apply(delta_frame(producer(1), 6, {{3, 0x1}})));
  words[3] = 0x1;
  words[1000] = 0;
  CHECK(replica.sequence() == 7);
  CHECK(replica.deltas_applied() == 2);
  CHECK(replica.images_applied() == 3);
  CHECK(replica.digest() == xxh3(words.data(), words.size() * 8, 0));
  occupied = 0;  // the deltas' images replaced their buckets' slots
  for (auto word : words) occupied += ckf::occupied_in(word);
  CHECK(replica.occupied_slots() == occupied);
}

TEST_CASE("replica: an applied delta hands over its images, nothing else does", "[client][replica]") {
  auto replica = installed_replica(random_words(2));
  std::vector<BucketImage> applied;
  REQUIRE_FALSE(replica.apply(delta_frame(producer(1), 5, {{3, 0xABCD}, {1000, 0}}), &applied));
  CHECK(applied == std::vector<BucketImage>{{3, 0xABCD}, {1000, 0}});
  applied.clear();
  REQUIRE_FALSE(replica.apply(frame(producer(1), v1::FILTER_UPDATE_KIND_HEARTBEAT, 6, 6), &applied));
  CHECK(applied.empty());
  CHECK(replica.apply(delta_frame(producer(1), 6, {{7, 1}, {7, 2}}), &applied)->kind == "DuplicateBucket");
  CHECK(applied.empty());
}

TEST_CASE("replica: a lane of 4 MiB or more is advised for huge pages, as the relay's filter is", "[client][replica]") {
  if (!kernel_has_huge_pages()) KVRELAY_SKIP(kNoHugePages);
  constexpr std::uint64_t kLargeBuckets = std::uint64_t{1} << 19;  // 4 MiB
  const auto identity = producer(1, 1, 0xDC, kLargeBuckets);
  PoolReplica replica(identity, relay_identity());
  const std::vector<std::uint64_t> words(kLargeBuckets, 0x0001000200030004);
  for (const auto& chunk : snapshot_frames(identity, 5, words)) REQUIRE_FALSE(replica.apply(chunk));
  REQUIRE(replica.installed());
  CHECK(std::ranges::equal(replica.words(), words));
  CHECK(advised(replica.words().data()));
  CHECK(advised(&replica.words().back()));
}

TEST_CASE("replica: a delta at or below the installed sequence is ignored as stale", "[client][replica]") {
  auto replica = installed_replica(random_words(2));
  const std::vector<std::uint64_t> before(replica.words().begin(), replica.words().end());
  const std::uint64_t installed = replica.sequence();
  CHECK_FALSE(replica.apply(delta_frame(producer(1), installed - 1, {{3, 1}})));
  CHECK(replica.installed());
  CHECK(replica.sequence() == installed);
  CHECK(replica.stale_deltas() == 1);
  CHECK(std::ranges::equal(replica.words(), before));
  CHECK_FALSE(replica.apply(delta_frame(producer(1), installed, {{3, 1}})));  // the next one applies
  CHECK(replica.sequence() == installed + 1);
  CHECK(replica.words()[3] == 1);
}

TEST_CASE("replica: every fault retires it", "[client][replica]") {
  auto replica = installed_replica(random_words(2));
  SECTION("a sequence gap") { CHECK(fault_kind(replica, delta_frame(producer(1), 6, {{3, 1}})) == "SequenceGap"); }
  SECTION("a heartbeat announcing a later sequence") {
    CHECK(fault_kind(replica, frame(producer(1), v1::FILTER_UPDATE_KIND_HEARTBEAT, 9, 9)) == "SequenceGap");
  }
  SECTION("a corrupt checksum") {
    auto delta = delta_frame(producer(1), 5, {{3, 1}});
    delta.mutable_payload()->back() ^= 0x40;
    CHECK(fault_kind(replica, delta) == "Cbi1:Checksum");
  }
  SECTION("a wrong dc_id in the CBI1 header") {
    CHECK(fault_kind(replica, delta_frame(producer(1), 5, {{3, 1}}, 0xDD)) == "DcIdMismatch");
  }
  SECTION("a contract marker mismatch") {
    auto delta = delta_frame(producer(1), 5, {{3, 1}});
    delta.set_contract_marker(1);
    CHECK(fault_kind(replica, delta) == "ContractMarker");
  }
  SECTION("an unknown frame kind") {
    auto delta = delta_frame(producer(1), 5, {{3, 1}});
    delta.set_kind(static_cast<v1::FilterUpdateKind>(4));
    CHECK(fault_kind(replica, delta) == "FilterUpdateKind");
  }
  SECTION("another producer generation") {
    CHECK(fault_kind(replica, delta_frame(producer(1, 2), 5, {{3, 1}})) == "ProducerIdentityDrift");
  }
  SECTION("another relay incarnation") {
    auto delta = delta_frame(producer(1), 5, {{3, 1}});
    *delta.mutable_relay() = relay_identity(8);
    CHECK(fault_kind(replica, delta) == "RelayIdentityDrift");
  }
  SECTION("an empty delta") { CHECK(fault_kind(replica, delta_frame(producer(1), 5, {})) == "EmptyDelta"); }
  SECTION("one bucket twice in a delta") {
    CHECK(fault_kind(replica, delta_frame(producer(1), 5, {{3, 1}, {3, 2}})) == "DuplicateBucket");
  }
  SECTION("a snapshot chunk after the snapshot") {
    CHECK(fault_kind(replica, snapshot_frames(producer(1), 6, random_words(3))[0]) == "SnapshotAfterInstall");
  }
  CHECK(replica.words().empty());
}

TEST_CASE("replica: nothing but snapshot chunks before the snapshot completes", "[client][replica]") {
  PoolReplica replica(producer(1), relay_identity());
  SECTION("delta") { CHECK(replica.apply(delta_frame(producer(1), 0, {{1, 1}}))->kind == "DeltaBeforeSnapshot"); }
  SECTION("heartbeat") {
    CHECK(replica.apply(frame(producer(1), v1::FILTER_UPDATE_KIND_HEARTBEAT, 0, 0))->kind == "HeartbeatBeforeSnapshot");
  }
  SECTION("a chunk whose epoch is not the frame's sequence") {
    auto chunk = snapshot_frames(producer(1), 4, random_words(4))[0];
    chunk.set_base_sequence(3);
    chunk.set_sequence(3);
    CHECK(replica.apply(chunk)->kind == "EpochMismatch");
  }
  CHECK_FALSE(replica.installed());
}

TEST_CASE("reactions follow the contract's error table, and the status code without a reason", "[client][reaction]") {
  using client::Plane;
  using client::react;
  using client::Retry;
  const grpc::Status exhausted(grpc::StatusCode::RESOURCE_EXHAUSTED, "");
  const grpc::Status precondition(grpc::StatusCode::FAILED_PRECONDITION, "");
  const grpc::Status not_found(grpc::StatusCode::NOT_FOUND, "");
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE, "");
  CHECK(client::parse_reason("RELAY_ERROR_REASON_SUBSCRIBER_LAGGED") == v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED);
  CHECK_FALSE(client::parse_reason("RELAY_ERROR_REASON_UNSPECIFIED"));
  CHECK_FALSE(client::parse_reason("RELAY_ERROR_REASON_FROM_THE_FUTURE"));

  const auto mismatch = react(Plane::kCatalog, precondition, v1::RELAY_ERROR_REASON_CONTRACT_MISMATCH);
  CHECK((mismatch.stop_relay && mismatch.retry == Retry::kNever));
  CHECK(
      react(Plane::kLoad, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, ""), v1::RELAY_ERROR_REASON_INVALID_REQUEST)
          .retry == Retry::kNever);
  const auto unsupported = react(Plane::kPool, precondition, v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE);
  CHECK((unsupported.quarantine_pool && unsupported.retry == Retry::kAwaitNewProducer));
  CHECK(react(Plane::kPool, not_found, v1::RELAY_ERROR_REASON_POOL_NOT_FOUND).retry == Retry::kAwaitNewCatalog);
  CHECK(react(Plane::kPool, precondition, v1::RELAY_ERROR_REASON_PRODUCER_CHANGED).retry == Retry::kAwaitNewProducer);
  CHECK(react(Plane::kPool, precondition, v1::RELAY_ERROR_REASON_INVALID_PUBLICATION).retry ==
        Retry::kAwaitNewProducer);
  for (auto reason : {v1::RELAY_ERROR_REASON_RESOURCE_LIMIT, v1::RELAY_ERROR_REASON_SUBSCRIBER_LAGGED,
                      v1::RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT, v1::RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE,
                      v1::RELAY_ERROR_REASON_INTERNAL}) {
    CHECK(react(Plane::kPool, exhausted, reason).retry == Retry::kBackoff);
    CHECK(react(Plane::kReadiness, exhausted, reason).retry == Retry::kBackoff);
  }
  // No reason (a proxy, an older server, gRPC itself): the status code decides.
  CHECK(react(Plane::kPool, precondition, std::nullopt).retry == Retry::kAwaitNewProducer);
  CHECK(react(Plane::kCatalog, precondition, std::nullopt).retry == Retry::kVerifyRelay);
  CHECK(react(Plane::kPool, not_found, std::nullopt).retry == Retry::kAwaitNewCatalog);
  CHECK(react(Plane::kLoad, unavailable, std::nullopt).retry == Retry::kBackoff);
  CHECK(react(Plane::kLoad, grpc::Status::OK, std::nullopt).retry == Retry::kBackoff);  // a clean end
  // A relay that predates the additive SubscribeServingLoad: that plane stops, as on UNSUPPORTED_FEATURE.
  const grpc::Status unimplemented(grpc::StatusCode::UNIMPLEMENTED, "");
  CHECK(react(Plane::kServingLoad, unimplemented, std::nullopt).retry == Retry::kNever);
  CHECK(react(Plane::kServingLoad, precondition, v1::RELAY_ERROR_REASON_UNSUPPORTED_FEATURE).retry == Retry::kNever);
  CHECK(react(Plane::kLoad, unimplemented, std::nullopt).retry == Retry::kBackoff);
}

TEST_CASE("query: prefix depth under each pool's semantics, with the LoRA salt", "[client][query]") {
  std::vector<std::uint32_t> tokens(64);
  for (std::uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 1000 + i;
  client::PromptHashes prompt(tokens);
  const client::QuerySemantics base{4, hashing::HashFormat::kStandard, ""};
  const client::QuerySemantics lora{4, hashing::HashFormat::kStandard, "tenant-a"};
  const client::QuerySemantics eagle{4, hashing::HashFormat::kEagle, ""};
  REQUIRE(prompt.sequence_hashes(base).size() == 16);
  CHECK(prompt.sequence_hashes(eagle).size() == 15);  // windows of 5 with stride 4
  CHECK(prompt.sequence_hashes(lora)[0] != prompt.sequence_hashes(base)[0]);

  ckf::Filter filter(kBuckets, kSeed);
  const auto hashes = prompt.sequence_hashes(lora);
  std::vector<ckf::BucketWrite> writes;
  for (std::size_t i = 0; i < 9; ++i) REQUIRE(filter.insert(hashes[i], writes) == ckf::InsertOutcome::kInserted);
  REQUIRE(filter.insert(hashes[10], writes) == ckf::InsertOutcome::kInserted);  // a hole at 9
  CHECK(client::prefix_depth(filter.words(), filter.addressing(), hashes) == 9);
  CHECK(client::prefix_depth(filter.words(), filter.addressing(), hashes) == filter.prefix_hits(hashes));
  CHECK(client::prefix_depth(filter.words(), filter.addressing(), prompt.sequence_hashes(base)) == 0);
}

TEST_CASE("query: a request's cache namespace salts its hashes as the blocks stored under it", "[client][query]") {
  std::vector<std::uint32_t> tokens(16);
  for (std::uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 7 * i;
  const client::QuerySemantics lora{4, hashing::HashFormat::kStandard, "tenant-a"};
  client::PromptHashes plain(tokens);
  client::PromptHashes salted(tokens, "tenant-ns");
  // What a pool stores for an event under that namespace and LoRA name.
  hashing::BlockHashOptions stored;
  stored.kv_block_size = 4;
  stored.seed = hashing::block_hash_seed("tenant-a", "tenant-ns");
  const auto expected = hashing::sequence_hashes(hashing::block_hashes(tokens, stored));
  CHECK(std::ranges::equal(salted.sequence_hashes(lora), expected));
  CHECK(plain.sequence_hashes(lora)[0] != expected[0]);
}
