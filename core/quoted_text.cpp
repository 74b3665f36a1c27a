#include "core/quoted_text.hpp"

#include <fmt/format.h>

namespace kvrelay {

namespace {

bool is_control(unsigned char byte) { return byte < 0x20 || byte == 0x7f; }

// Appends `text`, each byte for which `escape` holds written as \xNN.
template <class Escape>
void append_escaped(std::string& out, std::string_view text, Escape escape) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (escape(byte)) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
}

}  // namespace

std::string quoted_excerpt(std::string_view text) {
  std::string out = "\"";
  append_escaped(out, text.substr(0, kMaxQuotedBytes),
                 [](unsigned char byte) { return is_control(byte) || byte > 0x7f || byte == '"' || byte == '\\'; });
  out += text.size() > kMaxQuotedBytes ? "...\"" : "\"";
  return out;
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_escaped(out, text, is_control);
  return out;
}

}  // namespace kvrelay
