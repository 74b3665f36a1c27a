#pragma once
// The fixed label sets of kv-relay's metric families (docs/metrics.md). Each is declared once,
// as a list of X(enumerator, "label value") entries, and KVRELAY_LABEL_SET generates from
// it the enum class and LabelSet<Enum> (label name and values), so an enumerator, its value
// and the number of values cannot drift apart. An enumerator's value is the label value at
// its position: recording indexes a pre-created series by it (PerLabel).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvrelay::metrics {

// Specialized for each label set by KVRELAY_LABEL_SET: `key` (the label's name) and `names`
// (its values, in enumerator order).
template <class E>
struct LabelSet;

template <class E>
inline constexpr std::size_t kLabelCount = LabelSet<E>::names.size();

template <class E>
constexpr std::string_view label(E value) {
  return LabelSet<E>::names[static_cast<std::size_t>(value)];
}

// One Element per value of label set E, indexed by its enumerators.
template <class Element, class E>
struct PerLabel {
  std::array<Element, kLabelCount<E>> elements{};

  Element& operator[](E value) { return elements[static_cast<std::size_t>(value)]; }
};

#define KVRELAY_LABEL_ENUMERATOR(enumerator, value) enumerator,
#define KVRELAY_LABEL_VALUE(enumerator, value) value,
#define KVRELAY_LABEL_SET(Enum, key_, LIST)                                                     \
  enum class Enum : std::uint8_t { LIST(KVRELAY_LABEL_ENUMERATOR) };                            \
  template <>                                                                                   \
  struct LabelSet<Enum> {                                                                       \
    static constexpr std::string_view key = key_;                                               \
    static constexpr auto names = std::to_array<std::string_view>({LIST(KVRELAY_LABEL_VALUE)}); \
  }

// The WAN server-streaming RPCs.
#define KVRELAY_RPCS(X)                                      \
  X(kWatchKvPoolCatalog, "WatchKvPoolCatalog")               \
  X(kSubscribeKvPool, "SubscribeKvPool")                     \
  X(kSubscribeServingReadiness, "SubscribeServingReadiness") \
  X(kSubscribeKvPoolLoad, "SubscribeKvPoolLoad")             \
  X(kSubscribeServingLoad, "SubscribeServingLoad")
KVRELAY_LABEL_SET(Rpc, "rpc", KVRELAY_RPCS);

// What a frame handed to a stream's transport carries.
#define KVRELAY_FRAME_KINDS(X)        \
  X(kSnapshotChunk, "snapshot_chunk") \
  X(kDelta, "delta")                  \
  X(kHeartbeat, "heartbeat")          \
  X(kCatalog, "catalog")              \
  X(kReadiness, "readiness")          \
  X(kLoad, "load")                    \
  X(kServingLoad, "serving_load")
KVRELAY_LABEL_SET(FrameKind, "kind", KVRELAY_FRAME_KINDS);

// Actors whose mailbox depth is sampled.
#define KVRELAY_ACTOR_KINDS(X)                 \
  X(kMembership, "membership")                 \
  X(kCatalog, "catalog")                       \
  X(kTopologyProjector, "topology_projector")  \
  X(kLoadWindow, "load_window")                \
  X(kSnapshotEncoders, "snapshot_encoders")    \
  X(kPoolPublisher, "pool_publisher")          \
  X(kPoolStream, "pool_stream")                \
  X(kCatalogStream, "catalog_stream")          \
  X(kReadinessStream, "readiness_stream")      \
  X(kLoadStream, "load_stream")                \
  X(kServingLoadWindow, "serving_load_window") \
  X(kServingLoadStream, "serving_load_stream")
KVRELAY_LABEL_SET(ActorKind, "actor_kind", KVRELAY_ACTOR_KINDS);

// The ingest RPC a KV event batch came by (label kind of kv_relay_ingest_batches_total).
#define KVRELAY_INGEST_RPCS(X) X(kPublishKvEvents, "PublishKvEvents")
KVRELAY_LABEL_SET(IngestRpc, "kind", KVRELAY_INGEST_RPCS);

// How one KV event batch fared.
#define KVRELAY_BATCH_RESULTS(X)                                                     \
  X(kAccepted, "accepted")                                                           \
  X(kMalformed, "malformed")          /* failed the whole-batch structural check */  \
  X(kUnknownSource, "unknown_source") /* no pool, worker or push source for it */    \
  X(kStaleSequence, "stale_sequence") /* already sent by its source in this epoch */ \
  X(kDraining, "draining")            /* the relay is stopping */
KVRELAY_LABEL_SET(BatchResult, "result", KVRELAY_BATCH_RESULTS);

// Why the relay dropped a KV source's blocks.
#define KVRELAY_RESET_REASONS(X)                                                        \
  X(kEpochChanged, "epoch_changed")         /* the source restarted */                  \
  X(kSequenceGap, "sequence_gap")           /* batches were lost */                     \
  X(kSourceDropped, "source_dropped")       /* PutWorker no longer declares the rank */ \
  X(kSourceRedeclared, "source_redeclared") /* ... or reads it from elsewhere */        \
  X(kWorkerRemoved, "worker_removed")                                                   \
  X(kNewGeneration, "new_generation") /* the pool was rebuilt: its lineage is gone */
KVRELAY_LABEL_SET(ResetReason, "reason", KVRELAY_RESET_REASONS);

#define KVRELAY_LOAD_REPORT_RESULTS(X) \
  X(kAccepted, "accepted")             \
  X(kMalformed, "malformed")           \
  X(kUnknownRank, "unknown_rank")
KVRELAY_LABEL_SET(LoadReportResult, "result", KVRELAY_LOAD_REPORT_RESULTS);

// Who sent a serving-load report.
#define KVRELAY_SERVING_LOAD_SOURCES(X) \
  X(kFrontend, "frontend")              \
  X(kScheduler, "scheduler")
KVRELAY_LABEL_SET(ServingLoadSource, "source", KVRELAY_SERVING_LOAD_SOURCES);

// What became of a serving-load report: the ReportOutcome values in their order, then
// `invalid` (rejected by validation, nothing applied).
#define KVRELAY_SERVING_LOAD_OUTCOMES(X)          \
  X(kApplied, "applied")                          \
  X(kRestarted, "restarted")                      \
  X(kDuplicate, "duplicate")                      \
  X(kReplacedIncarnation, "replaced_incarnation") \
  X(kNoPool, "no_pool")                           \
  X(kInvalid, "invalid")
KVRELAY_LABEL_SET(ServingLoadOutcome, "outcome", KVRELAY_SERVING_LOAD_OUTCOMES);

// Why an ingest call was refused UNAUTHENTICATED (--ingest-token-file).
#define KVRELAY_AUTH_FAILURES(X)                           \
  X(kMissing, "missing") /* no `authorization` metadata */ \
  X(kInvalid, "invalid") /* not "Bearer <token>", or not the token of the file */
KVRELAY_LABEL_SET(AuthFailure, "reason", KVRELAY_AUTH_FAILURES);

// The ingest limit a request was refused by (docs/protocol/limits.md#ingest-limits): a size
// (INVALID_ARGUMENT) or a count of live things (RESOURCE_EXHAUSTED).
#define KVRELAY_INGEST_LIMITS(X)                                                  \
  X(kBatchEvents, "batch_events")                /* --max-batch-events */         \
  X(kEventBlocks, "event_blocks")                /* --max-event-blocks */         \
  X(kEventTokens, "event_tokens")                /* --max-event-tokens */         \
  X(kStringBytes, "string_bytes")                /* --max-ingest-string-bytes */  \
  X(kServingEndpoints, "serving_endpoints")      /* --max-serving-endpoints */    \
  X(kWorkersPerEndpoint, "workers_per_endpoint") /* --max-workers-per-endpoint */ \
  X(kKvSources, "kv_sources")                    /* --max-kv-sources */           \
  X(kIngestStreams, "ingest_streams")            /* --max-ingest-streams */       \
  X(kServingLoadSources, "serving_load_sources") /* --max-serving-load-sources */ \
  X(kServingLoadModels, "serving_load_models")   /* --max-serving-load-models */  \
  X(kCatalogBytes, "catalog_bytes")              /* half of --max-message-bytes */
KVRELAY_LABEL_SET(IngestLimit, "limit", KVRELAY_INGEST_LIMITS);

// The unary ingest RPCs whose requests are checked before anything of them applies.
#define KVRELAY_CHECKED_INGEST_CALLS(X)          \
  X(kPutWorker, "PutWorker")                     \
  X(kRemoveWorker, "RemoveWorker")               \
  X(kSetAvailability, "SetAvailability")         \
  X(kSetFrontends, "SetFrontends")               \
  X(kSetSchedulers, "SetSchedulers")             \
  X(kReportFrontendLoad, "ReportFrontendLoad")   \
  X(kReportSchedulerLoad, "ReportSchedulerLoad") \
  X(kGetState, "GetState")
KVRELAY_LABEL_SET(IngestCall, "rpc", KVRELAY_CHECKED_INGEST_CALLS);

// The kind of a KV event of an accepted batch.
#define KVRELAY_EVENT_KINDS(X) \
  X(kStored, "stored")         \
  X(kRemoved, "removed")       \
  X(kCleared, "cleared")
KVRELAY_LABEL_SET(EventKindLabel, "kind", KVRELAY_EVENT_KINDS);

// How a KV event fared: applied, not the device tier, or why it was rejected (a lineage
// error, or its content).
#define KVRELAY_EVENT_RESULTS(X)                               \
  X(kAccepted, "accepted")                                     \
  X(kIgnored, "ignored")                                       \
  X(kParentBlockNotFound, "parent_block_not_found")            \
  X(kInvalidBlockSequence, "invalid_block_sequence")           \
  X(kOwnershipDegreeOverflow, "ownership_degree_overflow")     \
  X(kIndexerInvariantViolation, "indexer_invariant_violation") \
  X(kPoolFull, "pool_full")                                    \
  X(kInvalidContent, "invalid_content")
KVRELAY_LABEL_SET(EventResultLabel, "result", KVRELAY_EVENT_RESULTS);

// The state of a serving readiness entry.
#define KVRELAY_READINESS_STATES(X) \
  X(kReady, "READY")                \
  X(kUnavailable, "UNAVAILABLE")    \
  X(kUnknown, "UNKNOWN")
KVRELAY_LABEL_SET(ReadinessLabel, "state", KVRELAY_READINESS_STATES);

// What became of a batch an engine (ZeroMQ) source received.
#define KVRELAY_ENGINE_BATCH_RESULTS(X)                                                       \
  X(kApplied, "applied")                    /* handed to its pool */                          \
  X(kMalformedFrames, "malformed_frames")   /* not [topic, 8-byte seq, payload] */            \
  X(kMalformedPayload, "malformed_payload") /* not an engine batch */                         \
  X(kOtherRank, "other_rank")               /* for another data-parallel rank */              \
  X(kRefused, "refused")                    /* the pool did not take it (e.g. no pool yet) */ \
  X(kSkipped, "skipped")                    /* never applied: held already, or dropped by a reset */
KVRELAY_LABEL_SET(EngineBatchResult, "result", KVRELAY_ENGINE_BATCH_RESULTS);

// What became of one event of an engine batch (positions match engine::EventRejection first).
#define KVRELAY_ENGINE_EVENT_RESULTS(X)                                     \
  X(kMalformedEvent, "malformed_event")                                     \
  X(kUnknownEventType, "unknown_event_type")                                \
  X(kBlockSizeMismatch, "block_size_mismatch")                              \
  X(kHashFormatMismatch, "hash_format_mismatch")                            \
  X(kDuplicateBlock, "duplicate_block")                                     \
  X(kEmitted, "emitted") /* handed to the pool */                           \
  X(kIgnoredTier, "ignored_tier")                                           \
  X(kTruncated, "truncated") /* lost blocks whose tokens were incomplete */ \
  X(kIgnoredGroup, "ignored_group")
KVRELAY_LABEL_SET(EngineEventResult, "result", KVRELAY_ENGINE_EVENT_RESULTS);

// Why an engine source was cold-reset (engine::ResetCause, same order).
#define KVRELAY_ENGINE_RESET_CAUSES(X)  \
  X(kSequenceGap, "sequence_gap")       \
  X(kEngineRestart, "engine_restart")   \
  X(kReplayEvicted, "replay_evicted")   \
  X(kReplayGap, "replay_gap")           \
  X(kReplayTimeout, "replay_timeout")   \
  X(kReplayOverflow, "replay_overflow") \
  X(kDisconnected, "disconnected")      \
  X(kNewGeneration, "new_generation")
KVRELAY_LABEL_SET(EngineResetCause, "cause", KVRELAY_ENGINE_RESET_CAUSES);

}  // namespace kvrelay::metrics
