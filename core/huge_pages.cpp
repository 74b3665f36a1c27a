#include "core/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>

namespace kvrelay {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kPopulateFrom = std::size_t{64} << 10;

// Maps the whole pages inside [data, data + bytes) writable in one call, as writing to each
// would, without the page fault per page that writing takes: on a virtual machine a fault can
// cost microseconds, and a growing table writes every page of its new array at once
// (docs/protocol/pools.md#index-layout). Best effort: a kernel before 5.14 (EINVAL) or a
// shortage of memory leaves the pages to be faulted in on first touch, as they would be anyway.
void populate(void* data, std::size_t bytes) {
  constexpr std::uintptr_t kPage = 4096;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
}

}  // namespace

void* allocate_random_access(std::size_t bytes) {
  void* data = nullptr;
  if (bytes < 2 * kHugePage) {
    data = std::malloc(bytes == 0 ? 1 : bytes);
    if (data == nullptr) throw std::bad_alloc();
  } else {
    if (posix_memalign(&data, kHugePage, bytes) != 0) throw std::bad_alloc();
    // Best effort: EINVAL (a kernel without huge pages) leaves the default pages, which work the same.
    madvise(data, bytes & ~(kHugePage - 1), MADV_HUGEPAGE);
  }
  if (bytes >= kPopulateFrom) populate(data, bytes);
  return data;
}

}  // namespace kvrelay
