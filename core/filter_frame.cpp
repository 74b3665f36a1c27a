#include "core/filter_frame.hpp"

#include <chrono>

#include "core/wire_validation.hpp"

namespace kvrelay::wire {

namespace {

// Protobuf wire types (the low three bits of a field's tag).
constexpr std::uint32_t kVarint = 0;
constexpr std::uint32_t kLengthDelimited = 2;
constexpr std::uint32_t kFixed32 = 5;

// Appends `value` as a base-128 varint; returns the bytes written.
template <class Out>
std::size_t put_varint(Out out, std::uint64_t value) {
  std::size_t written = 0;
  while (value >= 0x80) {
    out[written++] = static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out[written++] = static_cast<char>(value);
  return written;
}

std::uint64_t tag(std::uint32_t field, std::uint32_t wire_type) { return (std::uint64_t{field} << 3) | wire_type; }

void append_varint(std::string& out, std::uint64_t value) {
  char bytes[10];
  out.append(bytes, put_varint(bytes, value));
}

void append_message(std::string& out, std::uint32_t field, const google::protobuf::MessageLite& message) {
  append_varint(out, tag(field, kLengthDelimited));
  const std::string bytes = message.SerializeAsString();
  append_varint(out, bytes.size());
  out += bytes;
}

std::string encode_trailer() {
  std::string out;
  append_varint(out, tag(127, kFixed32));
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>((kContractMarker >> shift) & 0xFF));
  return out;
}

}  // namespace

std::shared_ptr<const std::string> encode_frame_identity(const v1::RelayIdentity& relay,
                                                         const v1::ProducerIdentity& producer) {
  std::string out;
  append_varint(out, tag(1, kVarint));
  append_varint(out, kProtocolVersion);
  append_message(out, 2, relay);
  append_message(out, 3, producer);
  return std::make_shared<const std::string>(std::move(out));
}

FilterFrame::FilterFrame(std::shared_ptr<const std::string> identity, const FilterFrameFields& fields,
                         std::shared_ptr<const std::string> payload)
    : identity_(std::move(identity)), fields_(fields), payload_(std::move(payload)) {
  if (payload_ && payload_->empty()) payload_.reset();
  std::size_t at = 0;
  // proto3: a zero scalar is not on the wire.
  const auto put_field = [&](std::uint32_t field, std::uint64_t value) {
    if (value == 0) return;
    at += put_varint(header_.data() + at, tag(field, kVarint));
    at += put_varint(header_.data() + at, value);
  };
  put_field(4, fields_.base_sequence);
  put_field(5, fields_.sequence);
  put_field(6, fields_.send_ts_us);
  put_field(7, static_cast<std::uint64_t>(static_cast<std::int64_t>(fields_.kind)));
  if (payload_) {
    at += put_varint(header_.data() + at, tag(8, kLengthDelimited));
    at += put_varint(header_.data() + at, payload_->size());
  }
  header_size_ = static_cast<std::uint8_t>(at);
}

FilterFrame FilterFrame::stamped(std::uint64_t send_ts_us) const {
  FilterFrameFields fields = fields_;
  fields.send_ts_us = send_ts_us;
  return FilterFrame(identity_, fields, payload_);
}

std::uint64_t wall_clock_us() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count();
  return us < 0 ? 0 : static_cast<std::uint64_t>(us);
}

std::string_view FilterFrame::trailer_bytes() const {
  static const std::string trailer = encode_trailer();
  return trailer;
}

std::size_t FilterFrame::size() const {
  return identity_bytes().size() + header_size_ + payload().size() + trailer_bytes().size();
}

std::string FilterFrame::serialize() const {
  std::string out;
  out.reserve(size());
  out.append(identity_bytes()).append(header_bytes()).append(payload()).append(trailer_bytes());
  return out;
}

}  // namespace kvrelay::wire
