#pragma once
// Bearer-token authentication of the ingest API (docs/protocol/ingest.md#authentication): every
// RelayIngest call must carry `authorization: Bearer <token>`, the token being the content of
// --ingest-token-file without surrounding whitespace. The file is watched, not read once:
// every check stats it and re-reads it when it changed (another inode, size, modification or
// change time), so a rotated token applies from the next call without a restart, and the old
// one is refused from then on. The messages of a stream opened earlier are checked again as
// they arrive (recheck), against the token in force, so a rotation also ends the streams of
// the old token. A file that becomes unreadable or holds no token a client could send keeps
// the last good token in force and logs an error (rate-limited): a botched rotation must not
// lock every feeder out. Checks run concurrently on gRPC threads.
#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rate_limited_log.hpp"

namespace kvrelay::gateway {

class IngestAuth {
 public:
  enum class Verdict { kAccepted, kMissing, kInvalid };

  // Reads the token file; an error when it cannot be read or holds no token (the relay then
  // refuses to start).
  static std::expected<std::unique_ptr<IngestAuth>, std::string> open(std::string path);

  // The verdict on one call's `authorization` metadata values: kMissing without any; accepted
  // only for exactly one, "Bearer <token>" with the file's current token.
  Verdict check(const std::vector<std::string_view>& authorization) ABSL_LOCKS_EXCLUDED(mutex_);
  // The same verdict for the next message of a stream admitted earlier. The file is looked at
  // again only once kRecheckInterval has passed since it last was (any call's check looks at
  // once), so that a busy stream's messages cost a clock read, not a stat, each.
  Verdict recheck(const std::vector<std::string_view>& authorization) ABSL_LOCKS_EXCLUDED(mutex_);
  static constexpr std::chrono::milliseconds kRecheckInterval{1000};

  const std::string& path() const { return path_; }

 private:
  // One version of the file: a replacement (a rename, a Kubernetes Secret update) changes the
  // inode, an edit in place the size or the times, a chmod the change time.
  struct Stamp {
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::int64_t size = 0;
    std::int64_t modified_ns = 0;
    std::int64_t changed_ns = 0;
    bool operator==(const Stamp&) const = default;
  };

  IngestAuth(std::string path, std::string token, std::optional<Stamp> stamp)
      : path_(std::move(path)), token_(std::move(token)), stamp_(stamp) {}

  static std::optional<Stamp> stamp_of(const std::string& path);
  Verdict verdict(const std::vector<std::string_view>& authorization, bool look_now) ABSL_LOCKS_EXCLUDED(mutex_);
  // Re-reads the file if its stamp moved since the last read.
  void refresh_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string path_;
  RateLimitedLog errors_;
  absl::Mutex mutex_;
  std::string token_ ABSL_GUARDED_BY(mutex_);                                // the last good token: never empty
  std::optional<Stamp> stamp_ ABSL_GUARDED_BY(mutex_);                       // of the last good version read
  std::chrono::steady_clock::time_point looked_at_ ABSL_GUARDED_BY(mutex_);  // the file's last stat
};

}  // namespace kvrelay::gateway
