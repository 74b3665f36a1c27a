#!/usr/bin/python3
"""Writes the seed corpora of the libFuzzer harnesses in tests/fuzz/ (tests/fuzz/corpus/<harness>/).

Each seed is a small, valid (or deliberately, meaningfully invalid) input in the harness's input
format: byte 0 options and records joined by the separator of tests/fuzz/fuzz_input.hpp, as each
harness's header comment describes. CBI1 frames come from tests/data/ckf_vectors.json, protobuf
messages are built with the repository's own schemas (compiled by protoc into a temporary folder),
engine payloads are msgpack as vLLM, SGLang and TensorRT-LLM send them
(docs/protocol/engine-sources.md). Run it again after changing a harness's input format:

    /usr/bin/python3 tests/fuzz/make_seeds.py

It rewrites its own seeds and leaves every other file (the regression-* inputs) alone.
"""
import json
import pathlib
import struct
import subprocess
import sys
import tempfile

import msgpack

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
SEPARATOR = b"\xc1\xc1\xc1\xc1"
MAX_SEED_BYTES = 64 * 1024


def load_schemas():
    """The generated Python modules of proto/, importable as relay_pb2 and ingest_pb2."""
    protos = ["dynamo/kvrelay/v1/relay.proto", "kvrelay/ingest/v1/ingest.proto"]
    with tempfile.TemporaryDirectory(prefix="kvrelay-seeds-") as out:
        subprocess.run(["protoc", "-I", str(ROOT / "proto"), "--python_out", out, *protos], check=True)
        sys.path.insert(0, out)
        from dynamo.kvrelay.v1 import relay_pb2
        from kvrelay.ingest.v1 import ingest_pb2
        sys.path.remove(out)
    return relay_pb2, ingest_pb2


v1, ingest = load_schemas()


def write(harness, name, data):
    assert len(data) < MAX_SEED_BYTES, (harness, name, len(data))
    folder = CORPUS / harness
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def records(*parts):
    return SEPARATOR.join(parts)


def serialized(message):
    return message.SerializeToString(deterministic=True)


# ---- CBI1 frames (core/cbi1.hpp) ----

VECTORS = json.loads((ROOT / "tests" / "data" / "ckf_vectors.json").read_text())
CBI1 = VECTORS["cbi1"]
GOOD_CHUNK = bytes.fromhex(CBI1["good"]["snapshot_chunk"]["hex"])
GOOD_DELTA = bytes.fromhex(CBI1["good"]["delta"]["hex"])
EMPTY_DELTA = bytes.fromhex(CBI1["good"]["empty_delta"]["hex"])
EXAMPLE = VECTORS["producer_example"]
EXAMPLE_CHUNKS = [bytes.fromhex(h) for h in EXAMPLE["initial_snapshot"]["chunks_hex"]]
EXAMPLE_DELTAS = [bytes.fromhex(e["delta"]["cbi1_hex"]) for e in EXAMPLE["events"] if e.get("delta")]


def slug(name):
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def cbi1_seeds():
    write("cbi1_frames", "snapshot-then-delta", b"\x00" + records(GOOD_CHUNK, GOOD_DELTA))
    write("cbi1_frames", "snapshot-chunk", b"\x00" + GOOD_CHUNK)
    write("cbi1_frames", "delta-alone", b"\x00" + GOOD_DELTA)
    write("cbi1_frames", "empty-delta", b"\x00" + records(GOOD_CHUNK, EMPTY_DELTA))
    write("cbi1_frames", "producer-example", b"\x00" + records(*EXAMPLE_CHUNKS, *EXAMPLE_DELTAS))
    write("cbi1_frames", "producer-example-fixed-checksums", b"\x01" + records(*EXAMPLE_CHUNKS, *EXAMPLE_DELTAS[:4]))
    for case in CBI1["assembly"]:
        frames = [bytes.fromhex(h) for h in case["frames_hex"]]
        write("cbi1_frames", "assembly-" + slug(case["name"]), b"\x00" + records(*frames))
    for case in CBI1["malformed"]:
        frame = bytes.fromhex(case["hex"])
        # Checksum faults stay as they are; the others get past the checksum either way.
        write("cbi1_frames", "malformed-" + slug(case["name"]), b"\x00" + records(GOOD_CHUNK, frame))
    write("cbi1_frames", "garbage-fixed-checksum", b"\x01" + b"CBI1" + bytes(60))


# ---- dynamo.kvrelay.v1 messages (proto/dynamo/kvrelay/v1/relay.proto) ----

KVR1 = 0x4B565231
CKF_SEED = 0x5DEECE66D1B54A33


def envelope(message):
    message.contract_marker = KVR1
    message.protocol_version = 1
    message.relay.drt_instance_id = 42
    message.relay.relay_incarnation = 7
    return message


def producer(pool=1, seed=CKF_SEED, bucket_count=1024, dc_id=0xDC, generation=1):
    identity = v1.ProducerIdentity()
    identity.pool_id.identity_version = 1
    identity.pool_id.dc_id = dc_id
    identity.pool_id.indexer_domain.cache_semantics.digest = b"\x11" * 16
    identity.pool_id.indexer_domain.cache_semantics.source = v1.IDENTITY_SOURCE_DEFAULT_DERIVED
    identity.pool_id.indexer_domain.routing_scope.digest = bytes([pool]) * 16
    identity.pool_id.indexer_domain.routing_scope.source = v1.IDENTITY_SOURCE_DEFAULT_DERIVED
    identity.producer_incarnation = 99
    identity.layout_generation = generation
    identity.ckf_format.format_version = 1
    identity.ckf_format.seed = seed
    identity.ckf_format.bucket_count = bucket_count
    identity.ckf_format.fingerprint_bits = 16
    identity.ckf_format.slots_per_bucket = 4
    return identity


def descriptor(pool, model="llama", aliases=(), lora=None):
    out = v1.KvPoolDescriptor()
    out.producer.CopyFrom(producer(pool))
    out.serving_endpoint.namespace = "prod"
    out.serving_endpoint.component = f"backend-{pool}"
    out.serving_endpoint.endpoint = "generate"
    registration = out.registrations.add()
    registration.canonical_model_id = model
    registration.target.base.base_model = model
    registration.aliases.extend(aliases)
    if lora:
        adapter = out.registrations.add()
        adapter.canonical_model_id = lora
        adapter.target.lora.base_model = model
        adapter.target.lora.adapter = lora
    out.query_semantics.kv_block_size = 16
    out.query_semantics.hash_format = v1.KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1
    out.pool_roles.append(v1.WORKER_ROLE_AGGREGATED)
    return out


def catalog(revision, pools):
    update = envelope(v1.KvPoolCatalogUpdate())
    update.revision = revision
    for pool in pools:
        update.snapshot.pools.add().CopyFrom(pool)
    return update


def topology_entry(model, state=v1.SERVING_READINESS_STATE_READY, pool=1):
    entry = v1.TopologyEntry()
    entry.namespace = "prod"
    entry.canonical_model_id = model
    entry.state = state
    entry.present_roles.append(v1.WORKER_ROLE_AGGREGATED)
    member = entry.members.add()
    member.endpoint.namespace = "prod"
    member.endpoint.component = f"backend-{pool}"
    member.endpoint.endpoint = "generate"
    member.roles.append(v1.WORKER_ROLE_AGGREGATED)
    member.pool_id.CopyFrom(producer(pool).pool_id)
    adapter = entry.adapters.add()
    adapter.canonical_model_id = "tenant-a"
    adapter.state = state
    return entry


def readiness(revision, entries):
    update = envelope(v1.ServingReadinessUpdate())
    update.revision = revision
    for entry in entries:
        update.entries.add().CopyFrom(entry)
    return update


def load_window(window, pools):
    update = envelope(v1.KvPoolLoadUpdate())
    update.window_sequence = window
    update.window_ms = 1000
    for pool in pools:
        entry = update.pools.add()
        entry.producer.CopyFrom(producer(pool))
        entry.kv_used_blocks = 10 * pool
        entry.total_kv_blocks = 100
        entry.kv_observed_ranks = 1
        entry.kv_expected_ranks = 1
    return update


def serving_load_window(window, pools, models=("llama",), status=v1.DATA_STATUS_COMPLETE):
    update = envelope(v1.ServingLoadUpdate())
    update.window_sequence = window
    update.window_ms = 1000
    complete = status == v1.DATA_STATUS_COMPLETE
    for pool in pools:
        entry = update.pools.add()
        entry.producer.CopyFrom(producer(pool))
        entry.load.status = status
        if complete:
            entry.load.tokens.active_prefill_tokens = 100 * pool
            entry.load.tokens.active_decode_blocks = 10 * pool
        entry.deployment.live_workers = 2
    for model in models:
        entry = update.models.add()
        entry.namespace = "prod"
        entry.canonical_model_id = model
        load = entry.load
        load.status = status
        load.requests.requests_started_total = 40
        load.requests.requests_completed_total = 37
        if complete:
            load.requests.requests_awaiting_first_token = 1
            load.requests.requests_generating = 2
            load.tokens.awaiting_first_token_input_tokens = 300
            load.tokens.inflight_input_tokens = 900
            load.tokens.input_tokens_total = 5000
            load.tokens.output_tokens_total = 7000
        entry.deployment.expected_frontends = 2
        entry.deployment.observed_frontends = 2 if complete else 1
        entry.deployment.ready_frontends = 1
        for pool in pools:
            entry.deployment.serving_pools.add().CopyFrom(producer(pool).pool_id)
    return update


def filter_update(kind, frame=b"", base=0, sequence=0, identity=None):
    update = envelope(v1.FilterUpdate())
    update.producer.CopyFrom(identity or producer())
    update.kind = kind
    update.base_sequence = base
    update.sequence = sequence
    update.payload = frame
    update.send_ts_us = 1767225600250000
    return update


def subscriber(request, name="router-eu-1"):
    request.contract_marker = KVR1
    request.subscriber_id = name
    return request


def wire_request_seeds():
    info = v1.RelayInfoRequest()
    info.contract_marker = KVR1
    write("wire_requests", "relay-info", b"\x00" + serialized(info))
    write("wire_requests", "relay-info-no-marker", b"\x00")
    write("wire_requests", "watch-catalog", b"\x01" + serialized(subscriber(v1.WatchKvPoolCatalogRequest())))
    pool = subscriber(v1.SubscribeKvPoolRequest())
    pool.expected_producer.CopyFrom(producer(3))
    write("wire_requests", "subscribe-pool", b"\x02" + serialized(pool))
    pool.expected_producer.ckf_format.bucket_count = 1000
    write("wire_requests", "subscribe-pool-bad-bucket-count", b"\x02" + serialized(pool))
    write("wire_requests", "subscribe-readiness",
          b"\x03" + serialized(subscriber(v1.SubscribeServingReadinessRequest(), "a" * 128)))
    write("wire_requests", "subscribe-load", b"\x04" + serialized(subscriber(v1.SubscribeKvPoolLoadRequest())))
    write("wire_requests", "subscribe-serving-load",
          b"\x05" + serialized(subscriber(v1.SubscribeServingLoadRequest(), "r\u00e9seau-\u65e5\u672c")))
    for name, text in [("subscriber-id-plain", b"router-1"), ("subscriber-id-control", b"router\x07"),
                       ("subscriber-id-bad-utf8", b"router-\xc3\x28"), ("subscriber-id-nbsp", "\u00a0x".encode())]:
        write("wire_requests", name, b"\x06" + text)


def wire_response_seeds():
    info = envelope(v1.RelayInfo())
    write("wire_responses", "relay-info", b"\x00" + serialized(info))
    pools = [descriptor(1, "llama", ["meta/llama"], lora="tenant-a"), descriptor(2, "qwen")]
    write("wire_responses", "catalog", b"\x01" + serialized(catalog(3, pools)))
    write("wire_responses", "catalog-duplicate-pool", b"\x01" + serialized(catalog(3, [pools[1], pools[1]])))
    write("wire_responses", "filter-snapshot-chunk",
          b"\x02" + serialized(filter_update(v1.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, GOOD_CHUNK, 6, 6)))
    write("wire_responses", "filter-delta",
          b"\x02" + serialized(filter_update(v1.FILTER_UPDATE_KIND_DELTA, GOOD_DELTA, 6, 7)))
    write("wire_responses", "filter-heartbeat", b"\x02" + serialized(filter_update(v1.FILTER_UPDATE_KIND_HEARTBEAT,
                                                                                    b"", 7, 7)))
    entries = [topology_entry("llama"), topology_entry("qwen", v1.SERVING_READINESS_STATE_UNAVAILABLE, 2)]
    write("wire_responses", "readiness", b"\x03" + serialized(readiness(5, entries)))
    write("wire_responses", "load-window", b"\x04" + serialized(load_window(8, [1, 2])))
    write("wire_responses", "serving-load", b"\x05" + serialized(serving_load_window(8, [1, 2])))
    write("wire_responses", "serving-load-degraded",
          b"\x0d" + serialized(serving_load_window(9, [1], status=v1.DATA_STATUS_DEGRADED)))


def client_plane_seeds():
    def record(plane, message):
        return bytes([plane]) + serialized(message)

    pools = [descriptor(1, "llama", ["meta/llama"], lora="tenant-a"), descriptor(2, "qwen", ["llama"])]
    # A heartbeat (the same revision again), a new revision, then one going back.
    revisions = [catalog(1, pools[:1]), catalog(1, pools[:1]), catalog(2, pools), catalog(1, pools)]
    write("client_planes", "catalog-revisions", records(*(record(0, update) for update in revisions)))
    write("client_planes", "readiness-revisions",
          records(record(1, readiness(1, [topology_entry("llama")])),
                  record(1, readiness(2, [topology_entry("qwen")]))))
    write("client_planes", "load-windows", records(record(2, load_window(1, [1])), record(2, load_window(2, [1, 2])),
                                                   record(2, load_window(4, [2]))))
    write("client_planes", "serving-load-windows",
          records(record(3, serving_load_window(1, [1])), record(3, serving_load_window(2, [1, 2]))))
    write("client_planes", "every-plane",
          records(record(0, catalog(1, pools)), record(1, readiness(1, [topology_entry("llama")])),
                  record(2, load_window(1, [1])), record(3, serving_load_window(1, [1]))))


def pool_replica_seeds():
    # The identity the harness gives its replica (pool_replica_fuzz.cpp producer_of).
    good = producer(pool=0x11, seed=0x5EED, bucket_count=8, dc_id=9)
    chunk = filter_update(v1.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, GOOD_CHUNK, 6, 6, good)
    delta = filter_update(v1.FILTER_UPDATE_KIND_DELTA, GOOD_DELTA, 6, 7, good)
    heartbeat = filter_update(v1.FILTER_UPDATE_KIND_HEARTBEAT, b"", 7, 7, good)
    write("pool_replica", "snapshot-delta-heartbeat", b"\x00" + records(*map(serialized, [chunk, delta, heartbeat])))
    write("pool_replica", "own-envelope", b"\x01" + records(*map(serialized, [chunk, delta, heartbeat])))
    write("pool_replica", "delta-before-snapshot", b"\x01" + records(*map(serialized, [delta, chunk, delta])))
    write("pool_replica", "sequence-gap", b"\x01" + records(*map(serialized, [chunk, heartbeat, delta])))
    example = producer(pool=0x11, seed=CKF_SEED, bucket_count=EXAMPLE["config"]["bucket_count"],
                       dc_id=EXAMPLE["config"]["dc_id"])
    frames = []
    sequence = EXAMPLE["initial_snapshot"]["sequence"]
    for frame in EXAMPLE_CHUNKS:
        frames.append(filter_update(v1.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, frame, sequence, sequence, example))
    for event in EXAMPLE["events"]:
        if event.get("delta"):
            d = event["delta"]
            frames.append(filter_update(v1.FILTER_UPDATE_KIND_DELTA, bytes.fromhex(d["cbi1_hex"]), d["base_sequence"],
                                        d["sequence"], example))
    write("pool_replica", "producer-example", b"\x02" + records(*map(serialized, frames)))


# ---- kvrelay.ingest.v1 messages (proto/kvrelay/ingest/v1/ingest.proto) ----

def endpoint_ref(message, component="llama"):
    message.namespace = "prod"
    message.component = component
    message.endpoint = "generate"
    return message


def model_card(card, name="meta/llama-3-8b"):
    card.display_name = name
    card.source_path = "meta-llama/Meta-Llama-3-8B-Instruct"
    card.kv_cache_block_size = 16
    card.worker_type = ingest.WORKER_TYPE_AGGREGATED
    card.aliases.append("llama")
    card.model_type = 1
    card.runtime_config.total_kv_blocks = 2048
    card.runtime_config.data_parallel_size = 2
    card.runtime_config.max_num_seqs = 256


def worker_parts(message):
    model_card(message.card)
    adapter = message.adapters.add()
    adapter.served_name = "tenant-a"
    adapter.lora_name = "tenant-a"
    adapter.max_gpu_lora_count = 4
    zmq = message.kv_sources.add()
    zmq.dp_rank = 0
    zmq.zmq.endpoint = "tcp://127.0.0.1:15570"
    zmq.zmq.replay_endpoint = "tcp://127.0.0.1:15580"
    push = message.kv_sources.add()
    push.dp_rank = 1
    push.push.SetInParent()
    message.engine_metrics.url = "http://127.0.0.1:18101/metrics"
    message.engine_metrics.kind = ingest.ENGINE_KIND_VLLM
    message.engine_metrics.interval_ms = 500
    return message


def batch(worker=101, rank=0, epoch=1, sequence=0, events=()):
    out = ingest.KvEventBatch()
    endpoint_ref(out.endpoint)
    out.worker_id = worker
    out.dp_rank = rank
    out.source_epoch = epoch
    out.sequence = sequence
    for event in events:
        out.events.add().CopyFrom(event)
    return out


def stored(blocks, parent=None, tokens=None, lora="", namespace="", tier=ingest.STORAGE_TIER_DEVICE, start=None):
    """blocks: engine ids; tokens: one token window per block (else block i's local hash is 1000 + i, so that
    stores from the root share their prefixes, as prompts with one system prompt do)."""
    event = ingest.KvEvent()
    event.tier = tier
    s = event.stored
    if parent is not None:
        s.parent_block_hash = parent
    if start is not None:
        s.start_position = start
    s.lora_name = lora
    s.cache_namespace = namespace
    for i, engine_id in enumerate(blocks):
        block = s.blocks.add()
        block.block_hash = engine_id
        if tokens is None:
            block.tokens_hash = 1000 + i
        else:
            block.tokens.token_ids.extend(tokens[i])
    return event


def removed(ids):
    event = ingest.KvEvent()
    event.removed.block_hashes.extend(ids)
    return event


def cleared():
    event = ingest.KvEvent()
    event.cleared.SetInParent()
    return event


def ingest_request_seeds():
    put = ingest.PutWorkerRequest()
    endpoint_ref(put.endpoint)
    put.worker_id = 101
    worker_parts(put)
    write("ingest_requests", "put-worker", b"\x00" + serialized(put))
    spec = ingest.WorkerSpec()
    spec.worker_id = 102
    worker_parts(spec)
    write("ingest_requests", "worker-spec", b"\x01" + serialized(spec))
    remove = ingest.RemoveWorkerRequest()
    endpoint_ref(remove.endpoint)
    remove.worker_id = 101
    write("ingest_requests", "remove-worker", b"\x02" + serialized(remove))
    availability = ingest.SetAvailabilityRequest()
    endpoint_ref(availability.endpoint)
    availability.live_worker_ids.extend([101, 102])
    write("ingest_requests", "set-availability", b"\x03" + serialized(availability))
    events = [stored([1, 2], tokens=[[1, 2, 3, 4], [5, 6, 7, 8]]), removed([2]), cleared()]
    write("ingest_requests", "kv-event-batch", b"\x04" + serialized(batch(events=events)))
    load = ingest.LoadReport()
    endpoint_ref(load.endpoint)
    load.worker_id = 101
    load.kv_used_blocks = 512
    write("ingest_requests", "load-report", b"\x05" + serialized(load))
    frontend = ingest.FrontendLoadReport()
    frontend.namespace = "prod"
    frontend.frontend_id = 7
    frontend.incarnation = 0x1234
    frontend.sequence = 1
    frontend.serving_ready = True
    model = frontend.models.add()
    model.canonical_model_id = "meta/llama-3-8b"
    model.aliases.append("llama")
    model.gauges.requests_generating = 3
    model.totals.requests_started = 10
    write("ingest_requests", "frontend-load-report", b"\x06" + serialized(frontend))
    scheduler = ingest.SchedulerLoadReport()
    endpoint_ref(scheduler.endpoint)
    scheduler.router_id = 3
    scheduler.router_epoch = 0x77
    scheduler.sequence = 1
    scheduler.replica_group = "eu"
    rank = scheduler.ranks.add()
    rank.worker_id = 101
    rank.active_decode_blocks = 50
    rank.active_prefill_tokens = 4096
    write("ingest_requests", "scheduler-load-report", b"\x07" + serialized(scheduler))
    frontends = ingest.SetFrontendsRequest()
    frontends.namespace = "prod"
    frontends.frontend_ids.extend([7, 8])
    write("ingest_requests", "set-frontends", b"\x08" + serialized(frontends))
    schedulers = ingest.SetSchedulersRequest()
    endpoint_ref(schedulers.endpoint)
    schedulers.router_ids.extend([3])
    write("ingest_requests", "set-schedulers", b"\x09" + serialized(schedulers))
    topology = ingest.TopologyFile()
    topology.version = 1
    spec_entry = topology.endpoints.add()
    endpoint_ref(spec_entry.endpoint)
    spec_entry.workers.add().CopyFrom(spec)
    spec_entry.live_workers.worker_ids.append(102)
    spec_entry.scheduler_router_ids.append(3)
    frontend_set = topology.frontends.add()
    frontend_set.namespace = "prod"
    frontend_set.frontend_ids.append(7)
    write("ingest_requests", "topology-file", b"\x0a" + serialized(topology))
    write("ingest_requests", "endpoint-ref", b"\x0b" + serialized(endpoint_ref(ingest.EndpointRef())))


def pool_index_seeds():
    # Byte 0: block size 4 (bits 0-2 = 3), standard hashing, 8 or 4 buckets.
    block4_8 = bytes([0x03 | 0x10])
    block4_4 = bytes([0x03])
    first = batch(events=[stored([1, 2, 3]), stored([4, 5], parent=3)])
    second = batch(worker=102, events=[stored([11, 12, 13])])  # the same contents: shared canonical hashes
    third = batch(sequence=1, events=[removed([2, 99]), stored([6], parent=1), cleared()])
    write("pool_index_ingest", "two-sources-share-prefixes",
          block4_8 + records(*map(serialized, [first, second, third])))
    tokens = [[t, t + 1, t + 2, t + 3] for t in range(0, 40, 4)]
    token_batch = batch(events=[stored(list(range(20, 30)), tokens=tokens, lora="tenant-a", namespace="salt")])
    write("pool_index_ingest", "token-blocks", block4_8 + serialized(token_batch))
    eagle = batch(events=[stored([40, 41], tokens=[[1, 2, 3, 4, 5], [5, 6, 7, 8, 9]])])
    write("pool_index_ingest", "eagle-token-blocks", bytes([0x03 | 0x08 | 0x10]) + serialized(eagle))
    full = batch(events=[stored(list(range(100, 140)))] +
                 [stored(list(range(200 + 10 * i, 205 + 10 * i)), parent=100 + i) for i in range(4)])
    emptied = batch(sequence=1, events=[removed(range(100, 140))])
    write("pool_index_ingest", "capacity-pressure", block4_4 + records(serialized(full), serialized(emptied)))
    errors = batch(events=[stored([7], parent=12345), stored([8], start=3), stored([1, 1], tokens=None),
                           stored([9], tier=ingest.STORAGE_TIER_HOST_PINNED), stored([3], tokens=[[1, 2]])])
    write("pool_index_ingest", "lineage-errors", block4_8 + records(serialized(first), serialized(errors)))
    unvalidated = batch(events=[ingest.KvEvent()])
    write("pool_index_ingest", "refused-batch", block4_8 + serialized(unvalidated))


# ---- engine msgpack payloads (core/engine_events.hpp) ----

TS = 1767225600.25


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def stored_map(hashes, parent=None, tokens=None, block_size=4, medium="GPU", lora_name=None, **more):
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
             "token_ids": tokens if tokens is not None else list(range(4 * len(hashes))),
             "block_size": block_size, "lora_id": None, "medium": medium, "lora_name": lora_name}
    event.update(more)
    return event


def stored_array(hashes, parent=None, tokens=None, block_size=4, medium="GPU", lora_name=None):
    return ["BlockStored", hashes, parent, tokens if tokens is not None else list(range(4 * len(hashes))), block_size,
            None, medium, lora_name]


def engine_batch(events, rank=0):
    return pack([TS, events, rank])


def engine_payloads():
    digest = "0123456789abcdef" * 4
    return {
        "vllm-map-form": engine_batch([stored_map([1, 2]), stored_map([3], parent=2, tokens=list(range(8, 12))),
                                       {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"},
                                       {"type": "AllBlocksCleared"}]),
        "sglang-positional": engine_batch([stored_array([10, 11]), ["BlockRemoved", [10], "GPU"], ["AllBlocksCleared"]],
                                          None),
        "legacy-envelope": pack([TS, [stored_array([5])]]),
        "map-envelope": pack({"ts": TS, "events": [stored_map([6])], "data_parallel_rank": 0}),
        "sglang-attn-dp-rank": pack({"ts": TS, "events": [stored_map([6])], "attn_dp_rank": 1}),
        "bytes-hashes": engine_batch([stored_map([b"\x00" * 24 + struct.pack(">Q", 77)],
                                                 parent=None), stored_map([-5], parent=b"\x01" * 32)]),
        "extra-keys-salt-and-multimodal": engine_batch([
            stored_map([20, 21], lora_name="tenant-a", extra_keys=[["tenant-a", "salt-1", digest], [[digest, 0]]]),
            stored_map([22], parent=21)]),
        "trtllm-cache-salt": engine_batch([stored_map([30], cache_salt="user-9", medium="gpu")]),
        "offloaded-tiers": engine_batch([stored_map([40], medium="CPU"), stored_map([41], medium="disk"),
                                         {"type": "BlockRemoved", "block_hashes": [40], "medium": "CPU_TIER1"}]),
        "rejections": engine_batch([stored_map([50], block_size=8), stored_map([51, 51]), {"type": "Unknown"},
                                    stored_map([52], tokens=[[1, 2], [3, 4]]), 7]),
        "truncated-tokens": engine_batch([stored_map([60, 61, 62], tokens=list(range(9)))]),
    }


def engine_event_seeds():
    payloads = engine_payloads()
    for name, payload in payloads.items():
        write("engine_events", name, b"\x03" + payload)
    eagle = engine_batch([stored_map([70, 71], tokens=[[i, i + 1] for i in range(8)])])
    write("engine_events", "eagle-token-pairs", b"\x0b" + eagle)
    write("engine_events", "namespace-memory-and-reset",
          b"\x03" + records(payloads["extra-keys-salt-and-multimodal"], engine_batch([stored_map([23], parent=22)]),
                            b"", engine_batch([stored_map([24], parent=22)])))
    write("engine_events", "other-rank", b"\x13" + engine_batch([stored_map([80])], 0))


def engine_frame_seeds():
    payload = engine_payloads()["vllm-map-form"]
    seq = struct.pack(">Q", 41)
    write("engine_frames", "live", b"\x03" + records(b"kv-events", seq, payload))
    write("engine_frames", "replay-reply", b"\x03" + records(seq, payload))
    write("engine_frames", "trtllm-replay-reply", b"\x03" + records(b"", seq, payload))
    write("engine_frames", "end-of-replay", b"\x03" + records(b"\xff" * 8, b""))
    write("engine_frames", "short-seq", b"\x03" + records(b"kv-events", b"\x00\x01", payload))


# ---- text inputs ----

def topology_seeds():
    write("topology_file", "demo-topology.yaml", (ROOT / "deploy" / "demo" / "topology.yaml").read_bytes())
    write("topology_file", "json.json", json.dumps({
        "version": 1,
        "endpoints": [{"endpoint": {"namespace": "prod", "component": "llama", "endpoint": "generate"},
                       "workers": [{"workerId": "101", "card": {"displayName": "m", "kvCacheBlockSize": 16},
                                    "kvSources": [{"dpRank": 0, "push": {}}]}],
                       "liveWorkers": {"workerIds": [101]}, "schedulerRouterIds": [3]}],
        "frontends": [{"namespace": "prod", "frontendIds": ["7"]}]}).encode())
    write("topology_file", "quoted-scalars.yaml",
          b'version: 1\nfrontends:\n  - namespace: "007"\n    frontendIds: [\'1\', 2]\n')
    write("topology_file", "anchors.yaml", b"version: 1\nendpoints:\n  - endpoint: &e {namespace: p, component: c, "
                                            b"endpoint: g}\n  - endpoint: *e\n")
    write("topology_file", "unknown-field.yaml", b"version: 1\nendpoints: [{unknownField: 1}]\n")
    write("topology_file", "not-yaml.yaml", b"version: [1\n")


def prometheus_seeds():
    vllm = []
    for rank, usage in (("0", 0.25), ("1", 0.0732421875)):
        vllm.append(f'vllm:kv_cache_usage_perc{{engine="{rank}",model_name="meta/llama-3-8b"}} {usage!r}')
        vllm.append(f'vllm:cache_config_info{{block_size="16",engine="{rank}",num_gpu_blocks="8192",'
                    f'sliding_window="None"}} 1.0')
        for bound, count in (("0.3", 1.0), ("+Inf", 4.0)):
            vllm.append(f'vllm:e2e_request_latency_seconds_bucket{{engine="{rank}",le="{bound}"}} {count!r}')
    page = ("# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n" + "\n".join(vllm) + "\n")
    write("prometheus_text", "vllm-two-ranks.txt", page.encode())
    write("prometheus_text", "vllm-legacy-unlabelled.txt",
          b'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\nvllm:cache_config_info{num_gpu_blocks="100"} 1\n')
    write("prometheus_text", "sglang-dp.txt",
          b'# TYPE sglang:num_used_tokens gauge\nsglang:num_used_tokens{dp_rank="0",tp_rank="0"} 1600.0\n'
          b'sglang:num_used_tokens{dp_rank="1",tp_rank="4"} 1601.0\nsglang:prompt_tokens_total 2.048e+06\n')
    write("prometheus_text", "openmetrics-eof.txt",
          b'# TYPE a counter\na_total{x="1",} 3 1767225600250\r\nb NaN\nc +Inf -5\n# EOF\nignored{ 1\n')
    write("prometheus_text", "escapes.txt", b'm{path="C:\\\\dir\\"q\\"\\nline"} -1.5e-3\n')
    write("prometheus_text", "bad-line.txt", b'ok 1\nm{x="1" y="2"} 1\n')


def main():
    cbi1_seeds()
    pool_replica_seeds()
    client_plane_seeds()
    wire_request_seeds()
    wire_response_seeds()
    ingest_request_seeds()
    pool_index_seeds()
    engine_event_seeds()
    engine_frame_seeds()
    topology_seeds()
    prometheus_seeds()


if __name__ == "__main__":
    main()
