#pragma once
// Untrusted text (an engine's event tag, a metrics page's token) shown in an error message:
// quoted, cut short and with control and non-ASCII bytes escaped, so that one message can
// neither flood a log line nor forge one.
#include <cstddef>
#include <string>
#include <string_view>

namespace kvrelay {

inline constexpr std::size_t kMaxQuotedBytes = 40;

// "text", or "first 40 bytes..." past that; a byte outside printable ASCII as \xNN.
std::string quoted_excerpt(std::string_view text);

// `text` with its control bytes (line breaks, escapes, DEL) as \xNN, so that it stays one log
// line whatever it quotes; other bytes, UTF-8 included, unchanged.
std::string one_line(std::string_view text);

}  // namespace kvrelay
