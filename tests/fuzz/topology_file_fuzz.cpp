// The static topology file loader (ingest/topology_file.hpp): the input is the file's text, YAML
// or JSON, converted to JSON, parsed as kvrelay.ingest.v1.TopologyFile and checked as the relay
// checks it at start (core/ingest_validation.hpp). Whatever YAML it reads, the conversion must
// produce a JSON document (or an error).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "core/ingest_validation.hpp"
#include "ingest/topology_file.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;

namespace {

// The conversion copies a scalar's bytes as they are, so a file that is not UTF-8 converts to JSON
// that is not either; the protobuf JSON parser refuses that ("non UTF-8 code points"), so only the
// structure of the JSON is the conversion's to get right.
bool is_utf8(const std::string& json) {
  try {
    (void)nlohmann::json(json).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::silence_protobuf_logs();
  const std::string text(fuzz::as_text(data, size));
  if (const auto json = yaml_to_json(text); json && is_utf8(*json)) {
    require(nlohmann::json::accept(*json), "YAML converts to a JSON document");
  }
  if (const auto file = parse_topology(text)) {
    if (const auto problem = ingest_check::topology_file(*file)) require(!problem->empty(), "a problem says what");
  }
  return 0;
}
