#include "grpc_gateway/ingest_auth.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/bearer_token.hpp"

namespace kvrelay::gateway {

namespace {

std::int64_t nanoseconds(const timespec& time) { return std::int64_t{time.tv_sec} * 1'000'000'000 + time.tv_nsec; }

std::expected<std::string, std::string> read_token(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::stringstream content;
  content << in.rdbuf();
  auto token = bearer::token_of_file(content.str());
  if (!token) return std::unexpected(fmt::format("{} {}", path, token.error()));
  return token;
}

}  // namespace

std::expected<std::unique_ptr<IngestAuth>, std::string> IngestAuth::open(std::string path) {
  // Stamped before it is read: a change during the read shows as a new stamp at the next check.
  const auto stamp = stamp_of(path);
  auto token = read_token(path);
  if (!token) return std::unexpected(token.error());
  return std::unique_ptr<IngestAuth>(new IngestAuth(std::move(path), std::move(*token), stamp));
}

std::optional<IngestAuth::Stamp> IngestAuth::stamp_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return Stamp{info.st_dev, info.st_ino, info.st_size, nanoseconds(info.st_mtim), nanoseconds(info.st_ctim)};
}

void IngestAuth::refresh_locked() {
  const auto stamp = stamp_of(path_);
  // A file that cannot be stat'ed or read (empty, unreadable) is retried at every check until
  // a good one is back, and each failure is logged (rate-limited).
  if (stamp && stamp == stamp_) return;
  auto token = read_token(path_);
  if (!token) {
    errors_.error(fmt::format("--ingest-token-file: {}; the previous token stays in force", token.error()));
    return;
  }
  stamp_ = stamp;  // the stamp from before the read: a change during it shows at the next check
  if (*token != token_) spdlog::info("--ingest-token-file {}: a new token is in force", path_);
  token_ = std::move(*token);
}

IngestAuth::Verdict IngestAuth::check(const std::vector<std::string_view>& authorization) {
  return verdict(authorization, true);
}

IngestAuth::Verdict IngestAuth::recheck(const std::vector<std::string_view>& authorization) {
  return verdict(authorization, false);
}

IngestAuth::Verdict IngestAuth::verdict(const std::vector<std::string_view>& authorization, bool look_now) {
  if (authorization.empty()) return Verdict::kMissing;
  absl::MutexLock lock(&mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (look_now || now - looked_at_ >= kRecheckInterval) {
    refresh_locked();
    looked_at_ = now;
  }
  if (authorization.size() != 1) return Verdict::kInvalid;
  const auto presented = bearer::token_of_metadata(authorization.front());
  if (!presented) return Verdict::kInvalid;
  return bearer::same_token(*presented, token_) ? Verdict::kAccepted : Verdict::kInvalid;
}

}  // namespace kvrelay::gateway
