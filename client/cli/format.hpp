#pragma once
// Shared rendering of wire values for the CLI's tables.
#include <fmt/format.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <string>

#include "core/enum_names.hpp"
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
