# KVRELAY_SANITIZE=ON builds everything with AddressSanitizer + UndefinedBehaviorSanitizer.
option(KVRELAY_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(KVRELAY_SANITIZE)
  set(_kvrelay_san -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_compile_options(${_kvrelay_san})
  add_link_options(${_kvrelay_san})
endif()
