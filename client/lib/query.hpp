#pragma once
// The query side of a pool (docs/protocol/cbi1-ckf.md#query): hash a prompt with the pool's own
// query semantics and LoRA salt, then count how many leading sequence hashes its filter holds.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "client/lib/catalog_state.hpp"
#include "core/ckf.hpp"
#include "core/token_hashing.hpp"

namespace kvrelay::client {

struct QuerySemantics {
  std::uint32_t block_size = 0;
  hashing::HashFormat format = hashing::HashFormat::kStandard;
  std::string lora;  // empty for base-model requests
  friend auto operator<=>(const QuerySemantics&, const QuerySemantics&) = default;
};

// A validated descriptor's semantics for a request bound to `binding`.
QuerySemantics semantics_of(const v1::KvPoolDescriptor& descriptor, const Binding& binding);

// One prompt's sequence hashes, computed once per distinct semantics.
// `cache_namespace` is the request's (vLLM's cache salt): it salts the hashes as the pools salted
// the blocks stored under it, beside each pool binding's LoRA name.
class PromptHashes {
 public:
  explicit PromptHashes(std::span<const std::uint32_t> tokens, std::string_view cache_namespace = {})
      : tokens_(tokens), cache_namespace_(cache_namespace) {}
  std::span<const std::uint64_t> sequence_hashes(const QuerySemantics& semantics);

 private:
  std::span<const std::uint32_t> tokens_;
  std::string cache_namespace_;
  std::map<QuerySemantics, std::vector<std::uint64_t>> by_semantics_;
};

// Leading hashes the filter holds. Addresses the probes 64 at a time before reading any of them,
// so that their bucket loads overlap, and stops at the first miss.
std::size_t prefix_depth(std::span<const std::uint64_t> words, const ckf::Addressing& addressing,
                         std::span<const std::uint64_t> sequence_hashes);

}  // namespace kvrelay::client
