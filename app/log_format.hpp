#pragma once
// The relay's log lines: one line per message, whatever outside text a message quotes. Names
// from the topology file or the ingest API (a namespace, an engine's endpoint, a scrape URL)
// are valid with a line break inside; logged as they are, one could forge a line of its own.
#include <spdlog/formatter.h>

#include <memory>

namespace kvrelay {

// spdlog's default line, "[time] [level] message" (the level coloured on a terminal), with the
// message's control bytes escaped
// as core/quoted_text.hpp's one_line() escapes them.
std::unique_ptr<spdlog::formatter> one_line_formatter();

}  // namespace kvrelay
