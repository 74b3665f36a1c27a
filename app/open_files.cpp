#include "app/open_files.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace kvrelay {

OpenFilesLimit raise_open_files_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return {0, 0, std::string("getrlimit: ") + std::strerror(errno)};
  OpenFilesLimit result{limit.rlim_cur, limit.rlim_cur, {}};
  if (limit.rlim_cur >= limit.rlim_max) return result;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    result.error = std::string("setrlimit: ") + std::strerror(errno);
    return result;
  }
  result.now = limit.rlim_cur;
  return result;
}

}  // namespace kvrelay
