#pragma once
// The relay's heap in transparent huge pages (docs/operations.md#memory): tcmalloc takes its
// memory from the system in regions advised for huge pages, so memory new to the process is
// faulted in 2 MiB at a time rather than 4 KiB. A pool filling from empty, and the batches
// that fill it, take tens of MiB the process has never touched, and on a virtual machine each
// 4 KiB fault costs microseconds (docs/benchmarks.md#first-touch).
namespace kvrelay {

// Installs the huge-page regions as tcmalloc's source of memory, for all that the heap grows by
// from now on. False where the relay's programs are not linked against tcmalloc (the
// AddressSanitizer build); a kernel without transparent huge pages ignores the advice and gives
// the regions 4 KiB pages, as before. Call once, early in main.
bool back_heap_with_huge_pages();

}  // namespace kvrelay
