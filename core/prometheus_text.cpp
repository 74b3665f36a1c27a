#include "core/prometheus_text.hpp"

#include <algorithm>
#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "core/quoted_text.hpp"

namespace kvrelay::prometheus_text {

namespace {

using Failure = std::unexpected<std::string>;

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool starts_label_name(char c) { return is_letter(c) || c == '_'; }
bool continues_label_name(char c) { return starts_label_name(c) || is_digit(c); }
bool starts_metric_name(char c) { return starts_label_name(c) || c == ':'; }
bool continues_metric_name(char c) { return continues_label_name(c) || c == ':'; }

// Leading and trailing blanks are not part of a line, nor the '\r' of a CRLF line end.
std::string_view trimmed(std::string_view line) {
  while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
  while (!line.empty() && (is_blank(line.back()) || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

// Reads one sample line left to right.
class Cursor {
 public:
  explicit Cursor(std::string_view line) : rest_(line) {}

  bool done() const { return rest_.empty(); }
  std::string_view rest() const { return rest_; }
  bool next_is(char c) const { return !rest_.empty() && rest_.front() == c; }
  bool next_is_blank() const { return !rest_.empty() && is_blank(rest_.front()); }
  void advance(std::size_t n) { rest_.remove_prefix(n); }

  bool skip(char c) {
    if (!next_is(c)) return false;
    rest_.remove_prefix(1);
    return true;
  }

  void skip_blanks() {
    while (next_is_blank()) rest_.remove_prefix(1);
  }

  // The name at the cursor, empty when none starts there.
  template <typename Starts, typename Continues>
  std::string_view take_name(Starts starts, Continues continues) {
    if (rest_.empty() || !starts(rest_.front())) return {};
    std::size_t length = 1;
    while (length < rest_.size() && continues(rest_[length])) ++length;
    return take(length);
  }

  // Everything up to the next blank.
  std::string_view take_token() {
    const auto blank = std::find_if(rest_.begin(), rest_.end(), is_blank);
    return take(static_cast<std::size_t>(blank - rest_.begin()));
  }

 private:
  std::string_view take(std::size_t length) {
    const std::string_view taken = rest_.substr(0, length);
    rest_.remove_prefix(length);
    return taken;
  }

  std::string_view rest_;
};

// `text` starts just after a label value's opening quote. Writes the unescaped value and returns
// how many characters the value spans, closing quote included. The format knows three escapes.
std::expected<std::size_t, std::string> unescape_label_value(std::string_view text, std::string& value) {
  value.clear();
  for (std::size_t from = 0;;) {
    const std::size_t stop = text.find_first_of("\"\\", from);
    if (stop == std::string_view::npos || (text[stop] == '\\' && stop + 1 == text.size())) {
      return Failure("a label value has no closing quote");
    }
    value.append(text.substr(from, stop - from));
    if (text[stop] == '"') return stop + 1;
    switch (const char escaped = text[stop + 1]) {
      case '\\':
      case '"':
        value.push_back(escaped);
        break;
      case 'n':
        value.push_back('\n');
        break;
      default:
        return Failure(fmt::format("unknown escape \\{} in a label value", escaped));
    }
    from = stop + 2;
  }
}

// After the '{': the label pairs up to the '}'. Exporters may leave a comma after the last pair.
std::expected<void, std::string> read_labels(Cursor& cursor, Sample& sample) {
  for (;;) {
    cursor.skip_blanks();
    if (cursor.skip('}')) return {};
    const std::string_view name = cursor.take_name(starts_label_name, continues_label_name);
    if (name.empty()) return Failure(fmt::format("expected a label name or '}}' at {}", quoted_excerpt(cursor.rest())));
    if (sample.labels.size() == kMaxLabelsPerSample) {
      return Failure(fmt::format("sample {} has more than {} labels", sample.name, kMaxLabelsPerSample));
    }
    if (sample.label(name) != nullptr) return Failure(fmt::format("label {} appears twice", name));
    cursor.skip_blanks();
    if (!cursor.skip('=')) return Failure(fmt::format("expected '=' after label {}", name));
    cursor.skip_blanks();
    if (!cursor.skip('"')) return Failure(fmt::format("the value of label {} is not quoted", name));
    auto& [key, value] = sample.labels.emplace_back(std::string(name), std::string());
    const auto spanned = unescape_label_value(cursor.rest(), value);
    if (!spanned) return Failure(spanned.error());
    cursor.advance(*spanned);
    cursor.skip_blanks();
    if (!cursor.skip(',') && !cursor.next_is('}')) {
      return Failure(fmt::format("expected ',' or '}}' after the value of label {}", key));
    }
  }
}

// The format takes values as Go's ParseFloat does: decimal or exponent notation, and NaN or Inf
// in any case with an optional sign. from_chars knows all but the leading '+'.
std::expected<double, std::string> parse_value(std::string_view token) {
  std::string_view number = token;
  if (number.size() > 1 && number[0] == '+' && number[1] != '+' && number[1] != '-') number.remove_prefix(1);
  double value = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (error == std::errc::result_out_of_range)
    return Failure(fmt::format("value {} is out of range", quoted_excerpt(token)));
  if (error != std::errc() || end != number.data() + number.size()) {
    return Failure(fmt::format("value {} is not a number", quoted_excerpt(token)));
  }
  return value;
}

// Milliseconds since the epoch, an integer (Go's ParseInt: optional sign, decimal digits).
std::expected<std::int64_t, std::string> parse_timestamp(std::string_view token) {
  std::string_view number = token;
  if (number.size() > 1 && number[0] == '+' && is_digit(number[1])) number.remove_prefix(1);
  std::int64_t ms = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), ms);
  if (error != std::errc() || end != number.data() + number.size()) {
    return Failure(fmt::format("timestamp {} is not an integer of milliseconds", quoted_excerpt(token)));
  }
  return ms;
}

// metric_name [ "{" label pairs "}" ] value [ timestamp ], on a trimmed, non-empty line.
std::expected<void, std::string> read_sample(std::string_view line, Sample& sample) {
  Cursor cursor(line);
  const std::string_view name = cursor.take_name(starts_metric_name, continues_metric_name);
  if (name.empty()) return Failure(fmt::format("expected a metric name at {}", quoted_excerpt(line)));
  if (!cursor.done() && !cursor.next_is_blank() && !cursor.next_is('{')) {
    return Failure(fmt::format("unexpected {} after metric name {}", quoted_excerpt(cursor.rest().substr(0, 1)), name));
  }
  sample.name = name;
  sample.labels.clear();  // a sample read into again starts empty
  sample.timestamp_ms.reset();
  cursor.skip_blanks();
  if (cursor.skip('{')) {
    if (auto labels = read_labels(cursor, sample); !labels) return labels;
    cursor.skip_blanks();
  }
  if (cursor.done()) return Failure(fmt::format("sample {} has no value", name));
  const auto value = parse_value(cursor.take_token());
  if (!value) return Failure(value.error());
  sample.value = *value;
  cursor.skip_blanks();
  if (cursor.done()) return {};
  const auto timestamp = parse_timestamp(cursor.take_token());
  if (!timestamp) return Failure(timestamp.error());
  sample.timestamp_ms = *timestamp;
  cursor.skip_blanks();
  if (!cursor.done()) return Failure(fmt::format("unexpected {} after the timestamp", quoted_excerpt(cursor.rest())));
  return {};
}

// Cuts the first line off `rest`, without its '\n'.
std::string_view next_line(std::string_view& rest) {
  const std::size_t end = rest.find('\n');
  const std::string_view line = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  return line;
}

}  // namespace

const std::string* Sample::label(std::string_view key) const {
  for (const auto& [name, value] : labels) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::expected<Page, std::string> parse(std::string_view text, const KeepSample& keep) {
  Page page;
  if (!keep) {
    // At most one sample a line: one allocation for the vector instead of a doubling series.
    const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    page.samples.reserve(std::min(lines, kMaxSamplesPerPage));
  }
  Sample unkept;  // where a sample is read before `keep` sees it, reused line after line
  std::size_t samples = 0;
  std::size_t line_number = 0;
  for (std::string_view rest = text; !rest.empty();) {
    const std::string_view line = trimmed(next_line(rest));
    ++line_number;
    if (line.empty()) continue;
    if (line.front() == '#') {
      if (line == "# EOF") break;  // OpenMetrics: the end of the exposition
      continue;                    // HELP, TYPE or a plain comment: nothing the samples need
    }
    if (samples++ == kMaxSamplesPerPage) {
      return std::unexpected(
          fmt::format("line {}: the page has more than {} samples", line_number, kMaxSamplesPerPage));
    }
    Sample& sample = keep ? unkept : page.samples.emplace_back();
    if (auto read = read_sample(line, sample); !read) {
      return std::unexpected(fmt::format("line {}: {}", line_number, read.error()));
    }
    if (keep && keep(sample.name)) page.samples.push_back(std::move(sample));
  }
  return page;
}

}  // namespace kvrelay::prometheus_text
