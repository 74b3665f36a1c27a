#pragma once
// Large arrays read at random -- a pool's filter words and index tables -- asked to be backed by
// transparent huge pages (docs/protocol/pools.md#index-layout): with 4 KiB pages nearly every
// one of their accesses also misses the TLB.
#include <cstddef>

namespace kvrelay {

// Advises the kernel to back the 2 MiB pages that lie wholly inside [data, data + bytes) with
// huge pages; call it before the memory is first touched. Arrays under 4 MiB are left alone, and
// a kernel with transparent huge pages off ignores the advice.
void advise_huge_pages(void* data, std::size_t bytes);

}  // namespace kvrelay
