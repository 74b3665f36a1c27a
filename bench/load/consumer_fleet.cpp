#include "bench/load/consumer_fleet.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <unordered_map>

#include "core/cbi1.hpp"

namespace kvrelay::bench {
namespace {

namespace v1 = ::dynamo::kvrelay::v1;

const client::PoolView* pool_named(const client::ConsumerView& view, const std::string& endpoint) {
  if (view.relays.empty()) return nullptr;
  for (const auto& pool : view.relays.front().pools) {
    if (pool.endpoint == endpoint) return &pool;
  }
  return nullptr;
}

bool holds_every_pool(const client::ConsumerView& view, std::size_t pools) {
  for (std::size_t i = 0; i < pools; ++i) {
    const auto* pool = pool_named(view, Sources::endpoint_name(i));
    if (pool == nullptr || pool->status != client::ReplicaStatus::kInstalled) return false;
  }
  return true;
}

}  // namespace

// One consumer and the probes it has yet to see, by pool.
struct ConsumerFleet::Member {
  struct Pending {
    ckf::Probe probe;
    Clock::time_point sent;
  };
  struct PoolProbes {
    std::unordered_map<std::uint64_t, Pending> pending;               // probe number -> probe
    std::unordered_multimap<std::uint64_t, std::uint64_t> by_bucket;  // candidate bucket -> probe number
    // How many of by_bucket's buckets fall on each residue: a delta's images are nearly all of
    // buckets no probe waits on, and this settles them without a hash lookup, so that the tap
    // costs the bench little beside the consumers it measures.
    static constexpr std::size_t kResidues = 4096;
    std::vector<std::uint32_t> waited_residues = std::vector<std::uint32_t>(kResidues, 0);
    std::uint32_t& waiting_on_residue(std::uint64_t bucket) { return waited_residues[bucket % kResidues]; }
    bool waited_on(std::uint64_t bucket) const { return waited_residues[bucket % kResidues] != 0; }
  };

  std::mutex mutex;
  std::condition_variable drained;
  std::vector<PoolProbes> pools;
  std::uint64_t next_probe = 0;
  std::vector<double> latencies_ms;
  std::unique_ptr<client::Consumer> consumer;

  void expect(std::size_t pool, const ckf::Probe& probe, Clock::time_point sent) {
    std::lock_guard lock(mutex);
    auto& probes = pools.at(pool);
    const std::uint64_t number = next_probe++;
    probes.pending.emplace(number, Pending{probe, sent});
    for (const std::uint64_t bucket : {probe.bucket_a, probe.bucket_b}) {
      probes.by_bucket.emplace(bucket, number);
      ++probes.waiting_on_residue(bucket);
    }
  }

  // Times every pending probe of `pool` whose fingerprint one of the images shows.
  void arrived(std::size_t pool, std::span<const BucketImage> images, Clock::time_point now) {
    std::lock_guard lock(mutex);
    auto& probes = pools.at(pool);
    for (const auto& image : images) {
      if (!probes.waited_on(image.bucket)) continue;
      auto [first, last] = probes.by_bucket.equal_range(image.bucket);
      std::vector<std::uint64_t> seen;
      for (auto it = first; it != last; ++it) {
        if (ckf::bucket_holds(image.word, probes.pending.at(it->second).probe.fingerprint)) seen.push_back(it->second);
      }
      for (const std::uint64_t number : seen) forget(probes, number, now);
    }
    if (std::all_of(pools.begin(), pools.end(), [](const auto& p) { return p.pending.empty(); })) drained.notify_all();
  }

  std::uint64_t unseen(std::chrono::milliseconds grace) {
    std::unique_lock lock(mutex);
    drained.wait_for(lock, grace, [&] {
      return std::all_of(pools.begin(), pools.end(), [](const auto& p) { return p.pending.empty(); });
    });
    std::uint64_t left = 0;
    for (const auto& p : pools) left += p.pending.size();
    return left;
  }

 private:
  void forget(PoolProbes& probes, std::uint64_t number, Clock::time_point now) {
    const Pending pending = probes.pending.at(number);
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(now - pending.sent).count());
    for (const std::uint64_t bucket : {pending.probe.bucket_a, pending.probe.bucket_b}) {
      auto [first, last] = probes.by_bucket.equal_range(bucket);
      for (auto it = first; it != last; ++it) {
        if (it->second == number) {
          probes.by_bucket.erase(it);
          --probes.waiting_on_residue(bucket);
          break;
        }
      }
    }
    probes.pending.erase(number);
  }
};

ConsumerFleet::ConsumerFleet(const std::string& wan_address, std::size_t consumers) {
  for (std::size_t i = 0; i < consumers; ++i) {
    auto member = std::make_unique<Member>();
    client::ConsumerOptions options;
    options.targets = {wan_address};
    options.subscriber_id = "kvrelay-bench-" + std::to_string(i);
    // Timed once the replica holds the delta, from the images it decoded.
    options.delta_tap = [this, m = member.get()](const client::AppliedDelta& delta) {
      const Clock::time_point now = Clock::now();
      if (!measuring_.load(std::memory_order_acquire)) return;
      if (counting_.load(std::memory_order_acquire)) {
        deltas_.fetch_add(1, std::memory_order_relaxed);
        delta_bytes_.fetch_add(cbi1::delta_frame_bytes(delta.images.size()), std::memory_order_relaxed);
      }
      const std::string key = delta.producer.pool_id().SerializeAsString();
      const auto pool = std::find_if(pools_.begin(), pools_.end(), [&](const auto& p) { return p.pool_key == key; });
      if (pool == pools_.end() || pool->bucket_count != delta.producer.ckf_format().bucket_count()) return;
      m->arrived(static_cast<std::size_t>(pool - pools_.begin()), delta.images, now);
    };
    member->consumer = std::make_unique<client::Consumer>(std::move(options));
    members_.push_back(std::move(member));
  }
  for (auto& member : members_) member->consumer->start();
}

ConsumerFleet::~ConsumerFleet() {
  for (auto& member : members_) member->consumer->stop();
}

bool ConsumerFleet::await_installed(std::size_t pools, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (auto& member : members_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!member->consumer->await([&](const auto& view) { return holds_every_pool(view, pools); }, left)) return false;
  }
  const auto view = members_.front()->consumer->view();
  for (std::size_t i = 0; i < pools; ++i) {
    const auto& producer = pool_named(view, Sources::endpoint_name(i))->descriptor.producer();
    const auto& format = producer.ckf_format();
    pools_.push_back({producer.pool_id().SerializeAsString(), ckf::Addressing(format.seed(), format.bucket_count()),
                      format.bucket_count()});
  }
  for (auto& member : members_) {
    member->pools.resize(pools);
    const auto member_view = member->consumer->view();
    for (std::size_t i = 0; i < pools; ++i) {
      subscriptions_at_start_.push_back(pool_named(member_view, Sources::endpoint_name(i))->subscriptions);
    }
  }
  return true;
}

std::string ConsumerFleet::install_problem(std::size_t pools) const {
  for (std::size_t m = 0; m < members_.size(); ++m) {
    const auto view = members_[m]->consumer->view();
    if (holds_every_pool(view, pools)) continue;
    const std::string who = "consumer " + std::to_string(m) + ": ";
    if (view.relays.empty() || !view.relays.front().catalog.valid) {
      return who + "no catalog (" + (view.relays.empty() ? "" : view.relays.front().catalog.last_error) + ")";
    }
    for (std::size_t i = 0; i < pools; ++i) {
      const auto* pool = pool_named(view, Sources::endpoint_name(i));
      if (pool == nullptr) return who + Sources::endpoint_name(i) + " is not in its catalog";
      if (pool->status != client::ReplicaStatus::kInstalled) {
        return who + pool->endpoint + " is " + std::string(client::to_string(pool->status)) + " (" + pool->last_fault +
               ")";
      }
    }
  }
  return "every consumer holds every pool now";
}

void ConsumerFleet::start_measuring() {
  counting_.store(true, std::memory_order_release);
  measuring_.store(true, std::memory_order_release);
}

void ConsumerFleet::expect(const Probe& probe) {
  if (!measuring_.load(std::memory_order_acquire)) return;
  const ckf::Probe address = pools_.at(probe.pool).addressing.probe(probe.sequence_hash);
  for (auto& member : members_) member->expect(probe.pool, address, probe.sent);
}

FleetTotals ConsumerFleet::finish(std::chrono::milliseconds grace) {
  end_window();
  FleetTotals totals;
  const auto deadline = Clock::now() + grace;
  for (auto& member : members_) {
    totals.probes_unseen += member->unseen(std::max(
        std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
  }
  measuring_.store(false, std::memory_order_release);
  totals.deltas = deltas_.load();
  totals.delta_bytes = delta_bytes_.load();
  for (std::size_t m = 0; m < members_.size(); ++m) {
    const auto view = members_[m]->consumer->view();
    for (std::size_t i = 0; i < pools_.size(); ++i) {
      const auto* pool = pool_named(view, Sources::endpoint_name(i));
      const std::uint64_t before = subscriptions_at_start_[m * pools_.size() + i];
      totals.lagged_streams += pool == nullptr || pool->subscriptions > before ? 1 : 0;
      // A re-layout is a new generation, whose subscriptions count from zero, at another bucket
      // count, where the probes were addressed at the first: say so rather than count nothing.
      if (m != 0 || pool == nullptr) continue;
      const std::uint64_t buckets = pool->descriptor.producer().ckf_format().bucket_count();
      if (buckets != pools_[i].bucket_count) {
        std::fprintf(stderr,
                     "kvrelay-bench: %s was re-laid out during the run (%llu -> %llu buckets): its later probes "
                     "count as unseen; give the relay room for the blocks (--live-blocks, --expected-unique-blocks)\n",
                     pool->endpoint.c_str(), static_cast<unsigned long long>(pools_[i].bucket_count),
                     static_cast<unsigned long long>(buckets));
      }
    }
    members_[m]->consumer->stop();
    std::lock_guard lock(members_[m]->mutex);
    totals.latencies_ms.insert(totals.latencies_ms.end(), members_[m]->latencies_ms.begin(),
                               members_[m]->latencies_ms.end());
  }
  std::sort(totals.latencies_ms.begin(), totals.latencies_ms.end());
  return totals;
}

}  // namespace kvrelay::bench
