#pragma once
// Shared rendering of wire values for the CLI's tables.
#include <fmt/format.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <string>

#include "core/pool_label.hpp"
#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay::cli {

namespace v1 = ::dynamo::kvrelay::v1;

inline std::string json_of(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &text, options);
  return text;
}

// Enum names without their type prefix: WORKER_ROLE_DECODE -> DECODE.
inline std::string short_name(const std::string& name, std::string_view prefix) {
  return name.starts_with(prefix) ? name.substr(prefix.size()) : name;
}
inline std::string role_name(int role) {
  return v1::WorkerRole_IsValid(role) ? short_name(v1::WorkerRole_Name(role), "WORKER_ROLE_")
                                      : fmt::format("?{}", role);
}
inline std::string state_name(int state) {
  return v1::ServingReadinessState_IsValid(state)
             ? short_name(v1::ServingReadinessState_Name(state), "SERVING_READINESS_STATE_")
             : fmt::format("?{}", state);
}
inline std::string data_status_name(int status) {
  return v1::DataStatus_IsValid(status) ? short_name(v1::DataStatus_Name(status), "DATA_STATUS_")
                                        : fmt::format("?{}", status);
}
// An optional figure of a serving-load window: "-" when unset (its view is not COMPLETE).
inline std::string gauge(bool set, std::uint64_t value) { return set ? std::to_string(value) : "-"; }
// A model's requests in flight, awaiting their first token / generating.
inline std::string in_flight(const v1::RequestLifecycleStats& requests) {
  if (!requests.has_requests_awaiting_first_token() || !requests.has_requests_generating()) return "-";
  return fmt::format("{}/{}", requests.requests_awaiting_first_token(), requests.requests_generating());
}
template <class Roles>
std::string roles_of(const Roles& roles) {
  std::string out;
  for (int role : roles) out += (out.empty() ? "" : ",") + role_name(role);
  return out.empty() ? "-" : out;
}
using ::kvrelay::pool_label;

}  // namespace kvrelay::cli
