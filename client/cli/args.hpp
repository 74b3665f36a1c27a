#pragma once
// kvrelay-cli's command line: one command, then flags shared by every command.
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

namespace kvrelay::cli {

inline constexpr int kOk = 0;
inline constexpr int kRelayError = 1;  // unreachable relay, error status, timeout
inline constexpr int kUsageError = 2;
inline constexpr int kContractMismatch = 3;  // the relay speaks another contract
inline constexpr int kInvalidInput = 4;      // an invalid file (tokens, CBI1 frame)

struct Args {
  std::string command;
  std::vector<std::string> targets;  // empty: the command's default
  bool watch = false;
  bool json = false;
  std::optional<std::string> model;
  std::optional<std::string> tokens_file;
  std::optional<std::string> file;  // decode-frame's positional FILE
  std::uint32_t block_size = 0;
  bool eagle = false;
  std::string lora;
  std::string cache_namespace;
  std::uint32_t interval_ms = 1000;
  std::uint32_t timeout_ms = 10000;
  std::uint32_t iterations = 0;  // top: 0 = until interrupted
  // state: the relay's --ingest-token-file, when its ingest API needs credentials (the flag, or
  // else KV_RELAY_INGEST_TOKEN_FILE).
  std::optional<std::string> ingest_token_file;
};

// `ingest_token_file` falls back to the environment's KV_RELAY_INGEST_TOKEN_FILE, the variable
// the relay reads the same flag from.
std::expected<Args, std::string> parse_args(const std::vector<std::string>& argv,
                                            std::optional<std::string> token_file_variable = std::nullopt);
extern const char* const kUsage;

// Token ids separated by whitespace and/or commas; nullopt after printing why the file is unusable.
std::optional<std::vector<std::uint32_t>> read_tokens(const std::string& path);

// The bearer token a token file holds (without surrounding whitespace); nullopt after printing
// why the file is unusable.
std::optional<std::string> read_ingest_token(const std::string& path);

}  // namespace kvrelay::cli
