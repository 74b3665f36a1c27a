#pragma once
// The message-level check shared by the revisioned planes (catalog, readiness): a valid
// envelope and keys, and, within one stream, a revision that never goes back (heartbeats
// repeat it; coalesced notifications may skip some).
#include <fmt/format.h>

#include <string_view>

#include "client/lib/fault.hpp"

namespace kvrelay::client {

template <class Update>
Applied check_revisioned(const Update& update, bool valid, std::uint64_t revision, std::string_view plane) {
  if (auto error = wire::check_response(update)) return fault_of(*error);
  if (valid && update.revision() < revision) {
    return Fault{"RevisionRegressed", fmt::format("{} revision went back from {} to {}", plane, revision, update.revision())};
  }
  return std::nullopt;
}

}  // namespace kvrelay::client
