#pragma once
// An ingest call refused by the actor that holds the state it would grow: a count limit
// (docs/protocol/limits.md#count-limits). It answers the request with an error of its own
// category, which the gateway turns into RESOURCE_EXHAUSTED with its message, and tells apart
// from an actor that could not answer (UNAVAILABLE).
#include <caf/all.hpp>

#include <optional>
#include <string>

namespace kvrelay {

inline constexpr caf::atom_value kIngestRefusalCategory = caf::atom("ingestlim");

inline caf::error ingest_refusal(std::string message) {
  return caf::error(1, kIngestRefusalCategory, caf::make_message(std::move(message)));
}

// The refusal's message, or nullopt when `error` is not a refusal.
inline std::optional<std::string> ingest_refusal_message(const caf::error& error) {
  if (error.category() != kIngestRefusalCategory || !error.context().match_elements<std::string>()) {
    return std::nullopt;
  }
  return error.context().get_as<std::string>(0);
}

}  // namespace kvrelay
