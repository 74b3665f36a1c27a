#pragma once
// What libprotobuf reports of the messages it parses, in the relay's log. Parsing a request
// whose string field is not valid UTF-8 makes libprotobuf print an error line of its own to
// stderr, once per request: any client could flood the log. Routed here, such reports are
// warnings through spdlog, at most one a second with a count of the rest
// (core/rate_limited_log.hpp), as every report of rejected input is.
namespace kvrelay::gateway {

// Process-wide and idempotent; call it before serving (libprotobuf's handler is not
// thread-safe to replace). A fatal report (libprotobuf then throws FatalException) is logged
// critical and never held back.
void route_protobuf_log();

}  // namespace kvrelay::gateway
