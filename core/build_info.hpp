#pragma once
// What was built: the project's version and the commit it was built from ("unknown" outside a
// git checkout), as `--version` and kv_relay_build_info show them.
#include <string>
#include <string_view>

namespace kvrelay {

std::string_view build_version();
std::string_view build_revision();
// "PROGRAM VERSION (revision COMMIT)", as `--version` prints it.
std::string version_line(std::string_view program);

}  // namespace kvrelay
