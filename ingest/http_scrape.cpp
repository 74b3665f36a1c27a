#include "ingest/http_scrape.hpp"

#include <httplib.h>

#include <exception>

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

HttpResult http_get(const std::string& url, std::chrono::milliseconds timeout) {
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
  bool too_slow = false;
  // The timeouts above bound each socket operation; a page trickled in small pieces must also
  // end within `timeout` as a whole, or it would hold one of the few scrape threads for minutes.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto response = client.Get(parsed->path, [&](const char* data, std::size_t length) {
    result.body.append(data, length);
    too_big = result.body.size() > HttpScraper::kMaxBodyBytes;
    too_slow = std::chrono::steady_clock::now() > deadline;
    return !too_big && !too_slow;
  });
  if (too_big) return {false, {}, "the page is larger than 16 MiB"};
  if (too_slow) return {false, {}, "the page took longer than " + std::to_string(timeout.count()) + " ms to arrive"};
  if (!response) return {false, {}, httplib::to_string(response.error())};
  if (response->status != 200) return {false, {}, "HTTP status " + std::to_string(response->status)};
  result.ok = true;
  return result;
}

HttpScraper::HttpScraper(std::size_t threads) {
  for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i) threads_.emplace_back([this] { run(); });
}

HttpScraper::~HttpScraper() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void HttpScraper::get(std::string url, std::chrono::milliseconds timeout, std::function<void(HttpResult)> done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(url), timeout, std::move(done)});
  }
  wake_.notify_one();
}

void HttpScraper::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    HttpResult result;
    try {
      result = http_get(job.url, job.timeout);
    } catch (const std::exception& error) {  // the client library's own: a failed scrape, not a dead thread
      result = {false, {}, std::string("the HTTP client failed: ") + error.what()};
    }
    job.done(std::move(result));
  }
}

}  // namespace kvrelay::engine_io
