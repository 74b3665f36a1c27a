#include "app/huge_page_heap.hpp"

#ifdef KVRELAY_TCMALLOC

#include <gperftools/malloc_extension.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

namespace kvrelay {
namespace {

constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
// Address space reserved at a time. Only what tcmalloc touches is backed by memory, so a large
// reservation costs nothing; it keeps the regions few and their huge pages whole.
constexpr std::uintptr_t kReservation = std::uintptr_t{256} << 20;
// Beyond any address space there is: a larger request is the system's to refuse, and the
// arithmetic below cannot overflow.
constexpr std::uintptr_t kLargestRequest = std::uintptr_t{1} << 47;

constexpr std::uintptr_t round_up(std::uintptr_t value, std::uintptr_t to) { return (value + to - 1) / to * to; }

// Carves tcmalloc's requests from reservations aligned to and advised for huge pages. tcmalloc
// calls Alloc with its page heap locked: nothing here may allocate from the heap.
class HugePageRegions final : public SysAllocator {
 public:
  explicit HugePageRegions(SysAllocator* fallback) : fallback_(fallback) {}

  void* Alloc(std::size_t size, std::size_t* actual_size, std::size_t alignment) override {
    if (void* carved = carve(size, alignment)) {
      if (actual_size != nullptr) *actual_size = size;
      return carved;
    }
    // No address space left to reserve: the system's own way, which will likely fail as well.
    return fallback_ != nullptr ? fallback_->Alloc(size, actual_size, alignment) : nullptr;
  }

 private:
  void* carve(std::size_t size, std::size_t alignment) {
    if (size > kLargestRequest || alignment > kLargestRequest) return nullptr;
    std::uintptr_t start = round_up(next_, std::max<std::uintptr_t>(alignment, 1));
    if (next_ == 0 || start + size > end_) {
      if (!reserve(size + alignment)) return nullptr;
      start = round_up(next_, std::max<std::uintptr_t>(alignment, 1));
    }
    next_ = start + size;
    return reinterpret_cast<void*>(start);
  }

  // A fresh reservation of at least `bytes`, starting on a huge-page boundary. What is left of
  // the previous one stays unused and untouched, so it takes no memory.
  bool reserve(std::uintptr_t bytes) {
    const std::uintptr_t length = round_up(std::max(bytes, kReservation), kHugePage);
    void* mapped =
        mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) return false;
    const auto begin = reinterpret_cast<std::uintptr_t>(mapped);
    const std::uintptr_t aligned = round_up(begin, kHugePage);
    if (aligned > begin) munmap(mapped, aligned - begin);
    const std::uintptr_t tail = begin + length + kHugePage - (aligned + length);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + length), tail);
    // Best effort: EINVAL (a kernel without huge pages) leaves 4 KiB pages, which work the same.
    madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);
    next_ = aligned;
    end_ = aligned + length;
    return true;
  }

  SysAllocator* const fallback_;
  std::uintptr_t next_ = 0;
  std::uintptr_t end_ = 0;
};

}  // namespace

bool back_heap_with_huge_pages() {
  // Never destroyed: tcmalloc may grow its heap until the process's last instruction.
  alignas(HugePageRegions) static unsigned char storage[sizeof(HugePageRegions)];
  static SysAllocator* const regions = new (storage) HugePageRegions(MallocExtension::instance()->GetSystemAllocator());
  MallocExtension::instance()->SetSystemAllocator(regions);
  return true;
}

}  // namespace kvrelay

#else

namespace kvrelay {
bool back_heap_with_huge_pages() { return false; }
}  // namespace kvrelay

#endif
