#pragma once
// The message-level check shared by the revisioned planes (catalog, readiness): a valid
// envelope and keys, and, within one stream, a revision that never goes back (coalesced
// notifications may skip some) and that changes whenever the content does: heartbeats repeat
// the installed revision with the same content (docs/protocol/decisions.md#d23).
#include <fmt/format.h>
#include <google/protobuf/util/message_differencer.h>

#include <string_view>

#include "client/lib/fault.hpp"

namespace kvrelay::client {

// The content a revision versions: everything but the envelope (marker, protocol version,
// relay identity — a new identity invalidates the planes before this is asked) and the
// revision itself. The updates carry no send time or other field that changes between heartbeats.
template <class Update>
bool same_content(const Update& a, const Update& b) {
  google::protobuf::util::MessageDifferencer differencer;
  const auto* fields = Update::descriptor();
  for (const char* name : {"protocol_version", "relay", "revision", "contract_marker"}) {
    differencer.IgnoreField(fields->FindFieldByName(name));
  }
  return differencer.Compare(a, b);
}

// `installed` is the update the plane holds, null while it holds none (the first snapshot of
// a stream is taken as is).
template <class Update>
Applied check_revisioned(const Update& update, const Update* installed, std::string_view plane) {
  if (auto error = wire::check_response(update)) return fault_of(*error);
  if (installed == nullptr) return std::nullopt;
  const std::uint64_t revision = installed->revision();
  if (update.revision() < revision) {
    return Fault{"RevisionRegressed",
                 fmt::format("{} revision went back from {} to {}", plane, revision, update.revision())};
  }
  if (update.revision() == revision && !same_content(update, *installed)) {
    return Fault{"RevisionNotAdvanced", fmt::format("{} changed without advancing its revision {}", plane, revision)};
  }
  return std::nullopt;
}

}  // namespace kvrelay::client
