// Every DC-local ingest request validator (core/ingest_validation.hpp, docs/protocol/ingest.md):
// the bytes after byte 0 are parsed as the kvrelay.ingest.v1 message byte 0 picks and checked as
// the ingest gateway (or the topology file loader) checks it. A problem must name its field.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/ingest_validation.hpp"
#include "core/kv_events.hpp"
#include "tests/fuzz/fuzz_input.hpp"

using namespace kvrelay;
using fuzz::require;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

void check_problem(const ingest_check::Problem& problem) {
  if (!problem) return;
  require(!problem->empty(), "a problem says what is wrong");
  require(problem->find(": ") != std::string::npos, "a problem reads \"field: what is wrong\"");
}

template <class Request, class Check>
void check(std::string_view bytes, Check validator) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  check_problem(validator(request));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  fuzz::silence_protobuf_logs();
  const std::string_view bytes = fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 12) {
    case 0:
      check<ingest_v1::PutWorkerRequest>(bytes, ingest_check::put_worker);
      break;
    case 1:
      check<ingest_v1::WorkerSpec>(bytes,
                                   [](const auto& worker) { return ingest_check::worker_spec(worker, "worker"); });
      break;
    case 2:
      check<ingest_v1::RemoveWorkerRequest>(bytes, ingest_check::remove_worker);
      break;
    case 3:
      check<ingest_v1::SetAvailabilityRequest>(bytes, ingest_check::set_availability);
      break;
    case 4:
      check<ingest_v1::KvEventBatch>(bytes, [](const auto& batch) {
        const auto problem = ingest_check::kv_event_batch(batch);
        // A batch the gateway admits is one membership never refuses as malformed.
        if (!problem) require(!malformed_batch_reason(batch), "an admitted batch is well-formed");
        return problem;
      });
      break;
    case 5:
      check<ingest_v1::LoadReport>(bytes, ingest_check::load_report);
      break;
    case 6:
      check<ingest_v1::FrontendLoadReport>(bytes, ingest_check::frontend_load_report);
      break;
    case 7:
      check<ingest_v1::SchedulerLoadReport>(bytes, ingest_check::scheduler_load_report);
      break;
    case 8:
      check<ingest_v1::SetFrontendsRequest>(bytes, ingest_check::set_frontends);
      break;
    case 9:
      check<ingest_v1::SetSchedulersRequest>(bytes, ingest_check::set_schedulers);
      break;
    case 10:
      check<ingest_v1::TopologyFile>(bytes, ingest_check::topology_file);
      break;
    case 11:
      check<ingest_v1::EndpointRef>(
          bytes, [](const auto& endpoint) { return ingest_check::endpoint_ref(endpoint, "endpoint"); });
      break;
  }
  return 0;
}
