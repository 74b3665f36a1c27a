#include "core/identity.hpp"

#include <algorithm>
#include <limits>

#include "core/blake3.hpp"
#include "core/unicode_text.hpp"

namespace kvrelay::identity {
namespace {

constexpr std::string_view kCacheSemanticsDefaultTag = "dynamo/indexer-cache-semantics/default/v1";
constexpr std::string_view kCacheSemanticsExplicitTag = "dynamo/indexer-cache-semantics/explicit/v1";
constexpr std::string_view kRoutingScopeDefaultTag = "dynamo/indexer-routing-scope/default/v1";
constexpr std::string_view kRoutingScopeExplicitTag = "dynamo/indexer-routing-scope/explicit/v1";
constexpr std::string_view kDcIdTag = "dynamo/indexer-dc/v1";

// Feeds little-endian integers and length-framed strings into a BLAKE3 hasher.
class MaterialWriter {
 public:
  void u16(std::uint16_t v) {
    const std::array<std::uint8_t, 2> le = {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8)};
    hasher_.update(le);
  }
  void u32(std::uint32_t v) {
    const std::array<std::uint8_t, 4> le = {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
                                            static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
    hasher_.update(le);
  }
  void raw(std::string_view bytes) { hasher_.update(bytes); }
  // Callers check that every framed field fits a u32 length (fits_frame).
  void framed(std::string_view bytes) {
    u32(static_cast<std::uint32_t>(bytes.size()));
    raw(bytes);
  }
  blake3::Digest finish() const { return hasher_.finalize(); }

 private:
  blake3::Hasher hasher_;
};

bool fits_frame(std::string_view s) { return s.size() <= std::numeric_limits<std::uint32_t>::max(); }

Digest truncate(const blake3::Digest& full, Source source) {
  Digest digest;
  std::copy_n(full.begin(), digest.bytes.size(), digest.bytes.begin());
  digest.source = source;
  return digest;
}

// Validates explicit material and returns its entries in ascending byte-wise key order.
std::expected<std::vector<const std::pair<std::string, std::string>*>, IdentityError> sorted_entries(
    const Material& material) {
  if (material.size() > kMaxMaterialEntries) return std::unexpected(IdentityError::kTooManyMaterialEntries);
  std::vector<const std::pair<std::string, std::string>*> entries;
  entries.reserve(material.size());
  for (const auto& entry : material) {
    const auto& [key, value] = entry;
    if (key.empty()) return std::unexpected(IdentityError::kEmptyMaterialKey);
    if (key.size() > kMaxMaterialKeyBytes) return std::unexpected(IdentityError::kMaterialKeyTooLong);
    if (value.empty()) return std::unexpected(IdentityError::kEmptyMaterialValue);
    if (value.size() > kMaxMaterialValueBytes) return std::unexpected(IdentityError::kMaterialValueTooLong);
    entries.push_back(&entry);
  }
  // std::string ordering compares char_traits<char>, i.e. as unsigned bytes.
  std::ranges::sort(entries, [](const auto* a, const auto* b) { return a->first < b->first; });
  const auto duplicate =
      std::ranges::adjacent_find(entries, [](const auto* a, const auto* b) { return a->first == b->first; });
  if (duplicate != entries.end()) return std::unexpected(IdentityError::kDuplicateMaterialKey);
  return entries;
}

void write_entries(MaterialWriter& writer, const std::vector<const std::pair<std::string, std::string>*>& entries) {
  writer.u32(static_cast<std::uint32_t>(entries.size()));
  for (const auto* entry : entries) {
    writer.framed(entry->first);
    writer.framed(entry->second);
  }
}

}  // namespace

std::string Digest::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Material to_material(const std::map<std::string, std::string>& entries) {
  return Material(entries.begin(), entries.end());
}

std::string_view to_string(IdentityError error) {
  switch (error) {
    case IdentityError::kEmptyMaterialKey:
      return "identity material key is empty";
    case IdentityError::kMaterialKeyTooLong:
      return "identity material key exceeds 128 bytes";
    case IdentityError::kEmptyMaterialValue:
      return "identity material value is empty";
    case IdentityError::kMaterialValueTooLong:
      return "identity material value exceeds 1024 bytes";
    case IdentityError::kTooManyMaterialEntries:
      return "identity material has more than 32 entries";
    case IdentityError::kDuplicateMaterialKey:
      return "identity material has a duplicate key";
    case IdentityError::kZeroBlockSize:
      return "kv_block_size is zero";
    case IdentityError::kInvalidDcId:
      return "dc_id is empty, not UTF-8, or has surrounding whitespace";
    case IdentityError::kFieldTooLong:
      return "identity input exceeds the u32 length frame";
  }
  return "unknown identity error";
}

std::uint16_t hash_format_version(hashing::HashFormat format) {
  switch (format) {
    case hashing::HashFormat::kStandard:
      return 1;
    case hashing::HashFormat::kEagle:
      return 2;
  }
  return 0;
}

std::expected<Digest, IdentityError> cache_semantics(std::string_view source_path, const Material& explicit_material,
                                                     std::uint32_t kv_block_size, hashing::HashFormat format) {
  if (kv_block_size == 0) return std::unexpected(IdentityError::kZeroBlockSize);
  MaterialWriter writer;
  Source source = Source::kDefaultDerived;
  if (explicit_material.empty()) {
    if (!fits_frame(source_path)) return std::unexpected(IdentityError::kFieldTooLong);
    writer.framed(kCacheSemanticsDefaultTag);
    writer.u32(1);
    writer.framed(source_path);
  } else {
    const auto entries = sorted_entries(explicit_material);
    if (!entries) return std::unexpected(entries.error());
    source = Source::kExplicit;
    writer.framed(kCacheSemanticsExplicitTag);
    write_entries(writer, *entries);
  }
  writer.u32(kv_block_size);
  writer.u16(hash_format_version(format));
  return truncate(writer.finish(), source);
}

std::expected<Digest, IdentityError> routing_scope(std::string_view endpoint_namespace, std::string_view component,
                                                   std::string_view endpoint_name, const Material& explicit_material) {
  MaterialWriter writer;
  if (explicit_material.empty()) {
    if (!fits_frame(endpoint_namespace) || !fits_frame(component) || !fits_frame(endpoint_name)) {
      return std::unexpected(IdentityError::kFieldTooLong);
    }
    writer.framed(kRoutingScopeDefaultTag);
    writer.u32(3);
    writer.framed(endpoint_namespace);
    writer.framed(component);
    writer.framed(endpoint_name);
    return truncate(writer.finish(), Source::kDefaultDerived);
  }
  const auto entries = sorted_entries(explicit_material);
  if (!entries) return std::unexpected(entries.error());
  writer.framed(kRoutingScopeExplicitTag);
  write_entries(writer, *entries);
  return truncate(writer.finish(), Source::kExplicit);
}

std::expected<std::uint64_t, IdentityError> stable_dc_id(std::string_view dc) {
  if (!text::is_valid_text(dc)) return std::unexpected(IdentityError::kInvalidDcId);
  if (!fits_frame(dc)) return std::unexpected(IdentityError::kFieldTooLong);
  MaterialWriter writer;
  writer.raw(kDcIdTag);  // the tag is deliberately not framed
  writer.framed(dc);
  const blake3::Digest full = writer.finish();
  std::uint64_t id = 0;
  for (std::size_t i = 0; i < 8; ++i) id |= static_cast<std::uint64_t>(full[i]) << (8 * i);
  return id;
}

}  // namespace kvrelay::identity
