#include "core/bearer_token.hpp"

#include <fmt/format.h>

#include <cctype>

namespace kvrelay::bearer {

namespace {

constexpr std::string_view kWhitespace = " \t\r\n\v\f";
constexpr std::string_view kScheme = "bearer";

bool is_scheme(std::string_view word) {
  if (word.size() != kScheme.size()) return false;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(word[i])) != kScheme[i]) return false;
  }
  return true;
}

}  // namespace

std::expected<std::string, std::string> token_of_file(std::string_view content) {
  const auto first = content.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return std::unexpected("holds no token (it is empty or only whitespace)");
  const auto last = content.find_last_not_of(kWhitespace);
  const std::string_view token = content.substr(first, last - first + 1);
  if (token.size() > kMaxTokenBytes) {
    return std::unexpected(fmt::format("holds a token of {} bytes, more than {}", token.size(), kMaxTokenBytes));
  }
  for (std::size_t i = 0; i < token.size(); ++i) {
    const auto byte = static_cast<unsigned char>(token[i]);
    if (kWhitespace.find(token[i]) != std::string_view::npos) {
      const bool line_break = token[i] == '\n' || token[i] == '\r';
      return std::unexpected(fmt::format("holds whitespace inside its token (at byte {}{})", i,
                                         line_break ? ": is it on two lines?" : ""));
    }
    if (byte < 0x21 || byte > 0x7e) {
      return std::unexpected(fmt::format(
          "holds a byte no client can send in its token (0x{:02x} at byte {}: visible ASCII only)", byte, i));
    }
  }
  return std::string(token);
}

std::string metadata_value(std::string_view token) { return "Bearer " + std::string(token); }

std::optional<std::string_view> token_of_metadata(std::string_view value) {
  const auto space = value.find(' ');
  if (space == std::string_view::npos || !is_scheme(value.substr(0, space))) return std::nullopt;
  const std::string_view token = value.substr(space + 1);
  if (token.empty() || token.find_first_of(kWhitespace) != std::string_view::npos) return std::nullopt;
  return token;
}

bool same_token(std::string_view presented, std::string_view expected) {
  if (expected.empty()) return false;  // never configured: the relay refuses to start without a token
  // Every byte of `presented` is compared (against `expected` cycled), and the differences
  // are accumulated without branching, so no early exit reveals a matching prefix.
  unsigned char difference = presented.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < presented.size(); ++i) {
    difference |= static_cast<unsigned char>(presented[i] ^ expected[i % expected.size()]);
  }
  return difference == 0;
}

}  // namespace kvrelay::bearer
