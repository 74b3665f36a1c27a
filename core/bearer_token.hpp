#pragma once
// The bearer token of the ingest API (docs/protocol/ingest.md#authentication): what a token
// file holds, how a client sends it and how the relay compares it. Shared by the relay, which
// checks it, and by the repository's ingest clients (kvrelay-cli, the demo), which send it.
#include <cstddef>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace kvrelay::bearer {

// The gRPC metadata key a client sends the token in (lower case, as HTTP/2 requires).
inline constexpr std::string_view kMetadataKey = "authorization";

// The longest token a file may hold: with "Bearer " it stays well inside the 8 KiB of
// metadata gRPC takes by default.
inline constexpr std::size_t kMaxTokenBytes = 4096;

// The token a token file holds: its content without surrounding whitespace (a file written
// by `echo` or a Kubernetes Secret may end in a newline). A copy, so that it outlives the
// buffer the file was read into. Or why the file holds no token a client could send: it is
// empty, or the token has whitespace inside (two lines?), a byte that is not visible ASCII
// (gRPC carries none in metadata), or more than kMaxTokenBytes.
std::expected<std::string, std::string> token_of_file(std::string_view content);

// The metadata value that carries `token`: "Bearer <token>".
std::string metadata_value(std::string_view token);

// The token of a metadata value "Bearer <token>" (the scheme in any case, RFC 7235), or
// nullopt when the value is not of that form.
std::optional<std::string_view> token_of_metadata(std::string_view value);

// Whether `presented` is `expected`, in a time that depends only on the length of
// `presented`: how long a refusal takes says nothing about how much of a guess was right.
bool same_token(std::string_view presented, std::string_view expected);

}  // namespace kvrelay::bearer
