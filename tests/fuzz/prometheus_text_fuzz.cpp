// The Prometheus text parser (core/prometheus_text.hpp, docs/protocol/decisions.md#d26) on an
// engine's /metrics page, and the occupancy read from the parsed page for vLLM and SGLang
// (core/engine_load.hpp), as an engine scraper does with every page it fetches.
#include <cstdint>
#include <string_view>

#include "core/engine_load.hpp"
#include "core/prometheus_text.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;

namespace {

bool is_name_char(char c, bool metric) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || (metric && c == ':');
}

void check_sample(const prometheus_text::Sample& sample) {
  require(!sample.name.empty() && !(sample.name[0] >= '0' && sample.name[0] <= '9'), "a metric name starts right");
  for (char c : sample.name) require(is_name_char(c, true), "a metric name has name characters only");
  for (const auto& [key, value] : sample.labels) {
    require(!key.empty(), "a label has a name");
    for (char c : key) require(is_name_char(c, false), "a label name has name characters only");
    require(sample.label(key) == &value, "label names are unique");
  }
}

void check_occupancy(const prometheus_text::Page& page, const engine_load::OccupancyQuery& query) {
  const auto occupancy = engine_load::read_occupancy(page, query);
  if (!occupancy) return;
  for (std::size_t i = 1; i < occupancy->size(); ++i) {
    require((*occupancy)[i - 1].dp_rank < (*occupancy)[i].dp_rank, "one entry per rank, ascending");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto page = prometheus_text::parse(fuzz::as_text(data, size));
  if (!page) {
    require(page.error().starts_with("line "), "a refusal names its line");
    return 0;
  }
  for (const auto& sample : page->samples) check_sample(sample);
  check_occupancy(*page, {engine_load::EngineKind::kVllm, 0, 0});
  check_occupancy(*page, {engine_load::EngineKind::kSglang, 0, 16});
  check_occupancy(*page, {engine_load::EngineKind::kSglang, 3, 1});
  return 0;
}
