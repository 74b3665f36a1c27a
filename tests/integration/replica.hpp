#pragma once
// A minimal consumer replica for tests: installs a snapshot, applies contiguous deltas, and
// hashes its buckets the way GetState's filter_digest does.
#include <catch2/catch.hpp>

#include "core/cbi1.hpp"
#include "core/xxh3.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::test {

class Replica {
 public:
  explicit Replica(const dynamo::kvrelay::v1::ProducerIdentity& producer)
      : format_{producer.ckf_format().seed(), producer.ckf_format().bucket_count()},
        dc_id_(producer.pool_id().dc_id()),
        assembly_(format_.bucket_count) {}

  // Applies one frame; REQUIREs it to be a valid continuation.
  void apply(const dynamo::kvrelay::v1::FilterUpdate& update) {
    using dynamo::kvrelay::v1::FilterUpdateKind;
    if (update.kind() == dynamo::kvrelay::v1::FILTER_UPDATE_KIND_HEARTBEAT) return;
    const auto decoded = cbi1::decode(update.payload(), format_);
    INFO((decoded ? "" : std::string(cbi1::to_string(decoded.error().kind))));
    REQUIRE(decoded.has_value());
    const auto& header = std::visit([](const auto& d) -> const cbi1::Header& { return d.header; }, *decoded);
    REQUIRE(header.dc_id == dc_id_);
    REQUIRE(header.epoch == update.sequence());
    if (update.kind() == dynamo::kvrelay::v1::FILTER_UPDATE_KIND_SNAPSHOT_CHUNK) {
      REQUIRE(update.base_sequence() == update.sequence());
      auto outcome = assembly_.absorb(*decoded);
      REQUIRE(outcome.has_value());
      if (*outcome) {
        words_ = std::move((*outcome)->words);
        sequence_ = (*outcome)->epoch;
        installed_ = true;
      }
      return;
    }
    REQUIRE(installed_);
    const auto& delta = std::get<cbi1::DecodedDelta>(*decoded);
    REQUIRE(update.base_sequence() == sequence_);
    REQUIRE(delta.base_epoch == sequence_);
    REQUIRE(update.sequence() == sequence_ + 1);
    REQUIRE_FALSE(delta.images.empty());
    for (const auto& image : delta.images) words_[image.bucket] = image.word;
    sequence_ = update.sequence();
  }

  bool installed() const { return installed_; }
  std::uint64_t sequence() const { return sequence_; }
  std::uint64_t digest() const { return xxh3(words_.data(), words_.size() * 8, 0); }
  const RandomAccessWords& words() const { return words_; }

 private:
  cbi1::FilterFormat format_;
  std::uint64_t dc_id_;
  cbi1::SnapshotAssembly assembly_;
  RandomAccessWords words_;
  std::uint64_t sequence_ = 0;
  bool installed_ = false;
};

}  // namespace kvrelay::test
