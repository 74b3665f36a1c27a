#include "ingest/topology_file.hpp"

#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace kvrelay {

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool plain_number(const std::string& text) {
  std::size_t i = 0;
  auto digits = [&] {
    const std::size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i > start;
  };
  if (i < text.size() && text[i] == '-') ++i;
  if (i < text.size() && text[i] == '0') {
    ++i;
  } else if (i >= text.size() || text[i] == '0' || !digits()) {
    return false;
  }
  if (i < text.size() && text[i] == '.' && (++i, !digits())) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == text.size();
}

// Aliases let a few bytes of YAML stand for any number of copies of a node (a 430-byte file of
// nested aliases expands to 10^9 scalars), and an alias inside its own anchor makes a node
// contain itself, so the JSON form is bounded in size and depth: such a file is refused instead
// of exhausting memory or the stack. Both bounds are far above what a real file needs: 1 MiB holds
// some 1600 workers (the demo's 4 take 2.6 KiB), and the TopologyFile schema nests 7 levels deep.
constexpr std::size_t kMaxJsonBytes = std::size_t{1} << 20;
constexpr std::size_t kMaxDepth = 64;

// false once the JSON would exceed a bound. The root is level 1.
bool emit(const YAML::Node& node, std::string& out, std::size_t depth = 1) {
  if (depth > kMaxDepth || out.size() > kMaxJsonBytes) return false;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out += "null";
      return true;
    case YAML::NodeType::Sequence: {
      out += '[';
      bool first = true;
      for (const auto& item : node) {
        if (!first) out += ',';
        first = false;
        if (!emit(item, out, depth + 1)) return false;
      }
      out += ']';
      return true;
    }
    case YAML::NodeType::Map: {
      out += '{';
      bool first = true;
      for (const auto& entry : node) {
        if (!first) out += ',';
        first = false;
        out += json_string(entry.first.as<std::string>());
        out += ':';
        if (!emit(entry.second, out, depth + 1)) return false;
      }
      out += '}';
      return true;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      const bool quoted = node.Tag() == "!";
      if (!quoted && (text == "true" || text == "false" || plain_number(text))) {
        out += text;
      } else {
        out += json_string(text);
      }
      return true;
    }
  }
  return true;
}

}  // namespace

std::expected<std::string, std::string> yaml_to_json(const std::string& yaml) {
  try {
    std::string json;
    if (!emit(YAML::Load(yaml), json) || json.size() > kMaxJsonBytes) {
      return std::unexpected("YAML: the document nests deeper than " + std::to_string(kMaxDepth) +
                             " levels or its JSON form exceeds " + std::to_string(kMaxJsonBytes >> 20) +
                             " MiB (an alias repeating a node without bound?)");
    }
    return json;
  } catch (const YAML::Exception& error) {
    return std::unexpected(std::string("YAML: ") + error.what());
  }
}

std::expected<::kvrelay::ingest::v1::TopologyFile, std::string> parse_topology(const std::string& text) {
  auto json = yaml_to_json(text);
  if (!json) return std::unexpected(json.error());
  ::kvrelay::ingest::v1::TopologyFile file;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(*json, &file, options);
  if (!status.ok()) return std::unexpected(std::string(status.message()));
  return file;
}

std::expected<::kvrelay::ingest::v1::TopologyFile, std::string> load_topology_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::unexpected("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  auto file = parse_topology(text.str());
  if (!file) return std::unexpected(path + ": " + file.error());
  return file;
}

}  // namespace kvrelay
