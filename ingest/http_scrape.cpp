#include "ingest/http_scrape.hpp"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>

#include "core/network_address.hpp"
#include "core/sigpipe_blocked.hpp"

namespace kvrelay::engine_io {

std::optional<HttpUrl> parse_http_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return std::nullopt;
  const auto path_start = url.find('/', kScheme.size());
  HttpUrl parsed{url.substr(0, path_start), path_start == std::string::npos ? "/" : url.substr(path_start)};
  if (host_port_problem(std::string_view(parsed.origin).substr(kScheme.size()), false)) return std::nullopt;
  return parsed;
}

GetWatchdog::GetWatchdog() : thread_([this](const std::stop_token& over) { run(over); }) {}

GetWatchdog::~GetWatchdog() {
  thread_.request_stop();  // wakes the wait, which is stop-aware
}

void GetWatchdog::begin_watch(std::function<void()> stop_get, std::chrono::steady_clock::time_point deadline,
                              std::stop_token cancel) {
  {
    std::lock_guard lock(mutex_);
    stop_get_ = std::move(stop_get);
    deadline_ = deadline;
    cancel_ = std::move(cancel);
    stopped_ = Stopped::kNo;
    ++generation_;
  }
  changed_.notify_all();
}

void GetWatchdog::recheck() {
  { std::lock_guard lock(mutex_); }  // the watchdog is either before its check or waiting
  changed_.notify_all();
}

GetWatchdog::Stopped GetWatchdog::end_watch() {
  Stopped stopped;
  {
    // Taken while stop_get runs, so the GET's client outlives every call of it.
    std::lock_guard lock(mutex_);
    stop_get_ = nullptr;
    stopped = std::exchange(stopped_, Stopped::kNo);
    ++generation_;
  }
  changed_.notify_all();
  return stopped;
}

void GetWatchdog::run(const std::stop_token& over) {
  constexpr auto kTick = std::chrono::milliseconds(100);
  std::unique_lock lock(mutex_);
  while (!over.stop_requested()) {
    if (!stop_get_) {
      changed_.wait(lock, over, [this] { return static_cast<bool>(stop_get_); });
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (stopped_ == Stopped::kNo && now >= deadline_) stopped_ = Stopped::kExpired;
    if (stopped_ == Stopped::kNo && cancel_.stop_requested()) stopped_ = Stopped::kCancelled;
    if (stopped_ != Stopped::kNo) stop_get_();
    const auto next = stopped_ == Stopped::kNo ? deadline_ : now + kTick;
    const std::uint64_t watching = generation_;
    changed_.wait_until(lock, over, next, [&] {
      return generation_ != watching || (stopped_ == Stopped::kNo && cancel_.stop_requested());
    });
  }
}

namespace {

// A GET watched from its start to its end, whatever way it ends.
class WatchedGet {
 public:
  WatchedGet(GetWatchdog& watchdog, httplib::Client& client, std::chrono::milliseconds timeout,
             const std::stop_token& cancel)
      : watchdog_(watchdog), timeout_(timeout) {
    watchdog_.begin_watch([&client] { client.stop(); }, std::chrono::steady_clock::now() + timeout, cancel);
    wake_on_cancel_.emplace(cancel, [this] { watchdog_.recheck(); });
  }
  ~WatchedGet() {
    if (!ended_) end();
  }
  WatchedGet(const WatchedGet&) = delete;
  WatchedGet& operator=(const WatchedGet&) = delete;

  // Ends the watch; why the GET was stopped, if it was: the error it failed with says so.
  std::optional<std::string> end() {
    wake_on_cancel_.reset();
    ended_ = true;
    switch (watchdog_.end_watch()) {
      case GetWatchdog::Stopped::kExpired:
        return "the page took longer than " + std::to_string(timeout_.count()) + " ms to arrive";
      case GetWatchdog::Stopped::kCancelled:
        return std::string("the scrape was cancelled");
      case GetWatchdog::Stopped::kNo:
        break;
    }
    return std::nullopt;
  }

 private:
  GetWatchdog& watchdog_;
  std::chrono::milliseconds timeout_;
  bool ended_ = false;
  std::optional<std::stop_callback<std::function<void()>>> wake_on_cancel_;
};

}  // namespace

HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout, GetWatchdog& watchdog,
                    const std::stop_token& cancel) {
  const SigpipeBlocked sigpipe_blocked;  // a GET stopped while its request goes out gets EPIPE
  const auto parsed = parse_http_url(url);
  if (!parsed) return {false, {}, "not an http:// URL"};
  httplib::Client client(parsed->origin);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout - seconds);
  client.set_connection_timeout(seconds.count(), micros.count());
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  HttpResult result;
  bool too_big = false;
  // A page trickled in small pieces, or headers trickled before it, would otherwise hold a
  // scrape thread for as long as the server likes.
  WatchedGet watched(watchdog, client, timeout, cancel);
  const auto response = client.Get(parsed->path, [&](const char* data, std::size_t length) {
    result.body.append(data, length);
    too_big = result.body.size() > HttpScraper::kMaxBodyBytes;
    return !too_big;
  });
  const auto stopped = watched.end();
  if (too_big) return {false, {}, "the page is larger than 16 MiB"};
  if (stopped) return {false, {}, *stopped};
  if (!response) return {false, {}, httplib::to_string(response.error())};
  if (response->status != 200) return {false, {}, "HTTP status " + std::to_string(response->status)};
  result.ok = true;
  return result;
}

HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout) {
  GetWatchdog watchdog;
  return http_get(url, timeout, watchdog);
}

HttpScraper::HttpScraper(std::size_t max_threads) : max_threads_(std::max<std::size_t>(max_threads, 1)) {
  std::lock_guard lock(mutex_);
  add_thread();
}

// A thread counts as idle from its start: it takes a job as soon as it runs.
void HttpScraper::add_thread() {
  threads_.emplace_back([this](const std::stop_token& stopping) { run(stopping); });
  ++idle_threads_;
}

std::size_t HttpScraper::threads() const {
  std::lock_guard lock(mutex_);
  return threads_.size();
}

HttpScraper::~HttpScraper() {
  std::vector<std::jthread> threads;
  {
    std::lock_guard lock(mutex_);
    for (auto& thread : threads_) thread.request_stop();  // also cancels the GETs in progress
    jobs_.clear();
    threads = std::move(threads_);
  }
  threads.clear();  // joins, outside the lock the threads take
}

void HttpScraper::get(std::string url, std::chrono::milliseconds timeout, std::function<void(HttpResult)> done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(url), timeout, std::move(done)});
    if (jobs_.size() > idle_threads_ && threads_.size() < max_threads_) {
      try {
        add_thread();
      } catch (const std::system_error& error) {  // no thread to be had (a pids limit): the job waits its turn
        spdlog::warn("engine metrics: no thread for another scrape ({}); {} scrape threads go on", error.what(),
                     threads_.size());
      }
    }
  }
  wake_.notify_one();
}

void HttpScraper::run(const std::stop_token& stopping) {
  GetWatchdog watchdog;
  std::unique_lock lock(mutex_);  // idle, as counted since add_thread and again after each job
  for (;;) {
    if (!wake_.wait(lock, stopping, [this] { return !jobs_.empty(); })) return;  // stopping
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_threads_;
    lock.unlock();
    HttpResult result;
    try {
      result = http_get(job.url, job.timeout, watchdog, stopping);
    } catch (const std::exception& error) {  // the client library's own: a failed scrape, not a dead thread
      result = {false, {}, std::string("the HTTP client failed: ") + error.what()};
    }
    if (stopping.stop_requested()) return;  // the scraper is going: nobody waits for the answer
    job.done(std::move(result));
    lock.lock();
    ++idle_threads_;
  }
}

}  // namespace kvrelay::engine_io
