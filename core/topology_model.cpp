#include "core/topology_model.hpp"

#include <stdexcept>

namespace kvrelay {

// Exact values, never bit containment: Aggregated (3) is its own role, not P + D.
namespace {

std::string escaped_part(const std::string& part) {
  std::string out;
  out.reserve(part.size());
  for (const char c : part) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EndpointKey::label() const {
  return escaped_part(ns) + "/" + escaped_part(component) + "/" + escaped_part(endpoint);
}

Role role_of(std::optional<WorkerType> worker_type) {
  if (!worker_type) return Role::kLegacy;
  switch (*worker_type) {
    case WorkerType::kPrefill:
      return Role::kPrefill;
    case WorkerType::kDecode:
      return Role::kDecode;
    case WorkerType::kEncode:
      return Role::kEncode;
    case WorkerType::kAggregated:
      return Role::kAggregated;
  }
  // Card parsing only produces the four canonical values; anything else is a caller bug.
  throw std::logic_error("non-canonical worker_type");
}

}  // namespace kvrelay
