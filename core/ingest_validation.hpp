#pragma once
// Structural checks of RelayIngest requests. A failure names the offending field and the
// call answers INVALID_ARGUMENT; nothing of a rejected request is applied. A base card's
// display_name must be non-empty text without surrounding whitespace. Other problems that
// upstream reports as conflicts (a zero block size, invalid query semantics) are not
// rejected here: the projection reports them.
#include <optional>
#include <string>

#include "core/topology_model.hpp"
#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::ingest_check {

namespace ingest_v1 = ::kvrelay::ingest::v1;

// nullopt = valid; otherwise "field: what is wrong".
using Problem = std::optional<std::string>;

Problem endpoint_ref(const ingest_v1::EndpointRef& endpoint, std::string_view field);
Problem put_worker(const ingest_v1::PutWorkerRequest& request);
Problem worker_spec(const ingest_v1::WorkerSpec& worker, std::string_view field);
Problem remove_worker(const ingest_v1::RemoveWorkerRequest& request);
Problem set_availability(const ingest_v1::SetAvailabilityRequest& request);
Problem kv_event_batch(const ingest_v1::KvEventBatch& batch);
Problem load_report(const ingest_v1::LoadReport& report);
Problem frontend_load_report(const ingest_v1::FrontendLoadReport& report);
Problem scheduler_load_report(const ingest_v1::SchedulerLoadReport& report);
Problem set_frontends(const ingest_v1::SetFrontendsRequest& request);
Problem set_schedulers(const ingest_v1::SetSchedulersRequest& request);
Problem topology_file(const ingest_v1::TopologyFile& file);

EndpointKey endpoint_key(const ingest_v1::EndpointRef& endpoint);

}  // namespace kvrelay::ingest_check
