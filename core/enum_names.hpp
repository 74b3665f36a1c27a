#pragma once
// The wire's enum values as the relay's logs and the CLI write them: the name without its type
// prefix (WORKER_ROLE_DECODE -> DECODE), or "?N" for a value this build does not know.
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay {

inline std::string short_name(const std::string& name, std::string_view prefix) {
  return name.starts_with(prefix) ? name.substr(prefix.size()) : name;
}
inline std::string role_name(int role) {
  namespace v1 = ::dynamo::kvrelay::v1;
  return v1::WorkerRole_IsValid(role) ? short_name(v1::WorkerRole_Name(role), "WORKER_ROLE_")
                                      : fmt::format("?{}", role);
}
inline std::string state_name(int state) {
  namespace v1 = ::dynamo::kvrelay::v1;
  return v1::ServingReadinessState_IsValid(state)
             ? short_name(v1::ServingReadinessState_Name(state), "SERVING_READINESS_STATE_")
             : fmt::format("?{}", state);
}
inline std::string data_status_name(int status) {
  namespace v1 = ::dynamo::kvrelay::v1;
  return v1::DataStatus_IsValid(status) ? short_name(v1::DataStatus_Name(status), "DATA_STATUS_")
                                        : fmt::format("?{}", status);
}

}  // namespace kvrelay
