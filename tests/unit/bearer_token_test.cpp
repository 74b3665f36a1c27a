// The ingest API's bearer token (docs/protocol/ingest.md#authentication): what a token file
// holds, the metadata a client sends, and the comparison.
#include <catch2/catch.hpp>

#include "core/bearer_token.hpp"

using namespace kvrelay;

TEST_CASE("bearer: a token file's token is its content without surrounding whitespace", "[bearer]") {
  CHECK(bearer::token_of_file("s3cret") == "s3cret");
  CHECK(bearer::token_of_file("s3cret\n") == "s3cret");
  CHECK(bearer::token_of_file(" \t s3cret \r\n") == "s3cret");
  CHECK(bearer::token_of_file(std::string(bearer::kMaxTokenBytes, 'x')) == std::string(bearer::kMaxTokenBytes, 'x'));
}

TEST_CASE("bearer: a token file holds no token when no client could send what it holds", "[bearer]") {
  const auto why = [](std::string_view content) { return bearer::token_of_file(content).error(); };
  CHECK(why("") == "holds no token (it is empty or only whitespace)");
  CHECK(why(" \n\t\r\n") == "holds no token (it is empty or only whitespace)");
  // `openssl rand -base64 64` wraps its output onto two lines.
  CHECK(why("abc\ndef\n") == "holds whitespace inside its token (at byte 3: is it on two lines?)");
  CHECK(why("two words") == "holds whitespace inside its token (at byte 3)");
  CHECK(why("tok\x07"
            "en") == "holds a byte no client can send in its token (0x07 at byte 3: visible ASCII only)");
  CHECK(why("caf\xc3\xa9") == "holds a byte no client can send in its token (0xc3 at byte 3: visible ASCII only)");
  CHECK(why(std::string(bearer::kMaxTokenBytes + 1, 'x')) == "holds a token of 4097 bytes, more than 4096");
}

TEST_CASE("bearer: the metadata value is 'Bearer <token>', the scheme in any case", "[bearer]") {
  CHECK(bearer::metadata_value("s3cret") == "Bearer s3cret");
  CHECK(bearer::token_of_metadata("Bearer s3cret") == "s3cret");
  CHECK(bearer::token_of_metadata("bearer s3cret") == "s3cret");
  CHECK(bearer::token_of_metadata("BEARER s3cret") == "s3cret");
  for (const char* malformed : {"s3cret", "Bearer", "Bearer ", "Basic s3cret", "Bearers s3cret", "Bearer  s3cret",
                                "Bearer s3cret ", "Bearer s3 cret"}) {
    INFO(malformed);
    CHECK_FALSE(bearer::token_of_metadata(malformed).has_value());
  }
}

TEST_CASE("bearer: tokens match only when equal", "[bearer]") {
  CHECK(bearer::same_token("s3cret", "s3cret"));
  CHECK_FALSE(bearer::same_token("s3creT", "s3cret"));
  CHECK_FALSE(bearer::same_token("s3cre", "s3cret"));
  CHECK_FALSE(bearer::same_token("s3crets", "s3cret"));
  CHECK_FALSE(bearer::same_token("s3crets3cret", "s3cret"));  // the expected token cycled is not a match
  CHECK_FALSE(bearer::same_token("", "s3cret"));
  CHECK_FALSE(bearer::same_token("", ""));  // there is never an empty token to match
}
