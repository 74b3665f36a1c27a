#pragma once
// The static topology file: kvrelay.ingest.v1.TopologyFile written as YAML or JSON with the
// protobuf JSON field names. YAML is read by converting it to JSON; a quoted YAML scalar is
// always a string, a plain one may be a number or a boolean.
#include <expected>
#include <string>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay {

std::expected<::kvrelay::ingest::v1::TopologyFile, std::string> parse_topology(const std::string& text);
std::expected<::kvrelay::ingest::v1::TopologyFile, std::string> load_topology_file(const std::string& path);

// YAML (a superset of JSON) to a JSON document.
std::expected<std::string, std::string> yaml_to_json(const std::string& yaml);

}  // namespace kvrelay
