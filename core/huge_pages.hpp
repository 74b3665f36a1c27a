#pragma once
// Memory for large arrays read at random -- a pool's filter words and index tables, a consumer
// replica's lane -- backed by transparent huge pages where the kernel allows
// (docs/protocol/pools.md#index-layout, docs/consumer.md#shape): with 4 KiB pages nearly every
// one of their accesses (and prefetches) also misses the TLB.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace kvrelay {

// `bytes` of uninitialized memory, freed with std::free. From 4 MiB on it starts on a 2 MiB
// boundary and its whole 2 MiB pages are advised for huge pages before anything touches them
// (the partial page at its end is not, so that the advice commits no memory past the array);
// smaller arrays are plain heap memory. A kernel with transparent huge pages off ignores the
// advice. From 64 KiB on, its whole pages are mapped in before it is returned, in one call
// rather than one page fault per page: a caller is about to write all of them. Throws
// std::bad_alloc when out of memory.
void* allocate_random_access(std::size_t bytes);

struct RandomAccessDeleter {
  void operator()(void* data) const { std::free(data); }
};
// An array of trivially copyable T, left uninitialized as by make_unique_for_overwrite.
template <class T>
using RandomAccessArray = std::unique_ptr<T[], RandomAccessDeleter>;
template <class T>
RandomAccessArray<T> make_random_access_array(std::size_t count) {
  static_assert(std::is_trivially_copyable_v<T>);
  return RandomAccessArray<T>(static_cast<T*>(allocate_random_access(count * sizeof(T))));
}

// The same memory for a container (the filter's words).
template <class T>
struct RandomAccessAllocator {
  using value_type = T;
  RandomAccessAllocator() = default;
  template <class U>
  explicit RandomAccessAllocator(const RandomAccessAllocator<U>&) {}
  T* allocate(std::size_t count) { return static_cast<T*>(allocate_random_access(count * sizeof(T))); }
  void deallocate(T* data, std::size_t) { std::free(data); }
  friend bool operator==(const RandomAccessAllocator&, const RandomAccessAllocator&) = default;
};

// A filter's bucket words, as the relay's filter and a consumer's replica hold them.
using RandomAccessWords = std::vector<std::uint64_t, RandomAccessAllocator<std::uint64_t>>;

}  // namespace kvrelay
