#include "core/quoted_text.hpp"

#include <fmt/format.h>

namespace kvrelay {

std::string quoted_excerpt(std::string_view text) {
  const bool cut = text.size() > kMaxQuotedBytes;
  std::string out = "\"";
  for (const char c : text.substr(0, kMaxQuotedBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '"' || c == '\\') {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  out += cut ? "...\"" : "\"";
  return out;
}

}  // namespace kvrelay
