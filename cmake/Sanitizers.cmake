# KVRELAY_SANITIZE=ON builds everything with AddressSanitizer + UndefinedBehaviorSanitizer.
option(KVRELAY_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(KVRELAY_SANITIZE)
  set(_kvrelay_san -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  # -O1 (overriding the build type's -O2), as the sanitizers' documentation advises: reports
  # stay exact and the instrumented tree compiles in half the time.
  add_compile_options(-O1 ${_kvrelay_san})
  add_link_options(${_kvrelay_san})
endif()
