#pragma once
// Access to tests/data/ckf_vectors.json, the reference model's vectors (a copy of
// shared/spec/reference/vectors.json, so the suite passes in a plain clone).
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvrelay::test {

inline const nlohmann::json& vectors() {
  static const nlohmann::json parsed = [] {
    std::ifstream in(std::string(KVRELAY_TEST_DATA_DIR) + "/ckf_vectors.json");
    if (!in) throw std::runtime_error("cannot open tests/data/ckf_vectors.json");
    return nlohmann::json::parse(in);
  }();
  return parsed;
}

// The vectors of one section, of which there must be some: a loop over a missing or empty
// section would pass having checked nothing.
inline const nlohmann::json& vector_cases(const nlohmann::json& parent, const std::string& name) {
  const nlohmann::json& section = parent.at(name);  // throws for a missing section
  if (section.empty()) throw std::runtime_error("the vectors' section " + name + " is empty");
  return section;
}
inline const nlohmann::json& vector_cases(const std::string& name) { return vector_cases(vectors(), name); }

// "0x..." hex strings or plain JSON numbers.
inline std::uint64_t u64(const nlohmann::json& value) {
  if (value.is_string()) return std::stoull(value.get<std::string>(), nullptr, 16);
  return value.get<std::uint64_t>();
}

inline std::vector<std::uint64_t> u64_list(const nlohmann::json& values) {
  std::vector<std::uint64_t> out;
  for (const auto& value : values) out.push_back(u64(value));
  return out;
}

inline std::string from_hex(const std::string& hex) {
  std::string bytes(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return bytes;
}

inline std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

}  // namespace kvrelay::test
