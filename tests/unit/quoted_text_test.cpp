// Untrusted text in error messages (core/quoted_text.hpp): quoted, cut, escaped.
#include <catch2/catch.hpp>

#include <string>

#include "core/quoted_text.hpp"

namespace kvrelay {

TEST_CASE("untrusted text is quoted whole up to the bound and cut past it", "[quoted_text]") {
  CHECK(quoted_excerpt("") == "\"\"");
  CHECK(quoted_excerpt("vllm:kv_cache_usage_perc") == "\"vllm:kv_cache_usage_perc\"");
  const std::string at_bound(kMaxQuotedBytes, 'a');
  CHECK(quoted_excerpt(at_bound) == "\"" + at_bound + "\"");
  CHECK(quoted_excerpt(at_bound + "b") == "\"" + at_bound + "...\"");
}

TEST_CASE("bytes that could forge or break a log line are escaped", "[quoted_text]") {
  CHECK(quoted_excerpt("a\nb") == "\"a\\x0ab\"");
  CHECK(quoted_excerpt("say \"hi\"") == "\"say \\x22hi\\x22\"");
  CHECK(quoted_excerpt("back\\slash") == "\"back\\x5cslash\"");
  CHECK(quoted_excerpt(std::string("nul\0", 4)) == "\"nul\\x00\"");
  CHECK(quoted_excerpt("caf\xc3\xa9") == "\"caf\\xc3\\xa9\"");
}

TEST_CASE("one_line keeps text whole but escapes what would end or forge a log line", "[quoted_text]") {
  CHECK(one_line("endpoint tcp://engine:5557") == "endpoint tcp://engine:5557");
  CHECK(one_line("a\nERROR forged\r\x1b[31m") == "a\\x0aERROR forged\\x0d\\x1b[31m");
  CHECK(one_line("caf\xc3\xa9 \"quoted\"") == "caf\xc3\xa9 \"quoted\"");  // UTF-8 and quotes stay
}

}  // namespace kvrelay
