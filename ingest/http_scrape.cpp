#include "ingest/http_scrape.hpp"

#include <httplib.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <optional>

#include "core/network_address.hpp"

namespace kvrelay::engine_io {

std::optional<HttpUrl> parse_http_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return std::nullopt;
  const auto path_start = url.find('/', kScheme.size());
  HttpUrl parsed{url.substr(0, path_start), path_start == std::string::npos ? "/" : url.substr(path_start)};
  if (host_port_problem(std::string_view(parsed.origin).substr(kScheme.size()), false)) return std::nullopt;
  return parsed;
}

namespace {

// Stops a GET's client once its deadline passes or the caller cancels it, and again every
// tick after that (a stop that lands before the request has its socket stops nothing), until
// the GET is over. httplib's own timeouts bound each read, not the whole response.
class GetWatchdog {
 public:
  GetWatchdog(httplib::Client& client, std::chrono::steady_clock::time_point deadline, std::stop_token cancel)
      : thread_([this, &client, deadline, cancel](const std::stop_token& over) {
          constexpr auto kTick = std::chrono::milliseconds(100);
          std::mutex mutex;
          std::condition_variable_any never_notified;
          std::unique_lock lock(mutex);
          while (!over.stop_requested()) {
            const auto now = std::chrono::steady_clock::now();
            const bool expired = now >= deadline;
            if (expired || cancel.stop_requested()) {
              why_.store(expired ? Why::kExpired : Why::kCancelled);
              client.stop();
            }
            const auto next = expired ? now + kTick : std::min(deadline, now + kTick);
            never_notified.wait_until(lock, over, next, [] { return false; });
          }
        }) {}

  // Why the GET was stopped, if it was: the error it failed with says so.
  std::optional<std::string> reason(std::chrono::milliseconds timeout) const {
    switch (why_.load()) {
      case Why::kExpired:
        return "the page took longer than " + std::to_string(timeout.count()) + " ms to arrive";
      case Why::kCancelled:
        return std::string("the scrape was cancelled");
      case Why::kRunning:
        break;
    }
    return std::nullopt;
  }

 private:
  enum class Why { kRunning, kExpired, kCancelled };
  std::atomic<Why> why_{Why::kRunning};
  std::jthread thread_;  // declared last: stopped and joined before the rest goes
};

}  // namespace

HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout, const std::stop_token& cancel) {
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
  // A page trickled in small pieces, or headers trickled before it, would otherwise hold one
  // of the few scrape threads for as long as the server likes.
  const GetWatchdog watchdog(client, std::chrono::steady_clock::now() + timeout, cancel);
  const auto response = client.Get(parsed->path, [&](const char* data, std::size_t length) {
    result.body.append(data, length);
    too_big = result.body.size() > HttpScraper::kMaxBodyBytes;
    return !too_big;
  });
  if (too_big) return {false, {}, "the page is larger than 16 MiB"};
  if (auto stopped = watchdog.reason(timeout)) return {false, {}, std::move(*stopped)};
  if (!response) return {false, {}, httplib::to_string(response.error())};
  if (response->status != 200) return {false, {}, "HTTP status " + std::to_string(response->status)};
  result.ok = true;
  return result;
}

HttpScraper::HttpScraper(std::size_t threads) {
  for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i) {
    threads_.emplace_back([this](const std::stop_token& stopping) { run(stopping); });
  }
}

HttpScraper::~HttpScraper() {
  for (auto& thread : threads_) thread.request_stop();  // also cancels the GETs in progress
  {
    std::lock_guard lock(mutex_);
    jobs_.clear();
  }
  threads_.clear();  // joins
}

void HttpScraper::get(std::string url, std::chrono::milliseconds timeout, std::function<void(HttpResult)> done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(url), timeout, std::move(done)});
  }
  wake_.notify_one();
}

void HttpScraper::run(const std::stop_token& stopping) {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      if (!wake_.wait(lock, stopping, [this] { return !jobs_.empty(); })) return;  // stopping
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    HttpResult result;
    try {
      result = http_get(job.url, job.timeout, stopping);
    } catch (const std::exception& error) {  // the client library's own: a failed scrape, not a dead thread
      result = {false, {}, std::string("the HTTP client failed: ") + error.what()};
    }
    if (stopping.stop_requested()) return;  // the scraper is going: nobody waits for the answer
    job.done(std::move(result));
  }
}

}  // namespace kvrelay::engine_io
