#pragma once
// UTF-8 and the Unicode properties the contract's text rules use: strict decoding, White_Space
// (what Rust's str::trim removes, as upstream trims) and the control characters (category Cc).
#include <optional>
#include <string>
#include <string_view>

namespace kvrelay::text {

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF; nullopt
// for anything else.
std::optional<std::u32string> decode_utf8(std::string_view text);

// The Unicode White_Space property.
bool is_white_space(char32_t c);

// General category Cc: C0 controls, DEL and C1 controls.
bool is_control(char32_t c);

// Non-empty, valid UTF-8, and equal to its own White_Space-trimmed form.
bool is_valid_text(std::string_view text);

}  // namespace kvrelay::text
