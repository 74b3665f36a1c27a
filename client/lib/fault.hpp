#pragma once
// Why a consumer stopped trusting part of its state. `kind` is a short stable token for
// counters and tests ("FilterSequence", "SequenceGap", "Cbi1:Checksum"); `detail` is for people.
#include <optional>
#include <string>

#include "core/wire_validation.hpp"

namespace kvrelay::client {

namespace v1 = ::dynamo::kvrelay::v1;

struct Fault {
  std::string kind;
  std::string detail;
};

// nullopt = applied.
using Applied = std::optional<Fault>;

inline Fault fault_of(const wire::Error& error) {
  return {std::string(wire::to_string(error.code)), error.field + ": " + error.message};
}

}  // namespace kvrelay::client
