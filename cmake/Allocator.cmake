# kvrelay_allocator: what the relay's programs allocate through. gperftools' tcmalloc by default
# (docs/operations.md#memory): it keeps freed pages for reuse, where glibc's malloc returns
# them and faults them back in page by page as a pool's tables grow and pushed batches come
# and go (docs/benchmarks.md#allocator). The AddressSanitizer build keeps glibc's malloc, which
# the sanitizer replaces.
option(KVRELAY_TCMALLOC "Link the relay's programs against gperftools' tcmalloc" ON)
add_library(kvrelay_allocator INTERFACE)
if(KVRELAY_TCMALLOC AND NOT KVRELAY_SANITIZE)
  find_library(KVRELAY_TCMALLOC_LIBRARY tcmalloc_minimal REQUIRED)
  # Nothing calls tcmalloc by name (it replaces malloc), so the default --as-needed would drop it.
  set(CMAKE_LINK_LIBRARY_USING_NO_AS_NEEDED "LINKER:--push-state,--no-as-needed" "<LINK_ITEM>" "LINKER:--pop-state")
  set(CMAKE_LINK_LIBRARY_USING_NO_AS_NEEDED_SUPPORTED TRUE)
  target_link_libraries(kvrelay_allocator INTERFACE "$<LINK_LIBRARY:NO_AS_NEEDED,${KVRELAY_TCMALLOC_LIBRARY}>")
  target_compile_definitions(kvrelay_allocator INTERFACE KVRELAY_TCMALLOC=1)
endif()
