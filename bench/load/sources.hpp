#pragma once
// kvrelay-bench's producers: N sources (one worker each, spread round-robin over P pools), each
// feeding its share of the target rate into the relay, either pushed over one PublishKvEvents
// stream or published by an in-process fake vLLM engine on a ZeroMQ socket the relay
// subscribes to (docs/protocol/engine-sources.md). Every stored event holds one new block;
// once a source holds `live_blocks` blocks it removes its oldest with every new one, as an
// engine evicting under a full cache does, so a long run keeps a steady working set and the
// pool never needs a re-layout.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

namespace kvrelay::demo {
class FakeEngine;
}

namespace kvrelay::bench {

namespace ingest_v1 = ::kvrelay::ingest::v1;
using Clock = std::chrono::steady_clock;

enum class Transport { kPush, kZmq };

struct LoadShape {
  Transport transport = Transport::kPush;
  std::size_t pools = 1;
  std::size_t sources = 1;
  double stores_per_second = 100'000;  // all sources together
  std::size_t live_blocks = 65'536;    // per source
};

// A block whose arrival the consumers time: the first block of every batch.
struct Probe {
  std::size_t pool = 0;
  std::uint64_t sequence_hash = 0;
  Clock::time_point sent;
};

struct SourceTotals {
  std::uint64_t stores = 0;
  std::uint64_t batches = 0;
  std::uint64_t batches_rejected = 0;  // as the relay's PublishKvEvents replies counted them
  std::string failure;                 // the first source whose transport failed
};

class Sources {
 public:
  // Declares one worker per source (PutWorker) and, for ZeroMQ, starts its engine and waits
  // until the relay has subscribed to it. `token` is the relay's ingest bearer token.
  static std::expected<Sources, std::string> declare(const std::string& ingest_address,
                                                     std::optional<std::string> token, LoadShape shape);
  Sources(Sources&&) noexcept;
  ~Sources();

  // "namespace/component/endpoint" of pool `index`, as the consumer library names it.
  static std::string endpoint_name(std::size_t index);

  // Sends until `stop` is set, one batch per source every millisecond (larger batches when a
  // source falls behind), calling `on_probe` just before each batch goes out. `epoch` is the
  // push sources' epoch: a new one per run starts every source afresh on a relay that ran
  // another run before. Blocks until every source has finished.
  SourceTotals run(std::uint64_t epoch, const std::atomic<bool>& stop,
                   const std::function<void(const Probe&)>& on_probe, std::atomic<std::uint64_t>& stores_sent);

 private:
  Sources(std::unique_ptr<ingest_v1::RelayIngest::Stub> stub, std::optional<std::string> token, LoadShape shape);
  void authorize(grpc::ClientContext& context) const;
  SourceTotals run_source(std::size_t source, std::uint64_t epoch, const std::atomic<bool>& stop,
                          const std::function<void(const Probe&)>& on_probe, std::atomic<std::uint64_t>& stores_sent);

  std::unique_ptr<ingest_v1::RelayIngest::Stub> stub_;
  std::optional<std::string> token_;
  LoadShape shape_;
  std::vector<std::unique_ptr<demo::FakeEngine>> engines_;  // one per source, ZeroMQ only
};

}  // namespace kvrelay::bench
