#pragma once
// The process's limit on open files. Every engine source holds about four descriptors (five or
// six while it replays: its sockets' wake-up descriptors and its connections), so the usual
// soft limit of 1 024 would stop a relay short of 250 sources; the relay raises it to the hard
// limit at start (docs/protocol/limits.md#engine-messages).
#include <cstdint>
#include <string>

namespace kvrelay {

struct OpenFilesLimit {
  std::uint64_t before = 0;  // the soft limit found
  std::uint64_t now = 0;     // the soft limit in force
  std::string error;         // why it could not be read or raised; empty when it was
};

// Raises the soft limit on open files to the hard one, as far as the system allows.
OpenFilesLimit raise_open_files_limit();

}  // namespace kvrelay
