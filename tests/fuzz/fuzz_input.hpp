#pragma once
// What every harness shares: cutting one fuzz input into records, and failing loudly when the
// code under test breaks one of its own invariants (a finding, reported as a crash).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <source_location>
#include <string_view>
#include <vector>

#include <google/protobuf/stubs/logging.h>

namespace kvrelay::fuzz {

// Between the records (frames, batches, messages) of a multi-record input. 0xC1 is the one byte
// msgpack never uses, and four in a row are rare in protobuf and CBI1 bytes, so a seed's records
// stay whole while the fuzzer can still splice, drop or repeat them.
inline constexpr std::string_view kRecordSeparator = "\xC1\xC1\xC1\xC1";
// Enough records for a snapshot followed by deltas, few enough that one input stays fast.
inline constexpr std::size_t kMaxRecords = 64;

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline std::vector<std::string_view> records_of(std::string_view input) {
  std::vector<std::string_view> records;
  while (records.size() < kMaxRecords) {
    const std::size_t end = input.find(kRecordSeparator);
    records.push_back(input.substr(0, end));
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kRecordSeparator.size());
  }
  return records;
}

// Protobuf logs every string field that is not UTF-8 as it refuses the message: noise that would
// bury the fuzzer's own output, and most of its time.
inline void silence_protobuf_logs() {
  static const bool silenced = (google::protobuf::SetLogHandler(nullptr), true);
  (void)silenced;
}

// abort() rather than an exception: the harness must not swallow it, and libFuzzer saves the
// input that got here.
inline void require(bool holds, const char* what, std::source_location where = std::source_location::current()) {
  if (holds) return;
  std::fprintf(stderr, "%s:%u: invariant violated: %s\n", where.file_name(), static_cast<unsigned>(where.line()), what);
  std::abort();
}

}  // namespace kvrelay::fuzz
