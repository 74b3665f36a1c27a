#include "core/unicode_text.hpp"

namespace kvrelay::text {

// protobuf rejects invalid UTF-8 in proto3 strings on parse, but a message built in memory is
// not parsed, so the validators must not assume it.
std::optional<std::u32string> decode_utf8(std::string_view text) {
  std::u32string code_points;
  code_points.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    char32_t code_point = 0;
    char32_t smallest = 0;  // below this the encoding is overlong
    if (lead < 0x80) {
      length = 1, code_point = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, code_point = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code_point = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code_point = lead & 0x07, smallest = 0x10000;
    } else {
      return std::nullopt;
    }
    if (text.size() - i < length) return std::nullopt;
    for (std::size_t k = 1; k < length; ++k) {
      const auto continuation = static_cast<unsigned char>(text[i + k]);
      if ((continuation & 0xC0) != 0x80) return std::nullopt;
      code_point = (code_point << 6) | (continuation & 0x3F);
    }
    const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
    if (code_point < smallest || code_point > 0x10FFFF || surrogate) return std::nullopt;
    code_points.push_back(code_point);
    i += length;
  }
  return code_points;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_control(char32_t c) { return c <= 0x1F || (c >= 0x7F && c <= 0x9F); }

bool is_valid_text(std::string_view text) {
  const auto code_points = decode_utf8(text);
  if (!code_points || code_points->empty()) return false;
  // Equal to its trimmed form <=> neither end is whitespace (an all-space string fails too).
  return !is_white_space(code_points->front()) && !is_white_space(code_points->back());
}

}  // namespace kvrelay::text
