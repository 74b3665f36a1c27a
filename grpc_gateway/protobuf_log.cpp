#include "grpc_gateway/protobuf_log.hpp"

#include <fmt/format.h>
#include <google/protobuf/stubs/logging.h>

#include <mutex>

#include "core/rate_limited_log.hpp"

namespace kvrelay::gateway {
namespace {

void log_protobuf_report(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  static RateLimitedLog reports;
  if (level == google::protobuf::LOGLEVEL_INFO) {
    return spdlog::debug("libprotobuf ({}:{}): {}", file, line, one_line(message));
  }
  // libprotobuf throws after a fatal report: it is never held back.
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    return spdlog::critical("libprotobuf ({}:{}): {}", file, line, one_line(message));
  }
  reports.warn(fmt::format("libprotobuf ({}:{}): {}", file, line, message));
}

}  // namespace

void route_protobuf_log() {
  static std::once_flag routed;
  std::call_once(routed, [] { google::protobuf::SetLogHandler(&log_protobuf_report); });
}

}  // namespace kvrelay::gateway
