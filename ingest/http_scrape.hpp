#pragma once
// Blocking HTTP GETs (engines' Prometheus pages) on threads of their own, so that the scraper
// actors never block: a scrape is handed over, its result comes back by callback. A thread is
// added whenever a GET would otherwise wait (up to a bound), so engines that answer slowly hold
// their own threads, not the healthy engines' scrapes.
#include <chrono>
#include <condition_variable>
#include <cstdint>
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

  // One thread to begin with; more as GETs overlap, up to `max_threads`, kept once made.
  explicit HttpScraper(std::size_t max_threads);
  ~HttpScraper();  // aborts the GETs in progress and drops the queued ones, unanswered
  HttpScraper(const HttpScraper&) = delete;
  HttpScraper& operator=(const HttpScraper&) = delete;

  // `done` runs on a scrape thread.
  void get(std::string url, std::chrono::milliseconds timeout, std::function<void(HttpResult)> done);
  // Threads made so far.
  std::size_t threads() const;

 private:
  struct Job {
    std::string url;
    std::chrono::milliseconds timeout;
    std::function<void(HttpResult)> done;
  };
  void run(const std::stop_token& stopping);

  void add_thread();  // with mutex_ held

  const std::size_t max_threads_;
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<Job> jobs_;               // guarded by mutex_
  std::size_t idle_threads_ = 0;       // guarded by mutex_: threads not on a job
  std::vector<std::jthread> threads_;  // guarded by mutex_ while GETs are handed over
};

// Ends a GET that outlives its deadline or whose caller cancels it: httplib's own timeouts bound
// each read, not the whole response. One thread of its own serves every GET its owner makes, one
// at a time (a scrape thread keeps one for all its GETs).
class GetWatchdog {
 public:
  enum class Stopped { kNo, kExpired, kCancelled };

  GetWatchdog();
  ~GetWatchdog();
  GetWatchdog(const GetWatchdog&) = delete;
  GetWatchdog& operator=(const GetWatchdog&) = delete;

  // Calls stop_get once `deadline` passes or `cancel` is requested, and again every tick after
  // that (a stop that lands before the request has its socket stops nothing), until end_watch.
  void begin_watch(std::function<void()> stop_get, std::chrono::steady_clock::time_point deadline,
                   std::stop_token cancel);
  // Wakes the watchdog to look at its GET's cancel token again.
  void recheck();
  // Once it returns stop_get is never called again. Whether, and why, the GET was stopped.
  Stopped end_watch();

 private:
  void run(const std::stop_token& over);

  std::mutex mutex_;
  std::condition_variable_any changed_;
  // All guarded by mutex_. stop_get_ is empty while no GET is watched.
  std::function<void()> stop_get_;
  std::chrono::steady_clock::time_point deadline_;
  std::stop_token cancel_;
  Stopped stopped_ = Stopped::kNo;
  std::uint64_t generation_ = 0;  // counts begin_watch and end_watch calls
  std::jthread thread_;           // declared last: stopped and joined before the rest goes
};

// The whole GET, from connecting to the last byte of the page, ends within `timeout`: a server
// that trickles its status line, headers or body fails it. A stop requested on `cancel` ends it
// at once (unanswered pages never hold a thread the relay is waiting to join).
HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout, GetWatchdog& watchdog,
                    const std::stop_token& cancel = {});
// The same, with a watchdog of its own: for one-off GETs.
HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout);

}  // namespace kvrelay::engine_io
