// The ingest API's bearer token (docs/protocol/ingest.md#authentication): what a token file
// holds, the metadata a client sends, and the comparison.
#include <catch2/catch.hpp>

#include "core/bearer_token.hpp"

using namespace kvrelay;

TEST_CASE("bearer: a token file's token is its content without surrounding whitespace", "[bearer]") {
  CHECK(bearer::token_of_file("s3cret") == "s3cret");
  CHECK(bearer::token_of_file("s3cret\n") == "s3cret");
  CHECK(bearer::token_of_file(" \t s3cret \r\n") == "s3cret");
  CHECK(bearer::token_of_file("two words\n") == "two words");  // inner whitespace is kept (and then never matches)
  CHECK(bearer::token_of_file("").empty());
  CHECK(bearer::token_of_file(" \n\t\r\n").empty());
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
