#include "core/build_info.hpp"

#include <fmt/format.h>

namespace kvrelay {

std::string_view build_version() { return KVRELAY_VERSION; }
std::string_view build_revision() { return KVRELAY_REVISION; }

std::string version_line(std::string_view program) {
  return fmt::format("{} {} (revision {})", program, build_version(), build_revision());
}

}  // namespace kvrelay
