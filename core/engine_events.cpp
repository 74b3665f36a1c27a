#include "core/engine_events.hpp"

#include <algorithm>
#include <charconv>
#include <expected>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <msgpack.hpp>

#include "core/quoted_text.hpp"
#include "core/xxh3.hpp"

namespace kvrelay::engine {

namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

using Object = msgpack::object;
namespace mp = msgpack::type;

// Deeper than any producer's batch (an extra key inside an entry inside a list inside an event
// inside the batch is 6), low enough that a hostile payload cannot nest without bound.
constexpr std::size_t kMaxNesting = 32;
// Partial KV-cache groups a source remembers (docs/protocol/engine-sources.md#groups): a model
// has a handful; group indices are the engine's to choose, so their number is bounded too.
constexpr std::size_t kMaxPartialGroups = 1024;

struct Refusal {
  EventRejection reason;
  std::string detail;
};

std::unexpected<Refusal> refuse(EventRejection reason, std::string detail) {
  return std::unexpected(Refusal{reason, std::move(detail)});
}
std::unexpected<Refusal> malformed(std::string detail) {
  return refuse(EventRejection::kMalformedEvent, std::move(detail));
}

// ---- msgpack values ----

bool is_nil(const Object* value) { return value == nullptr || value->type == mp::NIL; }
bool is_integer(const Object& value) {
  return value.type == mp::POSITIVE_INTEGER || value.type == mp::NEGATIVE_INTEGER;
}
bool is_number(const Object& value) {
  return is_integer(value) || value.type == mp::FLOAT32 || value.type == mp::FLOAT64;
}
bool is_u32(const Object& value) {
  return value.type == mp::POSITIVE_INTEGER && value.via.u64 <= std::numeric_limits<std::uint32_t>::max();
}

std::string_view text_of(const Object& str) { return {str.via.str.ptr, str.via.str.size}; }
std::span<const Object> items_of(const Object& array) { return {array.via.array.ptr, array.via.array.size}; }
std::span<const msgpack::object_kv> entries_of(const Object& map) { return {map.via.map.ptr, map.via.map.size}; }

const Object* item_at(std::span<const Object> items, std::size_t index) {
  return index < items.size() ? &items[index] : nullptr;
}

// Every str and bin of the batch points into the payload, which outlives the decode: no copies.
bool reference_payload(mp::object_type, std::size_t, void*) { return true; }

// Counts the elements every array and map declares, without building anything: each element
// takes at least one byte of its own, so a payload declaring more elements than it has bytes
// is forged (or cut short). It stops past kMaxNesting levels, as the unpacker would: the
// parser keeps a frame per open container, so a payload of nothing but one-element array
// headers would otherwise cost it eight bytes per payload byte.
class DeclaredElements : public msgpack::null_visitor {
 public:
  enum class Refused { kNo, kTooManyElements, kTooDeep };

  explicit DeclaredElements(std::size_t budget) : budget_(budget) {}
  bool start_array(std::uint32_t elements) { return enter() && spend(elements); }
  bool end_array() { return leave(); }
  bool start_map(std::uint32_t pairs) { return enter() && spend(std::uint64_t{pairs} * 2); }
  bool end_map() { return leave(); }
  void insufficient_bytes(std::size_t, std::size_t) {}
  Refused refused() const { return refused_; }

 private:
  bool enter() {
    if (++depth_ > kMaxNesting) refused_ = Refused::kTooDeep;
    return refused_ == Refused::kNo;
  }
  bool leave() {
    --depth_;
    return true;
  }
  bool spend(std::uint64_t elements) {
    if (elements > budget_) refused_ = Refused::kTooManyElements;
    if (refused_ == Refused::kNo) budget_ -= elements;
    return refused_ == Refused::kNo;
  }
  std::uint64_t budget_;
  std::size_t depth_ = 0;  // containers open
  Refused refused_ = Refused::kNo;
};

// From this size on a payload is scanned for forged element counts before it is unpacked:
// the unpacker reserves every container's declared size up front, which the per-container
// limits below bound only by the payload's length at each of kMaxNesting levels.
constexpr std::size_t kScanFrom = 64 << 10;

// The whole payload must be exactly one msgpack value. Sizes are bounded by the payload length,
// and large payloads must not declare more elements in all than they have bytes, so a forged
// length header cannot make the unpacker reserve more than a small multiple of the payload.
std::expected<msgpack::object_handle, std::string> unpack_payload(std::span<const std::byte> payload) {
  const auto* data = reinterpret_cast<const char*>(payload.data());
  const std::size_t size = payload.size();
  if (size >= kScanFrom) {
    DeclaredElements declared(size);
    std::size_t scanned = 0;
    msgpack::parse(data, size, scanned, declared);
    switch (declared.refused()) {
      case DeclaredElements::Refused::kTooManyElements:
        return std::unexpected("its arrays and maps declare more elements than it has bytes");
      case DeclaredElements::Refused::kTooDeep:
        return std::unexpected(fmt::format("its arrays and maps nest deeper than {} levels", kMaxNesting));
      case DeclaredElements::Refused::kNo:
        break;
    }
  }
  const msgpack::unpack_limit limit(size, size, size, size, size, kMaxNesting);
  std::size_t offset = 0;
  try {
    msgpack::object_handle handle = msgpack::unpack(data, size, offset, reference_payload, nullptr, limit);
    if (offset != size) return std::unexpected(fmt::format("{} trailing bytes after the batch", size - offset));
    return handle;
  } catch (const msgpack::unpack_error& error) {
    return std::unexpected(fmt::format("not a msgpack value: {}", error.what()));
  } catch (const std::bad_alloc&) {
    return std::unexpected("its declared sizes need more memory than the relay can reserve");
  }
}

// ---- the batch envelope ----

struct Envelope {
  const Object* events = nullptr;  // an array
  std::optional<std::uint64_t> dp_rank;
};

std::expected<Envelope, std::string> envelope_from(const Object* ts, const Object* events, const Object* rank) {
  if (ts == nullptr || !is_number(*ts)) return std::unexpected("the batch has no numeric ts");
  if (events == nullptr || events->type != mp::ARRAY) return std::unexpected("the batch's events are not an array");
  if (is_nil(rank)) return Envelope{events, std::nullopt};
  if (rank->type != mp::POSITIVE_INTEGER) return std::unexpected("the batch's data_parallel_rank is not a rank");
  return Envelope{events, rank->via.u64};
}

// msgspec's positional [ts, events, data_parallel_rank?] or its map form; SGLang names the rank
// attn_dp_rank (docs/protocol/engine-sources.md#envelope).
std::expected<Envelope, std::string> read_envelope(const Object& batch) {
  if (batch.type == mp::ARRAY) {
    const auto items = items_of(batch);
    return envelope_from(item_at(items, 0), item_at(items, 1), item_at(items, 2));
  }
  if (batch.type != mp::MAP) return std::unexpected("the batch is neither an array nor a map");
  const Object* ts = nullptr;
  const Object* events = nullptr;
  const Object* rank = nullptr;
  for (const auto& [key, value] : entries_of(batch)) {
    if (key.type != mp::STR) continue;
    const std::string_view name = text_of(key);
    if (name == "ts") ts = &value;
    if (name == "events") events = &value;
    if ((name == "data_parallel_rank" || name == "attn_dp_rank") && is_nil(rank)) rank = &value;
  }
  return envelope_from(ts, events, rank);
}

// ---- the fields of one event, whichever encoding carried them ----

enum class EventKind : std::uint8_t { kStored, kRemoved, kCleared };

struct EventFields {
  EventKind kind = EventKind::kCleared;
  const Object* block_hashes = nullptr;  // null when absent
  const Object* parent_block_hash = nullptr;
  const Object* token_ids = nullptr;
  const Object* block_size = nullptr;
  const Object* medium = nullptr;
  const Object* lora_name = nullptr;
  const Object* extra_keys = nullptr;          // map form only
  const Object* cache_salt = nullptr;          // map form (TensorRT-LLM), or SGLang's positional metadata
  const Object* group_idx = nullptr;           // map form only (vLLM)
  const Object* kv_cache_spec_kind = nullptr;  // map form only (vLLM)
};

std::expected<EventKind, Refusal> kind_of(const Object* tag) {
  if (tag == nullptr || tag->type != mp::STR) return malformed("an event without a string tag");
  const std::string_view name = text_of(*tag);
  if (name == "BlockStored") return EventKind::kStored;
  if (name == "BlockRemoved") return EventKind::kRemoved;
  if (name == "AllBlocksCleared") return EventKind::kCleared;
  return refuse(EventRejection::kUnknownEventType, "unknown event type " + quoted_excerpt(name));
}

// The cache salt in SGLang's metadata map ({"cache_salt": ...}); other keys are ignored.
const Object* metadata_salt(const Object& metadata) {
  for (const auto& [key, value] : entries_of(metadata)) {
    if (key.type == mp::STR && text_of(key) == "cache_salt") return &value;
  }
  return nullptr;
}

// msgspec array_like: [tag, fields in declaration order...]. Position 7 is vLLM's lora_name, or
// SGLang's metadata map when it salts the event; positions past 7 are producer-specific (vLLM's
// extra_keys and group_idx) and differ between versions, so they are not read.
EventFields positional_fields(EventKind kind, std::span<const Object> items) {
  EventFields fields{.kind = kind, .block_hashes = item_at(items, 1)};
  if (kind == EventKind::kStored) {
    fields.parent_block_hash = item_at(items, 2);
    fields.token_ids = item_at(items, 3);
    fields.block_size = item_at(items, 4);
    fields.medium = item_at(items, 6);
    const Object* seventh = item_at(items, 7);
    if (seventh != nullptr && seventh->type == mp::MAP) {
      fields.cache_salt = metadata_salt(*seventh);
    } else {
      fields.lora_name = seventh;
    }
  } else if (kind == EventKind::kRemoved) {
    fields.medium = item_at(items, 2);
  }
  return fields;
}

constexpr std::pair<std::string_view, const Object * EventFields::*> kKeyedFields[] = {
    {"block_hashes", &EventFields::block_hashes},
    {"parent_block_hash", &EventFields::parent_block_hash},
    {"token_ids", &EventFields::token_ids},
    {"block_size", &EventFields::block_size},
    {"medium", &EventFields::medium},
    {"lora_name", &EventFields::lora_name},
    {"extra_keys", &EventFields::extra_keys},
    {"cache_salt", &EventFields::cache_salt},
    {"group_idx", &EventFields::group_idx},
    {"kv_cache_spec_kind", &EventFields::kv_cache_spec_kind},
};

// msgspec's map form, tagged by "type"; key order is not part of it and unknown keys are ignored.
std::expected<EventFields, Refusal> keyed_fields(std::span<const msgpack::object_kv> entries) {
  EventFields fields;
  const Object* type = nullptr;
  for (const auto& [key, value] : entries) {
    if (key.type != mp::STR) continue;
    const std::string_view name = text_of(key);
    if (name == "type") type = &value;
    for (const auto& [field_name, member] : kKeyedFields) {
      if (name == field_name) fields.*member = &value;
    }
  }
  const auto kind = kind_of(type);
  if (!kind) return std::unexpected(kind.error());
  fields.kind = *kind;
  return fields;
}

std::expected<EventFields, Refusal> fields_of(const Object& event) {
  std::expected<EventFields, Refusal> fields;
  if (event.type == mp::MAP) {
    fields = keyed_fields(entries_of(event));
  } else if (event.type == mp::ARRAY) {
    const auto kind = kind_of(item_at(items_of(event), 0));
    if (!kind) return std::unexpected(kind.error());
    fields = positional_fields(*kind, items_of(event));
  } else {
    return malformed("an event that is neither an array nor a map");
  }
  if (!fields || fields->kind == EventKind::kCleared) return fields;
  if (fields->block_hashes == nullptr) return malformed("an event without block_hashes");
  if (fields->kind == EventKind::kStored && (fields->token_ids == nullptr || fields->block_size == nullptr)) {
    return malformed("a BlockStored without token_ids or block_size");
  }
  return fields;
}

// ---- field values ----

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [&](char x, char y) { return lower(x) == lower(y); });
}

constexpr std::pair<std::string_view, ingest_v1::StorageTier> kMediumTiers[] = {
    {"GPU", ingest_v1::STORAGE_TIER_DEVICE},
    {"DEVICE", ingest_v1::STORAGE_TIER_DEVICE},
    {"CPU", ingest_v1::STORAGE_TIER_HOST_PINNED},
    {"CPU_PINNED", ingest_v1::STORAGE_TIER_HOST_PINNED},
    {"CPU_TIER1", ingest_v1::STORAGE_TIER_HOST_PINNED},
    {"CPU_TIER2", ingest_v1::STORAGE_TIER_DISK},
    {"DISK", ingest_v1::STORAGE_TIER_DISK},
    {"NVME", ingest_v1::STORAGE_TIER_DISK},
    {"STORAGE", ingest_v1::STORAGE_TIER_DISK},
    {"EXTERNAL", ingest_v1::STORAGE_TIER_EXTERNAL},
    {"NETWORK", ingest_v1::STORAGE_TIER_EXTERNAL},
    {"REMOTE", ingest_v1::STORAGE_TIER_EXTERNAL},
    {"SHARED", ingest_v1::STORAGE_TIER_EXTERNAL},
};

// An absent medium, and one this table does not know, is the device: what engines without
// offloading send, and what Dynamo assumes (docs/protocol/engine-sources.md#medium).
std::expected<ingest_v1::StorageTier, Refusal> tier_of(const Object* medium) {
  if (is_nil(medium)) return ingest_v1::STORAGE_TIER_DEVICE;
  if (medium->type != mp::STR) return malformed("a medium that is not a string");
  const std::string_view name = text_of(*medium);
  for (const auto& [known, tier] : kMediumTiers) {
    if (equals_ignoring_case(name, known)) return tier;
  }
  return ingest_v1::STORAGE_TIER_DEVICE;
}

// Engine block ids are lineage keys only. Bytes map to the big-endian value of their last 8 bytes,
// which is what vLLM's integer mode sends for the same hash (docs/protocol/decisions.md#d13).
std::uint64_t big_endian_tail(const char* bytes, std::size_t size) {
  std::uint64_t value = 0;
  for (std::size_t i = size > 8 ? size - 8 : 0; i < size; ++i) value = value << 8 | static_cast<std::uint8_t>(bytes[i]);
  return value;
}

std::optional<std::uint64_t> engine_hash(const Object& value) {
  switch (value.type) {
    case mp::POSITIVE_INTEGER:
      return value.via.u64;
    case mp::NEGATIVE_INTEGER:  // a signed 64-bit hash: its bits are the id
      return static_cast<std::uint64_t>(value.via.i64);
    case mp::BIN:
      return big_endian_tail(value.via.bin.ptr, value.via.bin.size);
    case mp::STR:
      return big_endian_tail(value.via.str.ptr, value.via.str.size);
    default:
      return std::nullopt;
  }
}

std::expected<void, Refusal> read_hashes(const Object& list, std::vector<std::uint64_t>& hashes) {
  if (list.type != mp::ARRAY) return malformed("block_hashes is not an array");
  hashes.clear();
  hashes.reserve(list.via.array.size);
  for (const Object& item : items_of(list)) {
    const auto hash = engine_hash(item);
    if (!hash) return malformed("a block hash that is neither an integer nor bytes");
    hashes.push_back(*hash);
  }
  return {};
}

std::expected<std::optional<std::uint64_t>, Refusal> read_parent(const Object* parent) {
  if (is_nil(parent)) return std::nullopt;
  const auto hash = engine_hash(*parent);
  if (!hash) return malformed("a parent_block_hash that is neither an integer nor bytes");
  return *hash;
}

std::expected<void, Refusal> read_block_size(const Object& block_size, std::uint32_t card_block_size) {
  if (!is_u32(block_size) || block_size.via.u64 == 0) return malformed("a block_size that is not a positive u32");
  if (block_size.via.u64 != card_block_size) {
    return refuse(EventRejection::kBlockSizeMismatch,
                  fmt::format("block_size {}, the card's is {}", block_size.via.u64, card_block_size));
  }
  return {};
}

std::expected<std::string_view, Refusal> read_text(const Object* value, std::string_view field) {
  if (is_nil(value)) return std::string_view();
  if (value->type != mp::STR) return malformed(fmt::format("{} is not a string", field));
  return text_of(*value);
}

// Eagle producers send (token, next token) pairs; the Eagle window of a block is its tokens plus the
// next one, so the pairs flatten to a_0 .. a_{n-1}, b_{n-1} (docs/protocol/engine-sources.md#tokens).
std::expected<void, Refusal> read_token_pairs(std::span<const Object> pairs, std::vector<std::uint32_t>& tokens) {
  tokens.reserve(pairs.size() + 1);
  for (const Object& pair : pairs) {
    if (pair.type != mp::ARRAY || pair.via.array.size != 2 || !is_u32(pair.via.array.ptr[0]) ||
        !is_u32(pair.via.array.ptr[1])) {
      return malformed("token_ids mixes pairs with other values");
    }
    tokens.push_back(static_cast<std::uint32_t>(pair.via.array.ptr[0].via.u64));
  }
  tokens.push_back(static_cast<std::uint32_t>(pairs.back().via.array.ptr[1].via.u64));
  return {};
}

std::expected<void, Refusal> read_tokens(const Object& list, hashing::HashFormat format,
                                         std::vector<std::uint32_t>& tokens) {
  if (list.type != mp::ARRAY) return malformed("token_ids is not an array");
  tokens.clear();
  const auto items = items_of(list);
  if (!items.empty() && items.front().type == mp::ARRAY) {
    if (format != hashing::HashFormat::kEagle) {
      return refuse(EventRejection::kHashFormatMismatch, "Eagle token pairs from a worker whose card is not Eagle");
    }
    return read_token_pairs(items, tokens);
  }
  if (!items.empty() && format == hashing::HashFormat::kEagle) {
    return refuse(EventRejection::kHashFormatMismatch, "a flat token list from a worker whose card is Eagle");
  }
  tokens.reserve(items.size());
  for (const Object& item : items) {
    if (!is_u32(item)) return malformed("a token id that is not a u32");
    tokens.push_back(static_cast<std::uint32_t>(item.via.u64));
  }
  return {};
}

// One entry per block, each nil or a list of that block's extra keys.
std::expected<const Object*, Refusal> read_extra_keys(const Object* extra_keys, std::size_t blocks) {
  if (is_nil(extra_keys)) return nullptr;
  if (extra_keys->type != mp::ARRAY || extra_keys->via.array.size != blocks) {
    return malformed("extra_keys is not a list with one entry per block");
  }
  for (const Object& entry : items_of(*extra_keys)) {
    if (!is_nil(&entry) && entry.type != mp::ARRAY) return malformed("an extra_keys entry that is not a list");
  }
  return extra_keys;
}

bool has_duplicate(std::span<const std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                   std::vector<std::uint64_t>& sorted) {
  sorted.assign(hashes.begin(), hashes.end());
  if (parent) sorted.push_back(*parent);
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
}

// ---- extra keys: multimodal ids and the cache salt ----

bool is_hex_digest(std::string_view text) {
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
  return text.size() == 64 && std::all_of(text.begin(), text.end(), hex);
}

// A 64-hex multimodal id is a 256-bit digest: its first 64 bits are its hash, as in Dynamo.
std::uint64_t digest_prefix(std::string_view digest) {
  std::uint64_t value = 0;
  std::from_chars(digest.data(), digest.data() + 16, value, 16);
  return value;
}

std::uint64_t multimodal_hash(std::string_view id) {
  return is_hex_digest(id) ? digest_prefix(id) : xxh3(id.data(), id.size(), 0);
}

// The entry's multimodal ids: a 64-hex string, or an [id, offset] pair (vLLM's (identifier, start
// offset)). Other keys (a LoRA name, a cache salt, prompt-embedding digests) are not multimodal.
void add_multimodal_hashes(const Object& entry, google::protobuf::RepeatedField<std::uint64_t>& mm_hashes) {
  if (is_nil(&entry)) return;
  for (const Object& key : items_of(entry)) {
    if (key.type == mp::STR && is_hex_digest(text_of(key))) mm_hashes.Add(digest_prefix(text_of(key)));
    if (key.type == mp::ARRAY && key.via.array.size == 2 && key.via.array.ptr[0].type == mp::STR &&
        is_integer(key.via.array.ptr[1])) {
      mm_hashes.Add(multimodal_hash(text_of(key.via.array.ptr[0])));
    }
  }
}

// vLLM salts a request's first block only, as a plain string next to the LoRA name in its keys.
std::string_view salt_candidate(const Object& first_entry, std::string_view lora_name) {
  if (is_nil(&first_entry)) return {};
  for (const Object& key : items_of(first_entry)) {
    if (key.type != mp::STR) continue;
    const std::string_view text = text_of(key);
    if (!text.empty() && !is_hex_digest(text) && text != lora_name) return text;
  }
  return {};
}

// ---- a stored event, read and checked before anything of it is emitted ----

struct StoredEvent {
  std::optional<std::uint64_t> parent;
  std::string_view lora_name;
  std::string_view cache_salt;         // the top-level one (TensorRT-LLM)
  const Object* extra_keys = nullptr;  // an array with one entry per block, or null
};

std::expected<StoredEvent, Refusal> read_stored_values(const EventFields& fields) {
  StoredEvent stored;
  const auto parent = read_parent(fields.parent_block_hash);
  if (!parent) return std::unexpected(parent.error());
  stored.parent = *parent;
  const auto lora_name = read_text(fields.lora_name, "lora_name");
  if (!lora_name) return std::unexpected(lora_name.error());
  stored.lora_name = *lora_name;
  const auto cache_salt = read_text(fields.cache_salt, "cache_salt");
  if (!cache_salt) return std::unexpected(cache_salt.error());
  stored.cache_salt = *cache_salt;
  return stored;
}

// Blocks whose whole token window lies inside the token list; a window overrunning it ends the event.
std::size_t complete_blocks(std::size_t blocks, std::size_t tokens, std::uint32_t stride, std::size_t width) {
  if (tokens < width) return 0;
  return std::min(blocks, (tokens - width) / stride + 1);
}

}  // namespace

std::string_view to_string(EventRejection rejection) {
  switch (rejection) {
    case EventRejection::kMalformedEvent:
      return "malformed_event";
    case EventRejection::kUnknownEventType:
      return "unknown_event_type";
    case EventRejection::kBlockSizeMismatch:
      return "block_size_mismatch";
    case EventRejection::kHashFormatMismatch:
      return "hash_format_mismatch";
    case EventRejection::kDuplicateBlock:
      return "duplicate_block";
    case EventRejection::kCount:
      break;
  }
  return "unknown";
}

// The decoder's per-event work, with access to its scratch buffers and namespace memory.
class EventDecoder::EventReader {
 public:
  EventReader(EventDecoder& decoder, DecodeResult& result, ingest_v1::KvEventBatch& out)
      : decoder_(decoder), result_(result), out_(out) {}

  std::expected<void, Refusal> decode(const Object& event) {
    const auto fields = fields_of(event);
    if (!fields) return std::unexpected(fields.error());
    const auto tier = tier_of(fields->medium);
    if (!tier) return std::unexpected(tier.error());
    if (*tier != ingest_v1::STORAGE_TIER_DEVICE) {
      ++result_.ignored;
      return {};
    }
    const auto partial = of_partial_group(*fields);
    if (!partial) return std::unexpected(partial.error());
    if (*partial) {
      ++result_.ignored_group;
      return {};
    }
    switch (fields->kind) {
      case EventKind::kStored:
        return decode_stored(*fields);
      case EventKind::kRemoved:
        return decode_removed(*fields);
      case EventKind::kCleared:
        out_.add_events()->mutable_cleared();
        decoder_.forget_all();
        ++result_.emitted;
        return {};
    }
    return malformed("an event of no known kind");
  }

 private:
  // A hybrid model's engine publishes one event per KV-cache group, with the same block hashes
  // in every group. Only full-attention groups hold every block of a prefix they store; a sliding
  // window or a Mamba state drops or checkpoints blocks on its own terms, which read as the
  // prefix's blocks would corrupt the pool (docs/protocol/engine-sources.md#groups). A store
  // names its group's kind; a removal only its group_idx, so each group's kind is learnt from
  // its latest store (an engine restarted with another model may number its groups otherwise).
  std::expected<bool, Refusal> of_partial_group(const EventFields& fields) {
    std::optional<std::uint64_t> group;
    if (!is_nil(fields.group_idx)) {
      if (fields.group_idx->type != mp::POSITIVE_INTEGER) return malformed("group_idx is not a non-negative integer");
      group = fields.group_idx->via.u64;
    }
    const auto kind = read_text(fields.kv_cache_spec_kind, "kv_cache_spec_kind");
    if (!kind) return std::unexpected(kind.error());
    const bool partial = is_partial_kind(*kind);
    if (fields.kind == EventKind::kStored && group) {
      if (partial) {
        if (decoder_.partial_groups_.size() >= kMaxPartialGroups && !decoder_.partial_groups_.contains(*group)) {
          return malformed(fmt::format("group_idx {}: the source already names {} partial KV-cache groups", *group,
                                       kMaxPartialGroups));
        }
        decoder_.partial_groups_.insert(*group);
      } else {
        decoder_.partial_groups_.erase(*group);
      }
    }
    return partial || (fields.kind == EventKind::kRemoved && group && decoder_.partial_groups_.contains(*group));
  }
  static bool is_partial_kind(std::string_view kind) {
    return kind == "sliding_window" || kind == "sliding_window_mla" || kind == "chunked_local_attention" ||
           kind == "mamba";
  }

  std::expected<void, Refusal> decode_removed(const EventFields& fields) {
    auto& hashes = decoder_.hashes_;
    if (auto read = read_hashes(*fields.block_hashes, hashes); !read) return read;
    out_.add_events()->mutable_removed()->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
    decoder_.forget(hashes);
    ++result_.emitted;
    return {};
  }

  std::expected<void, Refusal> decode_stored(const EventFields& fields) {
    const auto stored = read_stored(fields);
    if (!stored) return std::unexpected(stored.error());
    const std::span<const std::uint64_t> hashes = decoder_.hashes_;
    if (hashes.empty()) return {};
    const std::size_t blocks =
        complete_blocks(hashes.size(), decoder_.tokens_.size(), decoder_.config_.block_size,
                        hashing::window_tokens(decoder_.config_.block_size, decoder_.config_.format));
    if (blocks < hashes.size()) ++result_.truncated;
    if (blocks == 0) return {};
    const ingest_v1::BlocksStored& emitted = emit_stored(*stored, hashes.first(blocks));
    if (!emitted.cache_namespace().empty()) decoder_.remember(hashes.first(blocks), emitted.cache_namespace());
    ++result_.emitted;
    result_.stored_blocks += blocks;
    return {};
  }

  // Reads the hashes and tokens into the decoder's scratch buffers; every check happens here.
  std::expected<StoredEvent, Refusal> read_stored(const EventFields& fields) {
    const DecoderConfig& config = decoder_.config_;
    if (auto read = read_hashes(*fields.block_hashes, decoder_.hashes_); !read) return std::unexpected(read.error());
    auto stored = read_stored_values(fields);
    if (!stored) return stored;
    const auto extra_keys = read_extra_keys(fields.extra_keys, decoder_.hashes_.size());
    if (!extra_keys) return std::unexpected(extra_keys.error());
    stored->extra_keys = *extra_keys;
    if (auto read = read_block_size(*fields.block_size, config.block_size); !read) return std::unexpected(read.error());
    if (auto read = read_tokens(*fields.token_ids, config.format, decoder_.tokens_); !read) {
      return std::unexpected(read.error());
    }
    if (has_duplicate(decoder_.hashes_, stored->parent, decoder_.sorted_hashes_)) {
      return refuse(EventRejection::kDuplicateBlock,
                    "a block hash repeated in one stored event, or equal to its parent");
    }
    return stored;
  }

  // The top-level salt (TensorRT-LLM), else the salt vLLM puts on a request's first block, else the
  // namespace of the parent: a request's salt holds for every block that descends from its first.
  std::string_view cache_namespace_of(const StoredEvent& event) const {
    if (!event.cache_salt.empty()) return event.cache_salt;
    const std::string_view first_block_salt = event.extra_keys != nullptr && event.extra_keys->via.array.size > 0
                                                  ? salt_candidate(event.extra_keys->via.array.ptr[0], event.lora_name)
                                                  : std::string_view();
    if (!first_block_salt.empty() || !event.parent) return first_block_salt;
    return decoder_.namespace_of(*event.parent);
  }

  const ingest_v1::BlocksStored& emit_stored(const StoredEvent& event, std::span<const std::uint64_t> hashes) {
    ingest_v1::KvEvent& emitted = *out_.add_events();
    emitted.set_tier(ingest_v1::STORAGE_TIER_DEVICE);
    ingest_v1::BlocksStored& stored = *emitted.mutable_stored();
    if (event.parent) stored.set_parent_block_hash(*event.parent);
    stored.set_lora_name(std::string(event.lora_name));
    stored.set_cache_namespace(std::string(cache_namespace_of(event)));
    stored.mutable_blocks()->Reserve(static_cast<int>(hashes.size()));
    const std::size_t width = hashing::window_tokens(decoder_.config_.block_size, decoder_.config_.format);
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      ingest_v1::StoredBlock& block = *stored.add_blocks();
      block.set_block_hash(hashes[i]);
      ingest_v1::TokenBlock& tokens = *block.mutable_tokens();
      const std::uint32_t* window = decoder_.tokens_.data() + i * decoder_.config_.block_size;
      tokens.mutable_token_ids()->Add(window, window + width);
      if (event.extra_keys != nullptr) {
        add_multimodal_hashes(event.extra_keys->via.array.ptr[i], *tokens.mutable_mm_hashes());
      }
    }
    return stored;
  }

  EventDecoder& decoder_;
  DecodeResult& result_;
  ingest_v1::KvEventBatch& out_;
};

EventDecoder::EventDecoder(DecoderConfig config) : config_(config) {}

DecodeResult EventDecoder::decode(std::span<const std::byte> payload, ingest_v1::KvEventBatch& out) {
  DecodeResult result;
  const auto unpacked = unpack_payload(payload);
  if (!unpacked) {
    result.batch = DecodeResult::Batch::kMalformed;
    result.detail = unpacked.error();
    return result;
  }
  const auto envelope = read_envelope(unpacked->get());
  if (!envelope) {
    result.batch = DecodeResult::Batch::kMalformed;
    result.detail = envelope.error();
    return result;
  }
  if (envelope->dp_rank && *envelope->dp_rank != config_.dp_rank) {
    result.batch = DecodeResult::Batch::kOtherRank;
    result.detail =
        fmt::format("a batch of dp rank {}; this source feeds rank {}", *envelope->dp_rank, config_.dp_rank);
    return result;
  }
  const auto events = items_of(*envelope->events);
  out.mutable_events()->Reserve(out.events_size() + static_cast<int>(events.size()));
  EventReader reader(*this, result, out);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto decoded = reader.decode(events[i]);
    if (decoded) continue;
    ++result.rejected[static_cast<std::size_t>(decoded.error().reason)];
    if (result.detail.empty()) result.detail = fmt::format("events[{}]: {}", i, decoded.error().detail);
  }
  return result;
}

void EventDecoder::reset() { forget_all(); }

std::string_view EventDecoder::namespace_of(std::uint64_t engine_hash) const {
  const auto found = block_namespaces_.find(engine_hash);
  return found == block_namespaces_.end() ? std::string_view() : std::string_view(found->second->first);
}

void EventDecoder::remember(std::span<const std::uint64_t> engine_hashes, std::string_view cache_namespace) {
  auto named = namespaces_.find(cache_namespace);
  if (named == namespaces_.end()) named = namespaces_.emplace(std::string(cache_namespace), 0).first;
  for (std::uint64_t hash : engine_hashes) {
    const auto [slot, inserted] = block_namespaces_.try_emplace(hash, named);
    if (!inserted) {
      if (slot->second == named) continue;
      release(slot->second);
      slot->second = named;
    }
    ++named->second;
  }
}

void EventDecoder::forget(std::span<const std::uint64_t> engine_hashes) {
  if (block_namespaces_.empty()) return;  // the common case of a source without salts
  for (std::uint64_t hash : engine_hashes) {
    const auto found = block_namespaces_.find(hash);
    if (found == block_namespaces_.end()) continue;
    release(found->second);
    block_namespaces_.erase(found);
  }
}

void EventDecoder::forget_all() {
  block_namespaces_.clear();
  namespaces_.clear();
}

void EventDecoder::release(NamespaceTable::iterator named) {
  if (--named->second == 0) namespaces_.erase(named);
}

}  // namespace kvrelay::engine
