# Project code builds warning-free: -Wall -Wextra -Werror (generated protobuf code is exempt).
function(kvrelay_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()
