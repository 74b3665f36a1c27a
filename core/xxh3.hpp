#pragma once
// XXH3-64 inlined into the caller. The filter hashes 8-byte keys on its hot path, where a
// call into the shared libxxhash costs about three times the hash itself.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvrelay {

inline std::uint64_t xxh3(const void* data, std::size_t size, std::uint64_t seed = 0) {
  return XXH3_64bits_withSeed(data, size, seed);
}

// Little-endian helpers; kv-relay's wire formats are little-endian on every host.
static_assert(std::endian::native == std::endian::little,
              "kv-relay assumes a little-endian host for its wire encodings");

inline void store_le64(std::uint8_t* out, std::uint64_t value) { std::memcpy(out, &value, 8); }
inline void store_le32(std::uint8_t* out, std::uint32_t value) { std::memcpy(out, &value, 4); }
inline void store_le16(std::uint8_t* out, std::uint16_t value) { std::memcpy(out, &value, 2); }

inline std::uint64_t load_le64(const std::uint8_t* in) {
  std::uint64_t value;
  std::memcpy(&value, in, 8);
  return value;
}
inline std::uint32_t load_le32(const std::uint8_t* in) {
  std::uint32_t value;
  std::memcpy(&value, in, 4);
  return value;
}
inline std::uint16_t load_le16(const std::uint8_t* in) {
  std::uint16_t value;
  std::memcpy(&value, in, 2);
  return value;
}

// XXH3 of the 8 little-endian bytes of `value`.
inline std::uint64_t xxh3_u64(std::uint64_t value, std::uint64_t seed) {
  std::uint8_t bytes[8];
  store_le64(bytes, value);
  return xxh3(bytes, sizeof bytes, seed);
}

}  // namespace kvrelay
