#pragma once
// One FilterUpdate frame as the bytes of its serialization, in pieces that many streams share
// (docs/protocol/rpcs.md#filter-frames, docs/architecture.md#one-serialization-per-frame).
//
// A pool's streams all send the same delta payload, and each stream sends its own
// `send_ts_us`. Serializing a whole FilterUpdate per stream copies the payload twice per
// stream (into the message, then into the wire buffer); a FilterFrame is instead
//
//   identity  fields 1-3 (protocol version, relay, producer): encoded once per stream
//   header    fields 4-7 and field 8's tag and length: a few dozen bytes, per frame
//   payload   field 8's bytes: the publisher's one copy, shared by every stream
//   trailer   field 127 (the contract marker): a constant
//
// Their concatenation is byte for byte what FilterUpdate::SerializeAsString() gives for the
// same fields (fields in number order, proto3 zero values omitted), so a transport may send
// the pieces without joining them and any protobuf reader parses a FilterUpdate.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::wire {

namespace v1 = ::dynamo::kvrelay::v1;

// Fields 1-3 of every frame of one stream: the protocol version, relay and producer.
std::shared_ptr<const std::string> encode_frame_identity(const v1::RelayIdentity& relay,
                                                         const v1::ProducerIdentity& producer);

// Wall-clock microseconds since the Unix epoch (0 before it): what a frame's send_ts_us holds.
std::uint64_t wall_clock_us();

struct FilterFrameFields {
  v1::FilterUpdateKind kind = v1::FILTER_UPDATE_KIND_UNSPECIFIED;
  std::uint64_t base_sequence = 0;
  std::uint64_t sequence = 0;
  std::uint64_t send_ts_us = 0;  // when the transport hands the frame on: see stamped()
};

class FilterFrame {
 public:
  // `identity` comes from encode_frame_identity; `payload` may be null (no payload).
  FilterFrame(std::shared_ptr<const std::string> identity, const FilterFrameFields& fields,
              std::shared_ptr<const std::string> payload);

  v1::FilterUpdateKind kind() const { return fields_.kind; }
  std::uint64_t base_sequence() const { return fields_.base_sequence; }
  std::uint64_t sequence() const { return fields_.sequence; }
  std::uint64_t send_ts_us() const { return fields_.send_ts_us; }
  std::string_view payload() const { return payload_ ? std::string_view(*payload_) : std::string_view(); }

  // The same frame sent at `send_ts_us`: a frame waits in its stream's queue, and its send time
  // is when it leaves it. The header is rebuilt; identity and payload stay shared.
  FilterFrame stamped(std::uint64_t send_ts_us) const;

  // The serialization's pieces in order (any may be empty), and what keeps the shared ones alive.
  std::string_view identity_bytes() const { return *identity_; }
  std::string_view header_bytes() const { return {header_.data(), header_size_}; }
  std::string_view trailer_bytes() const;
  const std::shared_ptr<const std::string>& shared_identity() const { return identity_; }
  const std::shared_ptr<const std::string>& shared_payload() const { return payload_; }

  std::size_t size() const;
  // The pieces joined: one FilterUpdate's serialization (for tests and in-process readers).
  std::string serialize() const;

 private:
  // Fields 4-7 as 1-byte tags with varints of at most 10 bytes, field 8's tag and length.
  static constexpr std::size_t kMaxHeaderBytes = 4 * 11 + 6;

  std::shared_ptr<const std::string> identity_;
  FilterFrameFields fields_;
  std::shared_ptr<const std::string> payload_;
  std::array<char, kMaxHeaderBytes> header_{};
  std::uint8_t header_size_ = 0;
};

}  // namespace kvrelay::wire
