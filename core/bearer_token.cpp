#include "core/bearer_token.hpp"

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

std::string token_of_file(std::string_view content) {
  const auto first = content.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  const auto last = content.find_last_not_of(kWhitespace);
  return std::string(content.substr(first, last - first + 1));
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
