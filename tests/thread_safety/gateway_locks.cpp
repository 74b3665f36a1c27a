// Compiled by clang with -Wthread-safety -Werror -fsyntax-only (see the end of
// tests/CMakeLists.txt): instantiates the gateway's locking templates so that clang checks
// every ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation in them. Never linked.
#include <cstdint>

#include "dynamo/kvrelay/v1/relay.pb.h"
#include "grpc_gateway/stream_reactor.hpp"
#include "grpc_gateway/windowed_reader.hpp"

namespace kvrelay::gateway {

template class StreamLink<wire::FilterFrame>;
template class StreamReactor<wire::FilterFrame>;

struct CheckOutcome {
  std::uint64_t applied = 0;
};

template class WindowedReader<v1::FilterUpdate, CheckOutcome>;

// A reader as ingest_service.cpp writes them: forward() acknowledges, tally() bookkeeps.
class CheckReader final : public WindowedReader<v1::FilterUpdate, CheckOutcome> {
 public:
  using WindowedReader::WindowedReader;

 protected:
  void forward(std::shared_ptr<const v1::FilterUpdate>) override { gate()->acknowledge(CheckOutcome{1}); }
  void tally(const CheckOutcome& outcome) override { applied_ += outcome.applied; }
  void respond() override { responded_ = applied_; }

 private:
  std::uint64_t applied_ = 0;
  std::uint64_t responded_ = 0;
};

[[maybe_unused]] void start_check_reader() { (new CheckReader(4, nullptr))->start(); }

}  // namespace kvrelay::gateway
