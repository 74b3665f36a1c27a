#include "kvrelay/client/consumer.hpp"

#include <fmt/format.h>

#include "client/lib/relay_link.hpp"

namespace kvrelay::client {

std::string_view to_string(ReplicaStatus status) {
  switch (status) {
    case ReplicaStatus::kSubscribing:
      return "subscribing";
    case ReplicaStatus::kInstalled:
      return "installed";
    case ReplicaStatus::kWaiting:
      return "waiting";
    case ReplicaStatus::kQuarantined:
      return "quarantined";
  }
  return "unknown";
}

LoadFacts load_facts(const dynamo::kvrelay::v1::KvPoolLoadEntry& entry) {
  return {entry.kv_used_blocks(), entry.total_kv_blocks(), entry.kv_observed_ranks(), entry.kv_expected_ranks()};
}

std::string endpoint_name(const dynamo::kvrelay::v1::DynamoEndpointId& endpoint) {
  return fmt::format("{}/{}/{}", endpoint.namespace_(), endpoint.component(), endpoint.endpoint());
}

Consumer::Consumer(ConsumerOptions options) : options_(std::move(options)), notifier_(std::make_shared<Notifier>()) {
  for (const auto& target : options_.targets) {
    links_.push_back(std::make_unique<RelayLink>(target, options_, notifier_));
  }
}

Consumer::~Consumer() { stop(); }

bool Consumer::start() {
  bool started = true;
  for (auto& link : links_) started = link->start() && started;
  return started;
}

void Consumer::stop() {
  for (auto& link : links_) link->stop();
}

std::vector<PoolMatch> Consumer::overlap(std::string_view model, std::span<const std::uint32_t> tokens,
                                         std::string_view cache_namespace) const {
  PromptHashes prompt(tokens, cache_namespace);
  std::vector<PoolMatch> matches;
  for (const auto& link : links_) link->match(model, prompt, matches);
  return matches;
}

ConsumerView Consumer::view() const {
  ConsumerView view;
  for (const auto& link : links_) view.relays.push_back(link->view());
  return view;
}

std::optional<ReplicaDigest> Consumer::replica_digest(std::string_view target, std::string_view endpoint) const {
  for (const auto& link : links_) {
    if (link->target() == target) return link->replica_digest(endpoint);
  }
  return std::nullopt;
}

bool Consumer::await(const std::function<bool(const ConsumerView&)>& done, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(notifier_->mutex);
  while (true) {
    const auto seen = notifier_->version;
    lock.unlock();
    if (done(view())) return true;
    lock.lock();
    if (!notifier_->changed.wait_until(lock, deadline, [&] { return notifier_->version != seen; })) return false;
    // The wait also ends at once for a change made while done() ran, deadline or not: a state
    // that keeps changing must not hold the caller past its timeout.
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace kvrelay::client
