#pragma once
// Families whose series come and go with the things they describe (a pool generation, an
// engine source): each thing publishes a stats object of atomics under its key labels, its
// writers store into it with relaxed stores, and every scrape reads the published objects.
// Withdrawing a key removes its series; a replaced object's late writes go nowhere.
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvrelay::metrics {

// One family over every published key. With a sub-label, each key has one series per
// sub-label value (value(stats, i) for sub_values[i]); without, one series (value(stats, 0)).
template <class Stats>
struct KeyedFamily {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  double (*value)(const Stats&, std::size_t sub);
  std::string_view sub_label = {};
  std::span<const std::string_view> sub_values = {};
};

template <class Stats>
class KeyedCollector final : public prometheus::Collectable {
 public:
  using Key = std::vector<std::string>;  // values of key_labels, in order

  KeyedCollector(std::vector<std::string> key_labels, std::span<const KeyedFamily<Stats>> families)
      : key_labels_(std::move(key_labels)), families_(families) {}

  void publish(Key key, std::shared_ptr<const Stats> stats) {
    std::lock_guard lock(mutex_);
    published_[std::move(key)] = std::move(stats);
  }
  void withdraw(const Key& key) {
    std::lock_guard lock(mutex_);
    published_.erase(key);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::map<Key, std::shared_ptr<const Stats>> published;
    {
      std::lock_guard lock(mutex_);  // held only to copy the map, never while formatting
      published = published_;
    }
    std::vector<prometheus::MetricFamily> families;
    if (published.empty()) return families;
    for (const KeyedFamily<Stats>& spec : families_) {
      prometheus::MetricFamily family{spec.name, spec.help, spec.type, {}};
      for (const auto& [key, stats] : published) {
        const std::size_t series = spec.sub_values.empty() ? 1 : spec.sub_values.size();
        for (std::size_t sub = 0; sub < series; ++sub) family.metric.push_back(metric(spec, key, *stats, sub));
      }
      families.push_back(std::move(family));
    }
    return families;
  }

 private:
  prometheus::ClientMetric metric(const KeyedFamily<Stats>& spec, const Key& key, const Stats& stats,
                                  std::size_t sub) const {
    prometheus::ClientMetric metric;
    for (std::size_t i = 0; i < key_labels_.size() && i < key.size(); ++i) {
      metric.label.push_back({key_labels_[i], key[i]});
    }
    if (!spec.sub_values.empty()) {
      metric.label.push_back({std::string(spec.sub_label), std::string(spec.sub_values[sub])});
    }
    const double value = spec.value(stats, sub);
    if (spec.type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    return metric;
  }

  std::vector<std::string> key_labels_;
  std::span<const KeyedFamily<Stats>> families_;
  mutable std::mutex mutex_;
  std::map<Key, std::shared_ptr<const Stats>> published_;
};

}  // namespace kvrelay::metrics
