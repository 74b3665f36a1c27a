#include "core/topology_model.hpp"

#include <stdexcept>

namespace kvrelay {

// Exact values, never bit containment: Aggregated (3) is its own role, not P + D.
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
