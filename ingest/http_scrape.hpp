#pragma once
// Blocking HTTP GETs (engines' Prometheus pages) on a few threads of their own, so that the
// scraper actors never block: a scrape is handed over, its result comes back by callback.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace kvrelay::engine_io {

struct HttpResult {
  bool ok = false;    // a 200 with a complete body
  std::string body;   // the page when ok
  std::string error;  // why not, when not ok
};

// "http://host:port/path" split for the client; an error for anything else.
struct HttpUrl {
  std::string origin;  // http://host:port
  std::string path;    // /path (default "/")
};
std::optional<HttpUrl> parse_http_url(const std::string& url);

class HttpScraper {
 public:
  static constexpr std::size_t kMaxBodyBytes = 16u << 20;

  explicit HttpScraper(std::size_t threads);
  ~HttpScraper();  // aborts the GETs in progress and drops the queued ones, unanswered
  HttpScraper(const HttpScraper&) = delete;
  HttpScraper& operator=(const HttpScraper&) = delete;

  // `done` runs on a scrape thread.
  void get(std::string url, std::chrono::milliseconds timeout, std::function<void(HttpResult)> done);

 private:
  struct Job {
    std::string url;
    std::chrono::milliseconds timeout;
    std::function<void(HttpResult)> done;
  };
  void run(const std::stop_token& stopping);

  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<Job> jobs_;  // guarded by mutex_
  std::vector<std::jthread> threads_;
};

// The whole GET, from connecting to the last byte of the page, ends within `timeout`: a server
// that trickles its status line, headers or body fails it. A stop requested on `cancel` ends it
// at once (unanswered pages never hold a thread the relay is waiting to join).
HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout, const std::stop_token& cancel = {});

}  // namespace kvrelay::engine_io
