#include "core/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>

namespace kvrelay {

void* allocate_random_access(std::size_t bytes) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  if (bytes < 2 * kHugePage) {
    if (void* data = std::malloc(bytes == 0 ? 1 : bytes)) return data;
    throw std::bad_alloc();
  }
  void* data = nullptr;
  if (posix_memalign(&data, kHugePage, bytes) != 0) throw std::bad_alloc();
  // Best effort: EINVAL (a kernel without huge pages) leaves the default pages, which work the same.
  madvise(data, bytes & ~(kHugePage - 1), MADV_HUGEPAGE);
  return data;
}

}  // namespace kvrelay
