#include "core/build_info.hpp"

namespace kvrelay {

std::string_view build_version() { return KVRELAY_VERSION; }
std::string_view build_revision() { return KVRELAY_REVISION; }

}  // namespace kvrelay
