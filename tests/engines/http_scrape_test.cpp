// The engine metrics client (ingest/http_scrape.hpp) against a real HTTP server on loopback:
// the addresses it accepts, and a page that arrives too slowly.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <thread>

#include "ingest/http_scrape.hpp"

using kvrelay::engine_io::http_get;
using kvrelay::engine_io::parse_http_url;

TEST_CASE("http scrape: a URL's port is a number from 1 to 65535, or absent", "[engines][http]") {
  REQUIRE(parse_http_url("http://e:8000/metrics").has_value());
  CHECK(parse_http_url("http://e:8000/metrics")->origin == "http://e:8000");
  CHECK(parse_http_url("http://e/metrics").has_value());
  CHECK(parse_http_url("http://[::1]:9/metrics").has_value());
  CHECK_FALSE(parse_http_url("http://e:99999999999/metrics").has_value());  // std::stoi threw on it
  CHECK_FALSE(parse_http_url("http://e:65536/metrics").has_value());
  CHECK_FALSE(parse_http_url("http://e:0/metrics").has_value());
  CHECK_FALSE(parse_http_url("http://e:abc/metrics").has_value());
  CHECK_FALSE(parse_http_url("http://:80/metrics").has_value());
  CHECK_FALSE(parse_http_url("http:///metrics").has_value());
}

TEST_CASE("http scrape: a page trickled in slower than the timeout as a whole fails the scrape", "[engines][http]") {
  httplib::Server server;
  // Each piece well within the per-read timeout, the whole page far beyond it.
  server.Get("/metrics", [](const httplib::Request&, httplib::Response& response) {
    response.set_chunked_content_provider("text/plain", [](std::size_t, httplib::DataSink& sink) {
      for (int piece = 0; piece < 200 && sink.is_writable(); ++piece) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the slow engine, not a wait in the test
        if (!sink.write("# slow\n", 7)) return false;
      }
      sink.done();
      return true;
    });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { server.listen_after_bind(); });
  const auto result =
      http_get("http://127.0.0.1:" + std::to_string(port) + "/metrics", std::chrono::milliseconds(1000));
  server.stop();
  serving.join();
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.error, Catch::Contains("took longer than 1000 ms"));
}
