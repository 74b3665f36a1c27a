// The size limits of one ingest request (docs/protocol/limits.md#ingest-limits): a request at a
// limit passes, one past it is refused with a message naming the field, the flag and its value.
#include <catch2/catch.hpp>

#include <string>

#include "core/ingest_limits.hpp"

using namespace kvrelay;
using namespace kvrelay::ingest_check;

namespace {

// Small limits, so that the requests at and past them stay small.
Limits small_limits() {
  Limits limits;
  limits.max_batch_events = 3;
  limits.max_event_blocks = 4;
  limits.max_event_tokens = 10;
  limits.max_string_bytes = 8;
  return limits;
}

ingest_v1::EndpointRef endpoint(const std::string& ns) {
  ingest_v1::EndpointRef ref;
  ref.set_namespace_(ns);
  ref.set_component("backend");
  ref.set_endpoint("generate");
  return ref;
}

ingest_v1::KvEventBatch batch(int events) {
  ingest_v1::KvEventBatch batch;
  *batch.mutable_endpoint() = endpoint("prod");
  for (int i = 0; i < events; ++i) batch.add_events()->mutable_cleared();
  return batch;
}

// One stored event of `blocks` blocks, each of `tokens` token ids.
ingest_v1::KvEventBatch stored(int blocks, int tokens) {
  ingest_v1::KvEventBatch batch;
  *batch.mutable_endpoint() = endpoint("prod");
  auto* event = batch.add_events()->mutable_stored();
  for (int b = 0; b < blocks; ++b) {
    auto* block = event->add_blocks();
    for (int t = 0; t < tokens; ++t) block->mutable_tokens()->add_token_ids(static_cast<std::uint32_t>(t));
  }
  return batch;
}

void require_refused(const Overrun& over, Limit limit, const std::string& text) {
  REQUIRE(over.has_value());
  CHECK(over->limit == limit);
  CHECK(over->message == text);
}

}  // namespace

TEST_CASE("ingest limits: events per batch", "[ingest-limits]") {
  CHECK_FALSE(oversize(batch(3), small_limits()));
  require_refused(oversize(batch(4), small_limits()), Limit::kBatchEvents,
                  "events: 4 events exceed --max-batch-events (3)");
}

TEST_CASE("ingest limits: blocks and tokens per event", "[ingest-limits]") {
  CHECK_FALSE(oversize(stored(4, 2), small_limits()));
  require_refused(oversize(stored(5, 0), small_limits()), Limit::kEventBlocks,
                  "events[0].stored.blocks: 5 blocks exceed --max-event-blocks (4)");
  CHECK_FALSE(oversize(stored(2, 5), small_limits()));
  require_refused(oversize(stored(3, 4), small_limits()), Limit::kEventTokens,
                  "events[0].stored: 12 token ids exceed --max-event-tokens (10)");

  Limits limits = small_limits();
  limits.max_batch_events = 5;
  auto removal = batch(0);
  for (std::uint64_t id = 0; id < 5; ++id) removal.add_events()->mutable_removed()->add_block_hashes(id);
  CHECK_FALSE(oversize(removal, limits));  // five blocks, but one per event
  auto* removed = removal.mutable_events(4)->mutable_removed();
  for (std::uint64_t id = 10; id < 14; ++id) removed->add_block_hashes(id);
  require_refused(oversize(removal, limits), Limit::kEventBlocks,
                  "events[4].removed.block_hashes: 5 blocks exceed --max-event-blocks (4)");
}

TEST_CASE("ingest limits: every string of a request", "[ingest-limits]") {
  const Limits limits = small_limits();
  const std::string at_limit(8, 'a');
  const std::string past_limit(9, 'a');

  auto events = stored(1, 1);
  events.mutable_events(0)->mutable_stored()->set_lora_name(at_limit);
  CHECK_FALSE(oversize(events, limits));
  events.mutable_events(0)->mutable_stored()->set_cache_namespace(past_limit);
  require_refused(oversize(events, limits), Limit::kStringBytes,
                  "events[0].stored.cache_namespace: 9 bytes exceed --max-ingest-string-bytes (8)");

  ingest_v1::PutWorkerRequest worker;
  *worker.mutable_endpoint() = endpoint(at_limit);
  worker.mutable_card()->set_display_name("llama");
  CHECK_FALSE(oversize(worker, limits));
  worker.mutable_card()->add_aliases(past_limit);
  require_refused(oversize(worker, limits), Limit::kStringBytes,
                  "card.aliases[0]: 9 bytes exceed --max-ingest-string-bytes (8)");
  worker.mutable_card()->clear_aliases();
  (*worker.mutable_card()->mutable_semantics_identity())["key"] = past_limit;
  require_refused(oversize(worker, limits), Limit::kStringBytes,
                  "card.semantics_identity[key]: 9 bytes exceed --max-ingest-string-bytes (8)");
  worker.mutable_card()->clear_semantics_identity();
  (*worker.mutable_card()->mutable_semantics_identity())[past_limit].assign(1, 'v');
  require_refused(oversize(worker, limits), Limit::kStringBytes,
                  "card.semantics_identity (a key): 9 bytes exceed --max-ingest-string-bytes (8)");
  worker.mutable_card()->clear_semantics_identity();
  worker.add_kv_sources()->mutable_zmq()->set_endpoint("tcp://127.0.0.1:5557");
  require_refused(oversize(worker, limits), Limit::kStringBytes,
                  "kv_sources[0].zmq.endpoint: 20 bytes exceed --max-ingest-string-bytes (8)");

  ingest_v1::SetAvailabilityRequest availability;
  *availability.mutable_endpoint() = endpoint(past_limit);
  require_refused(oversize(availability, limits), Limit::kStringBytes,
                  "endpoint.namespace: 9 bytes exceed --max-ingest-string-bytes (8)");

  ingest_v1::FrontendLoadReport frontend;
  frontend.set_namespace_("prod");
  frontend.add_models()->set_canonical_model_id(past_limit);
  require_refused(oversize(frontend, limits), Limit::kStringBytes,
                  "models[0].canonical_model_id: 9 bytes exceed --max-ingest-string-bytes (8)");

  ingest_v1::SchedulerLoadReport scheduler;
  *scheduler.mutable_endpoint() = endpoint("prod");
  scheduler.set_replica_group(past_limit);
  require_refused(oversize(scheduler, limits), Limit::kStringBytes,
                  "replica_group: 9 bytes exceed --max-ingest-string-bytes (8)");

  ingest_v1::TopologyFile topology;
  auto* spec = topology.add_endpoints();
  *spec->mutable_endpoint() = endpoint("prod");
  spec->add_workers()->mutable_card()->set_display_name(past_limit);
  require_refused(oversize(topology, limits), Limit::kStringBytes,
                  "endpoints[0].workers[0].card.display_name: 9 bytes exceed --max-ingest-string-bytes (8)");
}

TEST_CASE("ingest limits: the defaults take what real fleets send", "[ingest-limits]") {
  const Limits defaults;
  CHECK_FALSE(oversize(batch(16'384), defaults));
  CHECK_FALSE(oversize(stored(8'192, 16), defaults));  // a 128k-token prompt in blocks of 16
  CHECK(oversize(batch(16'385), defaults).has_value());
}
