#pragma once
// Decoding one engine KV-event payload (vLLM, SGLang, TensorRT-LLM msgpack; docs/protocol/engine-sources.md#events)
// into the ingest KvEvents a push feeder would send for the same engine activity, so that a ZeroMQ source
// goes through the same canonicalisation (core/kv_events.hpp) as every other source.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include "core/token_hashing.hpp"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::engine {

struct DecoderConfig {
  std::uint32_t block_size = 0;                                 // the card's kv_cache_block_size
  hashing::HashFormat format = hashing::HashFormat::kStandard;  // kEagle when the worker runs Eagle
  std::uint32_t dp_rank = 0;                                    // the rank this source feeds
};

// Why one event was not emitted; each is counted, and the rest of the batch goes on.
enum class EventRejection : std::uint8_t {
  kMalformedEvent,      // not an event of a known shape, or a field of the wrong type
  kUnknownEventType,    // a tag or "type" this decoder does not know
  kBlockSizeMismatch,   // the event's block_size is not the card's
  kHashFormatMismatch,  // Eagle token pairs from a worker whose card is not Eagle
  kDuplicateBlock,      // one engine hash twice in a stored event (or equal to its parent)
  kCount,
};
std::string_view to_string(EventRejection rejection);

struct DecodeResult {
  enum class Batch : std::uint8_t { kDecoded, kMalformed, kOtherRank } batch = Batch::kDecoded;
  std::string detail;  // why the batch or the first rejected event was refused (for a rate-limited log)
  std::array<std::uint32_t, static_cast<std::size_t>(EventRejection::kCount)> rejected{};
  std::uint32_t emitted = 0;        // events appended to the output
  std::uint32_t ignored = 0;        // events of another storage tier: not the filter's business, not errors
  std::uint32_t ignored_group = 0;  // events of a hybrid model's partial KV-cache group (sliding window, Mamba)
  std::uint32_t truncated = 0;      // stored events that lost trailing blocks whose token window overran token_ids
  std::uint64_t stored_blocks = 0;  // blocks in emitted stored events

  std::uint32_t rejections(EventRejection reason) const { return rejected[static_cast<std::size_t>(reason)]; }
};

// One per source: it remembers each salted engine block's cache namespace, because vLLM puts a
// request's cache salt on its first block only and later blocks inherit it through their parent.
class EventDecoder {
 public:
  explicit EventDecoder(DecoderConfig config);

  // Appends the batch's events to `out.mutable_events()`; touches nothing else of `out`. A
  // malformed batch, or one of another dp rank, appends nothing.
  DecodeResult decode(std::span<const std::byte> payload, ::kvrelay::ingest::v1::KvEventBatch& out);
  // The source was cold-reset: forget every block's namespace.
  void reset();
  // Engine blocks whose cache namespace is remembered.
  std::size_t remembered_namespaces() const { return block_namespaces_.size(); }

 private:
  class EventReader;  // decodes one event of a batch
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  // Namespace text -> remembered blocks naming it. Each text is held once however many blocks name
  // it, and node-based storage keeps the iterators the blocks hold valid.
  using NamespaceTable = std::unordered_map<std::string, std::uint64_t, TextHash, std::equal_to<>>;

  std::string_view namespace_of(std::uint64_t engine_hash) const;
  void remember(std::span<const std::uint64_t> engine_hashes, std::string_view cache_namespace);
  void forget(std::span<const std::uint64_t> engine_hashes);
  void forget_all();
  void release(NamespaceTable::iterator named);

  DecoderConfig config_;
  NamespaceTable namespaces_;
  absl::flat_hash_map<std::uint64_t, NamespaceTable::iterator> block_namespaces_;
  // Reused by every event, so that decoding allocates little beyond the output itself.
  std::vector<std::uint32_t> tokens_;
  std::vector<std::uint64_t> hashes_;
  std::vector<std::uint64_t> sorted_hashes_;
  // KV-cache groups whose latest store named a partial kind: their removals are ignored too.
  // Kept across resets: a restarted engine's stores correct them.
  absl::flat_hash_set<std::uint64_t> partial_groups_;
};

}  // namespace kvrelay::engine
