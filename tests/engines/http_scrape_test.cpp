// The engine metrics client (ingest/http_scrape.hpp) against a real HTTP server on loopback:
// the addresses it accepts, a page or headers that arrive too slowly, and a scraper that goes
// away while a GET is in progress, and one watchdog serving GET after GET.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stop_token>
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

namespace {

// A server that answers one connection with a status line, then one header line every 50 ms
// (well within a read timeout) for up to 30 s, then an empty page: an engine that trickles its
// headers. It stops early once the client is gone.
class TricklingServer {
 public:
  TricklingServer() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(listen(listener_, 1) == 0);
    socklen_t length = sizeof address;
    REQUIRE(getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/metrics";
    serving_ = std::thread([this] { serve(); });
  }
  ~TricklingServer() {
    shutdown(listener_, SHUT_RDWR);  // wakes an accept still waiting for a client that never came
    serving_.join();
    close(listener_);
  }
  const std::string& url() const { return url_; }
  // Once a client has connected: its GET is in progress.
  bool await_accepted() {
    std::unique_lock lock(mutex_);
    return accepted_changed_.wait_for(lock, std::chrono::seconds(30), [this] { return accepted_; });
  }

 private:
  void serve() {
    const int connection = accept(listener_, nullptr, nullptr);
    if (connection < 0) return;
    {
      std::lock_guard lock(mutex_);
      accepted_ = true;
    }
    accepted_changed_.notify_all();
    const auto send_text = [&](std::string_view text) {
      return send(connection, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
    };
    bool client_there = send_text("HTTP/1.1 200 OK\r\n");
    for (int line = 0; client_there && line < 600; ++line) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the slow engine, not a wait in the test
      client_there = send_text("X-Slow: 1\r\n");
    }
    if (client_there) send_text("Content-Length: 0\r\n\r\n");
    close(connection);
  }

  int listener_ = -1;
  std::string url_;
  std::mutex mutex_;
  std::condition_variable accepted_changed_;
  bool accepted_ = false;  // guarded by mutex_
  std::thread serving_;
};

}  // namespace

TEST_CASE("http scrape: headers trickled in slower than the timeout as a whole fail the scrape", "[engines][http]") {
  TricklingServer server;
  const auto result = http_get(server.url(), std::chrono::milliseconds(1000));
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.error, Catch::Contains("took longer than 1000 ms"));
}

TEST_CASE("http scrape: a scraper that goes away abandons its GETs in progress, unanswered", "[engines][http]") {
  TricklingServer server;
  std::atomic<bool> answered = false;
  {
    kvrelay::engine_io::HttpScraper scraper(1);
    scraper.get(server.url(), std::chrono::seconds(60), [&](kvrelay::engine_io::HttpResult) { answered = true; });
    REQUIRE(server.await_accepted());
  }  // without the abort, this would wait out the server's 30 s and then answer
  CHECK_FALSE(answered.load());
}

namespace {

// A plain server answering /metrics with a one-line page, on a thread of its own.
class PageServer {
 public:
  PageServer() {
    server_.Get("/metrics", [](const httplib::Request&, httplib::Response& response) {
      response.set_content("kv_cache_usage 0.5\n", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    serving_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~PageServer() {
    server_.stop();
    serving_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/metrics"; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread serving_;
};

}  // namespace

TEST_CASE("http scrape: one watchdog serves GET after GET, a stopped one does not stop the next", "[engines][http]") {
  using kvrelay::engine_io::GetWatchdog;
  GetWatchdog watchdog;
  PageServer page;
  SECTION("after a GET that ran out of time") {
    TricklingServer slow;
    const auto expired = http_get(slow.url(), std::chrono::milliseconds(300), watchdog);
    CHECK_THAT(expired.error, Catch::Contains("took longer than 300 ms"));
  }
  SECTION("after a GET that was cancelled") {
    TricklingServer slow;
    kvrelay::engine_io::HttpResult cancelled;
    // A jthread: however the section ends, its destructor cancels the GET and joins.
    std::jthread getting(
        [&](std::stop_token cancel) { cancelled = http_get(slow.url(), std::chrono::seconds(60), watchdog, cancel); });
    REQUIRE(slow.await_accepted());
    getting.request_stop();
    getting.join();
    CHECK_FALSE(cancelled.ok);
    CHECK(cancelled.error == "the scrape was cancelled");
  }
  const auto next = http_get(page.url(), std::chrono::seconds(10), watchdog);
  CHECK(next.ok);
  CHECK(next.body == "kv_cache_usage 0.5\n");
}

TEST_CASE("http scrape: engines that answer slowly do not hold up another engine's scrape", "[engines][http]") {
  TricklingServer slow[4];
  PageServer healthy;
  std::promise<kvrelay::engine_io::HttpResult> answered;  // the healthy engine's
  std::atomic<int> slow_answers = 0;
  // Declared last, so it goes first: its GETs are abandoned before what they would answer goes.
  kvrelay::engine_io::HttpScraper scraper(4);
  CHECK(scraper.threads() == 1);
  // Each slow engine's GET in progress holds a thread: each made another.
  auto get_slowly = [&](TricklingServer& server) {
    scraper.get(server.url(), std::chrono::seconds(60), [&](kvrelay::engine_io::HttpResult) { ++slow_answers; });
    REQUIRE(server.await_accepted());
  };
  for (int i = 0; i < 3; ++i) get_slowly(slow[i]);
  CHECK(scraper.threads() == 3);
  scraper.get(healthy.url(), std::chrono::seconds(5),
              [&](kvrelay::engine_io::HttpResult got) { answered.set_value(std::move(got)); });
  auto result = answered.get_future();
  // The slow engines trickle for 30 s: queued behind them, the page would come no sooner.
  REQUIRE(result.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  const kvrelay::engine_io::HttpResult page = result.get();
  CHECK(page.ok);
  CHECK(page.body == "kv_cache_usage 0.5\n");
  CHECK(scraper.threads() == 4);
  // The healthy engine's thread, free again, takes a fourth slow engine: every thread is busy,
  // and at the most another GET waits for one instead of making a fifth.
  get_slowly(slow[3]);
  scraper.get(healthy.url(), std::chrono::seconds(5), [](kvrelay::engine_io::HttpResult) {});
  CHECK(scraper.threads() == 4);
  CHECK(slow_answers.load() == 0);
}
