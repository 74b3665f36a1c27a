#pragma once
// PoolId identity derivation (docs/protocol/pools.md#identity-derivation): the two digests of the
// indexer domain (cache semantics and routing scope) and the stable dc_id, all derived with BLAKE3
// (default hash mode) over length-framed, little-endian material.
#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/token_hashing.hpp"

namespace kvrelay::identity {

// Numbers are those of the proto enum IdentitySource.
enum class Source : std::uint8_t { kDefaultDerived = 1, kExplicit = 2 };

inline constexpr std::size_t kDigestLen = 16;

// A cache-semantics or routing-scope identity: the first 16 bytes of the BLAKE3 output and
// the source of the material that was hashed.
struct Digest {
  std::array<std::uint8_t, kDigestLen> bytes{};
  Source source = Source::kDefaultDerived;

  std::string hex() const;  // lowercase, 32 characters
  friend bool operator==(const Digest&, const Digest&) = default;
};

// Explicit identity material as key/value pairs, in any order (it is sorted by key before
// hashing). Empty means "no explicit material": the default inputs are used. A vector, not
// a map, so that duplicate keys can be reported.
using Material = std::vector<std::pair<std::string, std::string>>;
Material to_material(const std::map<std::string, std::string>& entries);

inline constexpr std::size_t kMaxMaterialEntries = 32;
inline constexpr std::size_t kMaxMaterialKeyBytes = 128;     // UTF-8 bytes
inline constexpr std::size_t kMaxMaterialValueBytes = 1024;  // UTF-8 bytes

enum class IdentityError : std::uint8_t {
  kEmptyMaterialKey,
  kMaterialKeyTooLong,
  kEmptyMaterialValue,
  kMaterialValueTooLong,
  kTooManyMaterialEntries,
  kDuplicateMaterialKey,
  kZeroBlockSize,
  kInvalidDcId,   // empty, not UTF-8, or leading/trailing (ASCII or Unicode) whitespace
  kFieldTooLong,  // a default input longer than a u32 length prefix can frame
};

std::string_view to_string(IdentityError error);

// hash_format_version of the hashed material: DYNAMO_STANDARD_V1 = 1, DYNAMO_EAGLE_V1 = 2.
std::uint16_t hash_format_version(hashing::HashFormat format);

// Cache-semantics identity. Default source (empty `explicit_material`): the one default
// input is the model card's source_path. Explicit source: the material replaces the
// default inputs; the block size and hash format are appended either way.
std::expected<Digest, IdentityError> cache_semantics(std::string_view source_path, const Material& explicit_material,
                                                     std::uint32_t kv_block_size, hashing::HashFormat format);

// Routing-scope identity. Default source: the endpoint's namespace, component and name.
std::expected<Digest, IdentityError> routing_scope(std::string_view endpoint_namespace, std::string_view component,
                                                   std::string_view endpoint_name, const Material& explicit_material);

// dc_id = u64_le(BLAKE3("dynamo/indexer-dc/v1" || u32_le(len(dc)) || dc)[0..8]); the tag is
// not framed. `dc` must be non-empty, without leading or trailing whitespace.
std::expected<std::uint64_t, IdentityError> stable_dc_id(std::string_view dc);

}  // namespace kvrelay::identity
