#pragma once
// The demo's frontend and router (docs/protocol/serving-load.md): one frontend per namespace
// and one router per serving endpoint of the topology, declared with SetFrontends /
// SetSchedulers and reporting every second what the demo's traffic amounts to. A request
// awaits its first token for 100 ms after it is served, then generates until a second has
// passed; its uncached prompt tokens count as the rank's prefill work until the next report;
// the blocks an engine holds are its active decode blocks.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvrelay/ingest/v1/ingest.grpc.pb.h"

namespace kvrelay::demo {

namespace ingest_v1 = ::kvrelay::ingest::v1;

// One engine rank as the router sees it.
struct RouterRank {
  ingest_v1::EndpointRef endpoint;
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
};

class ServingLoadFeed {
 public:
  // `ranks`: every rank the demo drives; `models`: every (namespace, model) the frontends serve.
  ServingLoadFeed(std::vector<RouterRank> ranks, std::vector<std::pair<std::string, std::string>> models,
                  std::uint64_t seed);

  // A request for (ns, model) served by ranks[rank] at `now`: `prompt_tokens` long, `uncached` of
  // them computed by prefill.
  void served(const std::string& ns, const std::string& model, std::size_t rank, std::uint64_t prompt_tokens,
              std::uint64_t uncached, std::chrono::steady_clock::time_point now);
  void set_decode_blocks(std::size_t rank, std::uint64_t blocks) { decode_blocks_.at(rank) = blocks; }

  // The relay's --ingest-token-file: every call then carries its token, re-read before each
  // report so that a rotation reaches the demo too (docs/protocol/ingest.md#authentication).
  void set_token_file(std::optional<std::string> path) { token_file_ = std::move(path); }

  // Declares the sources, then reports once a second; failures are logged once and retried.
  void tick(ingest_v1::RelayIngest::Stub& ingest, std::chrono::steady_clock::time_point now);

 private:
  struct InFlight {
    std::chrono::steady_clock::time_point started;
    std::uint64_t prompt_tokens;
  };
  struct ModelLoad {
    std::vector<InFlight> in_flight;
    ingest_v1::RequestTotals totals;
  };

  void declare(ingest_v1::RelayIngest::Stub& ingest);
  void report(ingest_v1::RelayIngest::Stub& ingest, std::chrono::steady_clock::time_point now);
  bool ok(const grpc::Status& status, const char* call);
  void refresh_authorization();
  void authorize(grpc::ClientContext& context) const;

  std::vector<RouterRank> ranks_;
  std::vector<std::uint64_t> decode_blocks_;   // by rank
  std::vector<std::uint64_t> prefill_tokens_;  // by rank, since the last report
  std::map<std::pair<std::string, std::string>, ModelLoad> models_;
  std::uint64_t incarnation_;  // of the frontends and routers: a new one each demo
  std::uint64_t sequence_ = 0;
  bool declared_ = false;
  bool failing_ = false;
  std::chrono::steady_clock::time_point next_report_{};
  std::optional<std::string> token_file_;
  std::optional<std::string> authorization_;  // "Bearer <token>", once a token was read
};

}  // namespace kvrelay::demo
