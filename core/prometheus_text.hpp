#pragma once
// The Prometheus text exposition format (0.0.4), as engines serve it on /metrics: the samples
// of a page, for reading engine load from it (docs/protocol/decisions.md#d26). Comments (HELP,
// TYPE and any other), blank lines and CRLF line ends are accepted and dropped; an OpenMetrics
// `# EOF` ends the page (the rest of OpenMetrics, exemplars and timestamps in seconds, is not
// read: such a page is refused). Families are not interpreted: samples are kept in page order,
// every one or those a reader names.
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvrelay::prometheus_text {

struct Sample {
  std::string name;                                         // incl. any suffix (foo_total, foo_bucket)
  std::vector<std::pair<std::string, std::string>> labels;  // unescaped values, in page order
  double value = 0;                                         // NaN, +Inf and -Inf included
  std::optional<std::int64_t> timestamp_ms;

  // nullptr when the sample has no such label.
  const std::string* label(std::string_view key) const;
};

struct Page {
  std::vector<Sample> samples;
};

// Bounds on untrusted input: an engine page has tens of labels per sample at most and a few
// thousand samples. Past either, the page is refused, before its size can cost quadratic time
// (duplicate label checks) or memory.
inline constexpr std::size_t kMaxLabelsPerSample = 32;
inline constexpr std::size_t kMaxSamplesPerPage = 100'000;

// Which samples a reader keeps, by metric name (suffix included). Every line is still read and
// checked, and counts toward kMaxSamplesPerPage, but only the kept samples take memory.
using KeepSample = std::function<bool(std::string_view name)>;

// The page, or why it is not one ("line 12: ...", lines counted from 1). Without `keep`, every
// sample is kept.
std::expected<Page, std::string> parse(std::string_view text, const KeepSample& keep = {});

}  // namespace kvrelay::prometheus_text
