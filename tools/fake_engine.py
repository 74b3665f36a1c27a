#!/usr/bin/python3
"""A fake inference engine that publishes KV-cache events exactly as vLLM does, for tests.

It speaks the engine ZeroMQ protocol the relay's ZeroMQ sources subscribe to
(docs/protocol/engine-sources.md), driven line by line from standard input so that a test
decides every batch, every gap and every restart.

Sockets and pages
-----------------
* PUB (``--endpoint``, default ``tcp://127.0.0.1:*``): every batch is three frames,
  ``[topic, seq, payload]``; ``seq`` is 8 bytes big-endian, 0 for the first batch of the
  process (or after ``restart``) and one more for each batch; ``payload`` is msgpack. The
  socket is an XPUB so that ``await_subscribers`` can see subscriptions: a subscriber
  receives exactly what a PUB sends.
* Replay ROUTER (``--replay [ENDPOINT]``): a request ``[identity, "", start_seq]`` (8 bytes
  big-endian; a REQ socket sending one frame, or a DEALER sending ``["", start_seq]``) is
  answered with ``[identity, "", seq, payload]`` for every buffered batch whose seq is at
  least ``start_seq``, oldest first, then ``[identity, "", END_SEQ, ""]`` where END_SEQ is
  eight 0xFF bytes (-1 big-endian). Any other request is ignored. The buffer holds the last
  ``--buffer-steps`` batches (default 10000).
* Prometheus page (``--metrics``): ``http://127.0.0.1:<port>/metrics``, with vLLM's
  ``vllm:kv_cache_usage_perc`` gauge (a fraction, 1 = full) and ``vllm:cache_config_info``
  (gauge 1.0 whose ``num_gpu_blocks`` label is the capacity), one series per engine
  (``engine`` label = dp rank), among a few unrelated families (a counter, a histogram).

Once everything is bound it prints one line and flushes:
``ready pub=<endpoint> replay=<endpoint or -> metrics=<url or ->``.

Payload encodings
-----------------
vLLM encodes with msgspec: a struct declared ``array_like`` is an array of all its fields, in
declaration order (``omit_defaults`` does not apply to arrays); any other struct is a map of
its fields in declaration order, without the fields that hold their declared default (None).

The batch (``--envelope``) is ``array``: ``[ts, events, data_parallel_rank]``, the rank nil
when there is none (vLLM, SGLang); ``legacy``: ``[ts, events]`` (vLLM before dp ranks, older
SGLang); or ``map``: ``{"ts", "events"[, "data_parallel_rank"]}`` (a vLLM revision whose batch
is not array_like). ``ts`` is a float64 of Unix seconds. Events follow ``--encoding``:

* ``map`` (current vLLM): a map whose first key ``"type"`` names the event, then its fields;
  a field without a default is always present, nil or not:

  - ``BlockStored``: block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
    lora_name, then when set extra_keys, group_idx, kv_cache_spec_kind,
    kv_cache_spec_sliding_window, and cache_salt (TensorRT-LLM's top-level salt; vLLM has none).
  - ``BlockRemoved``: block_hashes, medium, then group_idx when set.
  - ``AllBlocksCleared``: the tag alone.

* ``positional`` (older vLLM, SGLang): an array of the tag name and every field of the same
  list, nil where unset: BlockStored has 11 fields, BlockRemoved 3. ``--positional-fields N``
  (5 to 11) imitates older producers whose BlockStored stops after N fields (5: up to lora_id,
  6: medium, 7: lora_name); their BlockRemoved has medium from 6 on and group_idx from 9 on. A
  field that does not fit is refused, and so is cache_salt, which has no position.

Block hashes (``--hashes``): ``int`` sends vLLM's integer form, the unsigned 64-bit value;
``signed`` sends the same 64 bits as a signed integer (other producers); ``bytes`` sends
32-byte bin values whose last 8 bytes, big-endian, are the value (vLLM without integer block
hashes). Commands give hashes as integers in [-2**63, 2**64) and mean their 64 bits.

Commands (one JSON object per line on stdin)
--------------------------------------------
After each command the engine prints one line starting ``ok`` (or ``error <why>``) and
flushes. Commands that consume sequence numbers answer ``ok seq=<last seq consumed>``.

``{"op": "batch", "events": [EVENT, ...], "ts": 1.5?, "dp_rank": n|null?}``
    Publishes one batch. ``ts`` pins the timestamp (default: now); ``dp_rank`` overrides
    ``--dp-rank`` for this batch (null: none). EVENT is one of
    ``{"kind": "stored", "hashes": [h, ...], "parent": h|null, "token_ids": [t, ...] or
    [[a, b], ...] (Eagle pairs), "block_size": n, "lora_name": s|null, "lora_id": n|null,
    "medium": s|null, "extra_keys": [...]?, "group_idx": n?, "kv_cache_spec_kind": s?,
    "kv_cache_spec_sliding_window": n?, "cache_salt": s?}``,
    ``{"kind": "removed", "hashes": [...], "medium": s|null, "group_idx": n?}`` or
    ``{"kind": "cleared"}``. Defaults: parent null, block_size ``--block-size``,
    lora_name and lora_id null, medium "GPU" (null for producers older than the medium
    field); the fields marked ? are left out when absent.
``{"op": "skip", "count": n}`` or ``{"op": "skip", "batches": [[EVENT, ...], ...]}``
    Consumes seqs without sending them: they enter the replay buffer (empty batches with
    ``count``), as if the subscriber had missed them - a gap a replay fills.
``{"op": "drop", "count": n}``
    Consumes n seqs that are neither sent nor buffered: a gap no replay can fill.
``{"op": "evict"}``
    Empties the replay buffer.
``{"op": "restart"}``
    As an engine restart: the next batch is seq 0 and the replay buffer is empty (the
    sockets stay bound).
``{"op": "raw", "frames": ["<hex>", ...]}``
    Sends these frames as one message on the PUB socket; no seq is consumed.
``{"op": "random", "seed": s, "batches": n, "events_per_batch": k, "blocks_per_store": b}``
    Publishes n batches of a deterministic workload: stores of b blocks of real token ids,
    chained to a held block or starting a new chain, removals of held blocks and, rarely, a
    clear. Engine hashes are ``engine_block_hash`` (below), as the C++ fake derives them.
``{"op": "await_subscribers", "count": n, "timeout_ms": 10000, "ever": false}``
    Waits until n subscriptions that match the topic are connected:
    ``ok subscribers=<n>`` (or ``error timeout subscribers=<n>``). With ``"ever": true``, until
    n such subscriptions have been made since the engine started, each reconnection's included.
``{"op": "metrics", "usage": {"<rank>": fraction, ...}}``
    The page shows these engines with these usages (the default is the own rank at 0.0).
``{"op": "metrics_text", "text": "..."}``
    Serves this body verbatim from now on (until the next ``metrics``).
``{"op": "metrics_status", "code": 500}``
    Answers /metrics with this status (200 restores the page).
``{"op": "metrics_down"}``
    Stops the HTTP server: connections are refused from then on.
``{"op": "quit"}``
    Prints ``ok`` and exits (so does the end of stdin).

Engine block hashes: ``engine_block_hash(parent, tokens, lora_name)`` is XXH3-64 of the
parent's 8 little-endian bytes (0 for a first block) followed by each token's 4
little-endian bytes, seeded with 0, or with the XXH3-64 of the LoRA name when there is one
(so that an adapter's blocks get ids of their own, as in vLLM); ingest/fake_engine.cpp derives
the same values.

Run it with Debian's interpreter (/usr/bin/python3: python3-zmq, python3-msgpack,
python3-xxhash).
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import random
import struct
import sys
import threading
import time
from collections import deque

import msgpack
import xxhash
import zmq

END_SEQ = b"\xff" * 8
MASK64 = (1 << 64) - 1
DEFAULT_MEDIUM = "GPU"
DEFAULT_WAIT_MS = 10_000
VOCABULARY = 32_000  # token ids of the random workload stay below a real vocabulary's size
# A field that vLLM declares with a default (None): a map leaves it out while it holds it.
OPTIONAL = object()
STORED_FIELDS = 11  # BlockStored's fields in the last positional vLLM


class CommandError(Exception):
    """A command the engine cannot carry out; it answers `error <message>` and goes on."""


def engine_block_hash(parent: int | None, tokens: list[int], lora_name: str | None = None) -> int:
    data = struct.pack("<Q", parent or 0) + struct.pack(f"<{len(tokens)}I", *tokens)
    seed = xxhash.xxh3_64_intdigest(lora_name.encode("utf-8")) if lora_name else 0
    return xxhash.xxh3_64_intdigest(data, seed=seed)


# ---- encoding ------------------------------------------------------------------------------


class Encoder:
    """Turns command events into the msgpack bytes vLLM's msgspec encoder would produce."""

    def __init__(self, encoding: str, hashes: str, envelope: str, block_size: int,
                 positional_fields: int = STORED_FIELDS):
        self.encoding = encoding
        self.hashes = hashes
        self.envelope = envelope
        self.block_size = block_size
        self.positional_fields = positional_fields

    def batch(self, events: list[dict], ts: float, dp_rank: int | None) -> bytes:
        encoded = [self.event(event) for event in events]
        if self.envelope == "map":
            body = {"ts": ts, "events": encoded}
            if dp_rank is not None:
                body["data_parallel_rank"] = dp_rank
        elif self.envelope == "legacy":
            body = [ts, encoded]
        else:
            body = [ts, encoded, dp_rank]
        return msgpack.packb(body, use_bin_type=True)

    def event(self, event: dict) -> dict | list:
        kind = event.get("kind")
        if kind == "stored":
            tag, fields, positions = "BlockStored", self.stored_fields(event), self.positional_fields
        elif kind == "removed":
            tag, fields, positions = "BlockRemoved", self.removed_fields(event), self.removed_positions()
        elif kind == "cleared":
            expect_keys(event, {"kind"})
            tag, fields, positions = "AllBlocksCleared", [], 0
        else:
            raise CommandError(f"unknown event kind {kind!r}")
        if self.encoding == "map":
            return self.map_form(tag, fields)
        return self.positional_form(tag, fields, positions)

    # Older producers declared fewer fields; medium and group_idx came to both events at once.
    def removed_positions(self) -> int:
        return 1 + (self.positional_fields >= 6) + (self.positional_fields >= 9)

    # Engines that have the medium field name the GPU tier; older ones have no medium at all.
    def default_medium(self) -> str | None:
        return DEFAULT_MEDIUM if self.encoding == "map" or self.positional_fields >= 6 else None

    # Each field is (name, value, default): default is OPTIONAL for the fields vLLM declares
    # with a None default, None for the required ones.
    def stored_fields(self, event: dict) -> list[tuple]:
        expect_keys(
            event,
            {"kind", "hashes", "parent", "token_ids", "block_size", "lora_name", "lora_id", "medium", "extra_keys",
             "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "cache_salt"},
        )
        if "token_ids" not in event:
            raise CommandError("a stored event needs token_ids")
        parent = event.get("parent")
        fields = [
            ("block_hashes", self.hash_list(event), None),
            ("parent_block_hash", None if parent is None else self.hash_value(parent), None),
            ("token_ids", event["token_ids"], None),
            ("block_size", event.get("block_size", self.block_size), None),
            ("lora_id", event.get("lora_id"), None),
            ("medium", event.get("medium", self.default_medium()), None),
            ("lora_name", event.get("lora_name"), None),
        ]
        for name in ("extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"):
            fields.append((name, event.get(name), OPTIONAL))
        if "cache_salt" in event:
            if self.encoding != "map":
                raise CommandError("cache_salt has no position in the positional encoding")
            fields.append(("cache_salt", event["cache_salt"], OPTIONAL))
        return fields

    def removed_fields(self, event: dict) -> list[tuple]:
        expect_keys(event, {"kind", "hashes", "medium", "group_idx"})
        return [
            ("block_hashes", self.hash_list(event), None),
            ("medium", event.get("medium", self.default_medium()), None),
            ("group_idx", event.get("group_idx"), OPTIONAL),
        ]

    @staticmethod
    def map_form(tag: str, fields: list[tuple]) -> dict:
        encoded = {"type": tag}
        for name, value, default in fields:
            if not (default is OPTIONAL and value is None):
                encoded[name] = value
        return encoded

    @staticmethod
    def positional_form(tag: str, fields: list[tuple], positions: int) -> list:
        for name, value, _ in fields[positions:]:
            if value is not None:
                raise CommandError(f"{name} has no position in a {tag} of {positions} fields")
        return [tag] + [value for _, value, _ in fields[:positions]]

    def hash_list(self, event: dict) -> list:
        hashes = event.get("hashes")
        if not isinstance(hashes, list):
            raise CommandError("an event needs a list of hashes")
        return [self.hash_value(h) for h in hashes]

    def hash_value(self, value) -> int | bytes:
        if not isinstance(value, int) or isinstance(value, bool) or not -(1 << 63) <= value <= MASK64:
            raise CommandError(f"a block hash must be an integer in [-2**63, 2**64): {value!r}")
        bits = value & MASK64
        if self.hashes == "int":
            return bits
        if self.hashes == "signed":
            return bits - (1 << 64) if bits >= 1 << 63 else bits
        # The leading 24 bytes vary with the value, so a consumer reading the wrong end notices.
        tail = bits.to_bytes(8, "big")
        return hashlib.sha256(tail).digest()[:24] + tail


def expect_keys(event: dict, allowed: set[str]) -> None:
    unknown = set(event) - allowed
    if unknown:
        raise CommandError(f"unknown keys in a {event.get('kind')} event: {sorted(unknown)}")


# ---- the deterministic random workload ------------------------------------------------------


class RandomWorkload:
    """Stores chained under held blocks or new roots, removals of held blocks, rare clears."""

    def __init__(self, seed: int, block_size: int, blocks_per_store: int):
        self.rng = random.Random(seed)
        self.block_size = block_size
        self.blocks_per_store = blocks_per_store
        self.held: list[int] = []  # engine hashes currently cached, in storing order

    def batch(self, events_per_batch: int) -> list[dict]:
        events = []
        for _ in range(events_per_batch):
            roll = self.rng.random()
            if self.held and roll < 0.02:
                self.held.clear()
                events.append({"kind": "cleared"})
            elif self.held and roll < 0.30:
                events.append(self.removal())
            else:
                events.append(self.store())
        return events

    def store(self) -> dict:
        parent = self.rng.choice(self.held) if self.held and self.rng.random() < 0.6 else None
        hashes, tokens, previous = [], [], parent
        for _ in range(self.blocks_per_store):
            block = [self.rng.randrange(VOCABULARY) for _ in range(self.block_size)]
            previous = engine_block_hash(previous, block)
            hashes.append(previous)
            tokens.extend(block)
        self.held.extend(hashes)
        return {"kind": "stored", "hashes": hashes, "parent": parent, "token_ids": tokens}

    def removal(self) -> dict:
        count = self.rng.randint(1, min(len(self.held), self.blocks_per_store))
        victims = self.rng.sample(self.held, count)
        gone = set(victims)
        self.held = [h for h in self.held if h not in gone]
        return {"kind": "removed", "hashes": victims}


# ---- the Prometheus page -------------------------------------------------------------------


class MetricsPage:
    """What /metrics answers; written by the command loop, read by the HTTP server's threads."""

    def __init__(self, model_name: str, num_gpu_blocks: int, block_size: int, rank: int):
        self.model_name = model_name
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.lock = threading.Lock()
        self.usage = {str(rank): 0.0}
        self.verbatim: str | None = None
        self.status = 200

    def set_usage(self, usage: dict) -> None:
        with self.lock:
            self.usage = {str(rank): float(value) for rank, value in usage.items()}
            self.verbatim = None

    def set_text(self, text: str) -> None:
        with self.lock:
            self.verbatim = text

    def set_status(self, code: int) -> None:
        with self.lock:
            self.status = code

    def response(self) -> tuple[int, str]:
        with self.lock:
            if self.status != 200:
                return self.status, "fake engine: scripted failure\n"
            if self.verbatim is not None:
                return 200, self.verbatim
            return 200, self.render(dict(self.usage))

    # The exposition prometheus_client produces for vLLM: label names sorted, values as Python
    # reprs of floats, families in registration order.
    def render(self, usage: dict[str, float]) -> str:
        lines = []

        def family(name: str, kind: str, doc: str) -> None:
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} {kind}")

        def sample(name: str, labels: dict[str, str], value: float) -> None:
            text = ",".join(f'{key}="{escape(labels[key])}"' for key in sorted(labels))
            lines.append(f"{name}{{{text}}} {float(value)!r}")

        engines = sorted(usage, key=lambda rank: int(rank) if rank.isdigit() else rank)
        family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
        for rank in engines:
            sample("vllm:num_requests_running", self.labels(rank), 0.0)
        family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
        for rank in engines:
            sample("vllm:kv_cache_usage_perc", self.labels(rank), usage[rank])
        family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.")
        for rank in engines:
            sample("vllm:prompt_tokens_total", self.labels(rank), 1234.0)
        family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.")
        for rank in engines:
            for bound, count in (("0.3", 1.0), ("1.0", 3.0), ("5.0", 4.0), ("+Inf", 4.0)):
                sample("vllm:e2e_request_latency_seconds_bucket", {**self.labels(rank), "le": bound}, count)
            sample("vllm:e2e_request_latency_seconds_count", self.labels(rank), 4.0)
            sample("vllm:e2e_request_latency_seconds_sum", self.labels(rank), 6.25)
        family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
        for rank in engines:
            sample("vllm:cache_config_info", self.cache_config(rank), 1.0)
        return "\n".join(lines) + "\n"

    def labels(self, rank: str) -> dict[str, str]:
        return {"engine": rank, "model_name": self.model_name}

    # CacheConfig.metrics_info(): every field as str(), plus the engine; no model_name.
    def cache_config(self, rank: str) -> dict[str, str]:
        return {
            "block_size": str(self.block_size),
            "cache_dtype": "auto",
            "calculate_kv_scales": "False",
            "cpu_offload_gb": "0",
            "enable_prefix_caching": "True",
            "engine": rank,
            "gpu_memory_utilization": "0.9",
            "is_attention_free": "False",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "prefix_caching_hash_algo": "sha256",
            "sliding_window": "None",
            "swap_space": "4",
        }


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def start_metrics_server(page: MetricsPage) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            if self.path.split("?")[0] != "/metrics":
                status, body = 404, "not found\n"
            else:
                status, body = page.response()
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # requests are not the test's output
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


# ---- the engine ----------------------------------------------------------------------------


class FakeEngine:
    """Owns the sockets; every socket is used by the one thread that runs `run`."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.topic = args.topic.encode("utf-8")
        self.encoder = Encoder(args.encoding, args.hashes, args.envelope, args.block_size, args.positional_fields)
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 100_000)  # vLLM's default hwm
        self.pub.setsockopt(zmq.XPUB_VERBOSER, 1)  # every (un)subscription, so they can be counted
        self.pub.bind(args.endpoint)
        self.router = None
        if args.replay is not None:
            self.router = self.context.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(args.replay)
        self.page = None
        self.http = None
        if args.metrics:
            self.page = MetricsPage(args.model_name, args.num_gpu_blocks, args.block_size, args.dp_rank or 0)
            self.http = start_metrics_server(self.page)
        self.next_seq = 0
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=args.buffer_steps)
        self.subscribers = 0  # subscriptions connected now
        self.subscriptions_made = 0  # since the start, reconnections' included
        # (subscriptions wanted, whether counted since the start, monotonic deadline)
        self.waiting: tuple[int, bool, float] | None = None
        self.pending = b""  # stdin bytes not yet forming a whole line
        self.stdin_open = True
        self.running = True

    def ready_line(self) -> str:
        pub = self.pub.getsockopt(zmq.LAST_ENDPOINT).decode()
        replay = self.router.getsockopt(zmq.LAST_ENDPOINT).decode() if self.router is not None else "-"
        metrics = f"http://127.0.0.1:{self.http.server_address[1]}/metrics" if self.http is not None else "-"
        return f"ready pub={pub} replay={replay} metrics={metrics}"

    # One thread serves stdin, subscriptions and replays, so no socket is ever shared.
    def run(self) -> None:
        stdin = sys.stdin.fileno()
        poller = zmq.Poller()
        poller.register(self.pub, zmq.POLLIN)
        if self.router is not None:
            poller.register(self.router, zmq.POLLIN)
        while self.running:
            if self.waiting is None and self.run_buffered_line():
                continue
            if self.waiting is None and not self.stdin_open:
                break
            listen_to_stdin = self.waiting is None and self.stdin_open
            if listen_to_stdin:
                poller.register(stdin, zmq.POLLIN)
            ready = dict(poller.poll(self.poll_timeout_ms()))
            if listen_to_stdin:
                poller.unregister(stdin)
            if self.pub in ready:
                self.read_subscriptions()
            if self.router is not None and self.router in ready:
                self.serve_replays()
            if stdin in ready:
                self.read_stdin(stdin)
            self.check_waiting()
        self.close()

    def poll_timeout_ms(self) -> int | None:
        if self.waiting is None:
            return None
        return max(0, int((self.waiting[2] - time.monotonic()) * 1000))

    def read_stdin(self, fd: int) -> None:
        chunk = os.read(fd, 65536)
        if not chunk:
            self.stdin_open = False
        self.pending += chunk

    def run_buffered_line(self) -> bool:
        line, newline, rest = self.pending.partition(b"\n")
        if not newline and (self.stdin_open or not line.strip()):
            return False
        self.pending = rest
        if line.strip():
            self.answer(self.run_command(line))
        return True

    def answer(self, line: str | None) -> None:
        if line is not None:
            print(line, flush=True)

    def run_command(self, line: bytes) -> str | None:
        try:
            command = json.loads(line)
            if not isinstance(command, dict):
                raise CommandError("a command is a JSON object")
            handler = getattr(self, f"op_{command.get('op')}", None)
            if handler is None:
                raise CommandError(f"unknown op {command.get('op')!r}")
            return handler(command)
        except (CommandError, ValueError, TypeError, KeyError) as error:
            return f"error {error}"

    # ---- commands ----

    def op_batch(self, command: dict) -> str:
        payload = self.encode(command.get("events", []), command)
        seq = self.take_seq()
        self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        self.buffer.append((seq, payload))
        return f"ok seq={seq}"

    def op_skip(self, command: dict) -> str:
        batches = command.get("batches")
        if batches is None:
            batches = [[] for _ in range(self.count(command))]
        if not batches:
            raise CommandError("skip needs at least one batch")
        seq = None
        for events in batches:
            payload = self.encode(events, {})
            seq = self.take_seq()
            self.buffer.append((seq, payload))
        return f"ok seq={seq}"

    def op_drop(self, command: dict) -> str:
        for _ in range(self.count(command)):
            seq = self.take_seq()
        return f"ok seq={seq}"

    def op_evict(self, command: dict) -> str:
        self.buffer.clear()
        return "ok"

    def op_restart(self, command: dict) -> str:
        self.next_seq = 0
        self.buffer.clear()
        return "ok"

    def op_raw(self, command: dict) -> str:
        frames = [bytes.fromhex(frame) for frame in command["frames"]]
        if not frames:
            raise CommandError("raw needs at least one frame")
        self.pub.send_multipart(frames)
        return "ok"

    def op_random(self, command: dict) -> str:
        workload = RandomWorkload(command.get("seed", 0), self.args.block_size, command.get("blocks_per_store", 4))
        seq = None
        for _ in range(command.get("batches", 1)):
            payload = self.encode(workload.batch(command.get("events_per_batch", 4)), {})
            seq = self.take_seq()
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
            self.buffer.append((seq, payload))
        if seq is None:
            raise CommandError("random needs at least one batch")
        return f"ok seq={seq}"

    def op_await_subscribers(self, command: dict) -> str | None:
        wanted = self.count(command)
        deadline = time.monotonic() + command.get("timeout_ms", DEFAULT_WAIT_MS) / 1000
        self.waiting = (wanted, bool(command.get("ever", False)), deadline)
        self.check_waiting()
        return None  # answered by check_waiting, now or later

    def op_metrics(self, command: dict) -> str:
        self.metrics_page().set_usage(command["usage"])
        return "ok"

    def op_metrics_text(self, command: dict) -> str:
        self.metrics_page().set_text(command["text"])
        return "ok"

    def op_metrics_status(self, command: dict) -> str:
        self.metrics_page().set_status(int(command["code"]))
        return "ok"

    def op_metrics_down(self, command: dict) -> str:
        self.metrics_page()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
            self.http = None
        return "ok"

    def op_quit(self, command: dict) -> str:
        self.running = False
        return "ok"

    # ---- helpers ----

    def encode(self, events: list, command: dict) -> bytes:
        if not isinstance(events, list):
            raise CommandError("events must be a list")
        ts = float(command.get("ts", time.time()))
        dp_rank = command["dp_rank"] if "dp_rank" in command else self.args.dp_rank
        return self.encoder.batch(events, ts, dp_rank)

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    @staticmethod
    def count(command: dict) -> int:
        count = command.get("count")
        if not isinstance(count, int) or count < 1:
            raise CommandError("count must be a positive integer")
        return count

    def metrics_page(self) -> MetricsPage:
        if self.page is None:
            raise CommandError("the engine was started without --metrics")
        return self.page

    def read_subscriptions(self) -> None:
        while True:
            try:
                message = self.pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            # A subscription to a prefix of the topic receives the engine's batches.
            if message and self.topic.startswith(message[1:]):
                self.subscribers += 1 if message[0] == 1 else -1 if message[0] == 0 else 0
                self.subscriptions_made += 1 if message[0] == 1 else 0

    def check_waiting(self) -> None:
        if self.waiting is None:
            return
        wanted, ever, deadline = self.waiting
        counted = self.subscriptions_made if ever else self.subscribers
        if counted >= wanted:
            self.waiting = None
            self.answer(f"ok subscribers={counted}")
        elif time.monotonic() >= deadline:
            self.waiting = None
            self.answer(f"error timeout subscribers={counted}")

    def serve_replays(self) -> None:
        while True:
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
                continue  # malformed: no answer, as vLLM
            identity, start = frames[0], int.from_bytes(frames[2], "big")
            for seq, payload in self.buffer:
                if seq >= start:
                    self.router.send_multipart([identity, b"", seq.to_bytes(8, "big"), payload])
            self.router.send_multipart([identity, b"", END_SEQ, b""])

    def close(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        self.pub.close()
        if self.router is not None:
            self.router.close()
        self.context.term()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:*", help="PUB bind endpoint")
    parser.add_argument("--replay", nargs="?", const="tcp://127.0.0.1:*", default=None,
                        help="bind a replay ROUTER (optionally at this endpoint)")
    parser.add_argument("--metrics", action="store_true", help="serve /metrics on 127.0.0.1, an ephemeral port")
    parser.add_argument("--encoding", choices=("map", "positional"), default="map")
    parser.add_argument("--envelope", choices=("array", "legacy", "map"), default="array")
    parser.add_argument("--positional-fields", type=int, default=STORED_FIELDS,
                        help="BlockStored fields in the positional encoding (5 to 11)")
    parser.add_argument("--hashes", choices=("int", "signed", "bytes"), default="int")
    parser.add_argument("--topic", default="")
    parser.add_argument("--dp-rank", type=int, default=None, help="the batches' data_parallel_rank (default: nil)")
    parser.add_argument("--buffer-steps", type=int, default=10_000)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--model-name", default="fake/model")
    parser.add_argument("--num-gpu-blocks", type=int, default=4096)
    args = parser.parse_args(argv)
    if args.buffer_steps < 1:
        parser.error("--buffer-steps must be positive")
    if not 5 <= args.positional_fields <= STORED_FIELDS:
        parser.error("--positional-fields must be between 5 and 11")
    return args


def main(argv: list[str]) -> int:
    engine = FakeEngine(parse_args(argv))
    print(engine.ready_line(), flush=True)
    engine.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
