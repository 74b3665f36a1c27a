#!/usr/bin/env bash
# Builds the container image (scripts/image-build.sh: kv-relay:<version> from build/bin on a
# mmdebstrap base, no registry needed) and runs it with podman, every container as the chart
# runs it: uid 10001, read-only root filesystem, no new privileges, no capabilities.
#   1. the demo (`--demo --topology`): gRPC health SERVING, then from the host
#      `kvrelay-cli info`, `catalog` (the demo's 3 pools) and `overlap`, and /metrics;
#   2. a fake vLLM engine on the host (tools/fake_engine.py) and the relay in the image with
#      --network host: its ZeroMQ source connects and ingests (`kvrelay-cli state`), and the
#      engine's metrics page feeds the pool's load (`kvrelay-cli load`);
#   3. the chart's kv-relay container (helm template, default values with a dcId, and
#      ci/all-on-values.yaml) unchanged: its image, args, env, security context and mounts (the
#      rendered ConfigMaps, a token file for the Secret, a tmpfs for the emptyDir) until its
#      readiness and liveness probes' health services are SERVING;
#   and each one stopped with `podman stop` (SIGTERM to kv-relay as PID 1): exit code 0 and
#   the drain line in its log. Prints the image's size.
# Skips (exit 0, one line "image-test skipped: <reason>") when podman cannot be installed or
# cannot run a container here, or when the Debian mirror is unreachable for the base.
# Usage: scripts/image-test.sh [BIN_DIR]   (default build/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/image-build.sh
source scripts/image-build.sh

bin_dir=${1:-build/bin}
cli=$bin_dir/kvrelay-cli
python=/usr/bin/python3
deadline_s=${KV_RELAY_IMAGE_TEST_DEADLINE_S:-60}

say() { echo "image-test: $*"; }
die() { echo "image-test: FAILED: $*" >&2; exit 1; }
skip() { echo "image-test skipped: $*"; exit 0; }

started=$SECONDS
for binary in kv-relay kvrelay-cli; do
  [[ -x "$bin_dir/$binary" ]] || die "$bin_dir/$binary is missing (run make build)"
done
if ! [[ -x "$python" ]] || ! "$python" -c 'import grpc, zmq, msgpack, xxhash' 2>/dev/null; then
  die "$python needs python3-grpcio, python3-zmq, python3-msgpack, python3-xxhash (scripts/install-deps.sh)"
fi

reason=$(image_tools) || skip "$reason"
reason=$(image_probe) || skip "$reason"

work=$(mktemp -d "${TMPDIR:-/tmp}/kv-relay-image-test.XXXXXX")
prefix=kv-relay-image-test-$$
containers=()
engine_pid=""
cleanup() {
  local container
  for container in "${containers[@]}"; do podman rm -f -t 0 "$container" >/dev/null 2>&1 || true; done
  if [[ -n "$engine_pid" ]]; then kill "$engine_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# ---- the image -------------------------------------------------------------------------

tag=kv-relay:$(image_version)
if ! image_base >/dev/null; then
  log=$(image_cache_dir)/mmdebstrap.log
  if grep -q -E 'Temporary failure resolving|Could not connect|Failed to fetch|Network is unreachable|Could not resolve' "$log" 2>/dev/null; then
    skip "the Debian mirror is unreachable, so the base image cannot be built (see $log)"
  fi
  die "the base image could not be built"
fi
image_build "$tag" "$bin_dir" || die "podman build of $tag"
size=$(image_size "$tag")
say "image $tag: $size"

# ---- helpers ---------------------------------------------------------------------------

# The chart's security context (values.yaml), for the containers this script starts itself.
hardened=(--user 10001:10001 --read-only --security-opt no-new-privileges --cap-drop ALL)

# start NAME PODMAN_RUN_OPTIONS... -- IMAGE [ARGS...]: a detached container, removed at exit.
start() {
  local name=$prefix-$1
  shift
  containers+=("$name")
  # shellcheck disable=SC2046
  image_podman run -d --name "$name" $(image_ulimit_flags) "$@" >/dev/null ||
    die "podman run $name"
}

logs() { podman logs "$prefix-$1" 2>&1 | tail -n "${2:-30}" >&2; }

# host_port NAME CONTAINER_PORT: the loopback port podman published it on.
host_port() { podman port "$prefix-$1" "$2/tcp" | head -n1 | sed 's/.*://'; }

cat >"$work/health.py" <<'PY'
# health.py CONTAINER TARGET SERVICE DEADLINE_S: polls grpc.health.v1.Health/Check until
# SERVING (exit 0), the container exits (2) or the deadline passes (1).
import subprocess, sys, time
import grpc

container, target, service, deadline_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
encoded = service.encode()
request = (b"\x0a" + bytes([len(encoded)]) + encoded) if encoded else b""  # HealthCheckRequest
deadline, last = time.monotonic() + deadline_s, "no answer"
while time.monotonic() < deadline:
    running = subprocess.run(["podman", "container", "inspect", "-f", "{{.State.Running}}", container],
                             capture_output=True, text=True).stdout.strip()
    if running != "true":
        print(f"the container is not running (last health answer: {last})")
        sys.exit(2)
    try:
        with grpc.insecure_channel(target) as channel:
            answer = channel.unary_unary("/grpc.health.v1.Health/Check")(request, timeout=1)
        if answer == b"\x08\x01":  # HealthCheckResponse{status: SERVING}
            sys.exit(0)
        last = f"status bytes {answer!r}"
    except grpc.RpcError as error:
        last = f"{error.code().name}: {error.details()}"
    time.sleep(0.1)
print(f"not SERVING after {deadline_s:.0f} s (last answer: {last})")
sys.exit(1)
PY

# await_serving NAME HOST:PORT SERVICE
await_serving() {
  local out
  if ! out=$("$python" "$work/health.py" "$prefix-$1" "$2" "$3" "$deadline_s"); then
    logs "$1"
    die "$1: health of '${3:-(server)}' on $2: $out"
  fi
}

# until_ok DESCRIPTION COMMAND...: reruns COMMAND (every 0.2 s) until it succeeds or the deadline.
until_ok() {
  local what=$1 end=$((SECONDS + deadline_s))
  shift
  until "$@" >"$work/last.out" 2>&1; do
    ((SECONDS < end)) || { cat "$work/last.out" >&2; die "$what (for ${deadline_s} s)"; }
    sleep 0.2
  done
}

# stop NAME: podman stop (SIGTERM to PID 1); kv-relay must drain and exit 0.
stop() {
  local name=$prefix-$1 stop_started=$SECONDS code
  podman stop -t 30 "$name" >/dev/null || die "podman stop $name"
  code=$(podman container inspect -f '{{.State.ExitCode}}' "$name")
  if [[ "$code" != 0 ]]; then logs "$1"; die "$1: exit code $code after SIGTERM (expected 0)"; fi
  podman logs "$name" >"$work/$1.log" 2>&1
  grep -q 'SIGTERM received: draining' "$work/$1.log" || { logs "$1"; die "$1: no drain line in the log"; }
  grep -q 'relay stopped' "$work/$1.log" || { logs "$1"; die "$1: the relay did not log its stop"; }
  say "$1: SIGTERM -> drained, exit code 0 in $((SECONDS - stop_started)) s"
}

# ---- 1. the demo -----------------------------------------------------------------------

demo_topology=/etc/kv-relay/demo/topology.yaml
start demo "${hardened[@]}" --tmpfs /tmp:rw,size=64m \
  -p 127.0.0.1::50051 -p 127.0.0.1::50052 -p 127.0.0.1::9464 \
  -v "$PWD/deploy/demo/topology.yaml:$demo_topology:ro" \
  "$tag" --demo --topology "$demo_topology"
wan=127.0.0.1:$(host_port demo 50051)
ingest=127.0.0.1:$(host_port demo 50052)
metrics=127.0.0.1:$(host_port demo 9464)
await_serving demo "$wan" dynamo.kvrelay.v1.KvEventRelay
await_serving demo "$ingest" ""
say "demo: health SERVING on the WAN ($wan) and ingest ($ingest) ports"

# The security context took: PID 1 is kv-relay as uid 10001, and the root filesystem is read-only.
# (Read from the host's /proc: numeric, whatever users the host or the image name.)
host_pid=$(podman inspect --format '{{.State.Pid}}' "$prefix-demo")
pid1_uid=$(awk '/^Uid:/ { print $3 }' "/proc/$host_pid/status")
pid1_exe=$(tr '\0' '\n' <"/proc/$host_pid/cmdline" | head -n 1)
pid1="$pid1_uid $pid1_exe"
[[ "$pid1" == "10001 /usr/local/bin/kv-relay" ]] || die "demo: PID 1 is '$pid1', expected kv-relay as uid 10001"
if podman exec --user 0 "$prefix-demo" /usr/bin/touch /usr/local/bin/written 2>"$work/touch.err"; then
  die "demo: the root filesystem is writable"
fi
grep -q 'Read-only file system' "$work/touch.err" || { cat "$work/touch.err" >&2; die "demo: unexpected write error"; }

"$cli" info --target "$wan" >"$work/info.txt" || die "kvrelay-cli info"
grep -q -E "^$wan +1 +[0-9a-f]{16} +[0-9a-f]{16}$" "$work/info.txt" || { cat "$work/info.txt" >&2; die "kvrelay-cli info: no protocol-1 relay row"; }

catalog_has_demo_pools() {
  "$cli" catalog --json --target "$wan" | "$python" -c '
import json, sys
pools = json.load(sys.stdin)["snapshot"]["pools"]
endpoints = sorted(p["servingEndpoint"]["component"] for p in pools)
print(endpoints)
sys.exit(0 if endpoints == ["llama", "qwen-decode", "qwen-prefill"] else 1)'
}
until_ok "kvrelay-cli catalog: the demo's 3 pools (llama, qwen-prefill, qwen-decode)" catalog_has_demo_pools
"$cli" catalog --target "$wan" >"$work/catalog.txt" || die "kvrelay-cli catalog"
grep -q "^$wan  catalog revision [0-9]*, 3 pools$" "$work/catalog.txt" || { cat "$work/catalog.txt" >&2; die "kvrelay-cli catalog: not 3 pools"; }

# The demo's system prompt 3 (tokens 3000..3159: 10 blocks of 16 for Llama, 5 of 32 for Qwen).
seq 3000 3159 >"$work/prompt.txt"
overlap_cached() {  # overlap_cached MODEL POOLS BLOCKS: every pool answers, cached blocks in all
  "$cli" overlap --model "$1" --tokens "$work/prompt.txt" --json --target "$wan" | "$python" -c '
import json, sys
rows, pools, blocks = json.load(sys.stdin), int(sys.argv[1]), int(sys.argv[2])
print(rows)
ok = len(rows) == pools and all(r["prompt_blocks"] == blocks and r["readiness"] == "READY"
                                and r["cached_blocks"] > 0 for r in rows)
sys.exit(0 if ok else 1)' "$2" "$3"
}
until_ok "kvrelay-cli overlap --model llama: 1 READY pool with the prompt's leading blocks cached" overlap_cached llama 1 10
until_ok "kvrelay-cli overlap --model Qwen/Qwen3-32B: 2 READY pools with cached blocks" overlap_cached Qwen/Qwen3-32B 2 5
"$cli" overlap --model llama --tokens "$work/prompt.txt" --target "$wan" >"$work/overlap.txt" || die "kvrelay-cli overlap"

materialized=$(curl -sf "http://$metrics/metrics" | awk '$1 == "kv_relay_pools_materialized" { print $2 }') ||
  die "curl http://$metrics/metrics"
[[ "$materialized" == 3 ]] || die "/metrics: kv_relay_pools_materialized is '$materialized', expected 3"
say "demo: kvrelay-cli info, catalog (3 pools), overlap ($(awk 'NR == 2 { print $6 }' "$work/overlap.txt") blocks of the prompt cached in llama) and /metrics (kv_relay_pools_materialized 3) from the host"
stop demo

# ---- 2. a real engine over the network ------------------------------------------------

mkdir -p "$work/engine/tmp" "$work/engine/topology"
chown 10001:10001 "$work/engine/tmp" 2>/dev/null || chmod 0777 "$work/engine/tmp"
coproc engine { exec "$python" tools/fake_engine.py --replay --metrics --num-gpu-blocks 1024; }
# shellcheck disable=SC2154  # set by coproc
engine_pid=$engine_PID
engine_in=${engine[1]}
engine_out=${engine[0]}
read -r -t 30 ready <&"$engine_out" || die "tools/fake_engine.py did not start"
engine_field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$ready"; }
# engine_command JSON: its "ok ..." answer in $answer (no subshell: it would not have the
# coprocess's descriptors).
engine_command() {
  echo "$1" >&"$engine_in"
  read -r -t 60 answer <&"$engine_out" || die "tools/fake_engine.py: no answer to $1"
  [[ "$answer" == ok* ]] || die "tools/fake_engine.py: $1 -> $answer"
}
cat >"$work/engine/topology/topology.yaml" <<EOF
version: 1
endpoints:
  - endpoint: {namespace: image-test, component: engine, endpoint: generate}
    workers:
      - workerId: 1
        card:
          displayName: fake/model
          kvCacheBlockSize: 16
          workerType: WORKER_TYPE_AGGREGATED
          modelType: 1
          runtimeConfig: {totalKvBlocks: 1024}
        kvSources: [{dpRank: 0, zmq: {endpoint: "$(engine_field pub)", replayEndpoint: "$(engine_field replay)"}}]
        engineMetrics: {url: "$(engine_field metrics)", kind: ENGINE_KIND_VLLM, intervalMs: 200}
    liveWorkers: {workerIds: [1]}
EOF
start engine "${hardened[@]}" --network host \
  -v "$work/engine/tmp:/tmp" -v "$work/engine/topology:/etc/kv-relay/topology:ro" \
  "$tag" --listen 127.0.0.1:0 --ingest-listen 127.0.0.1:0 --metrics-listen off --load-window-ms 200 \
  --ready-file /tmp/ready.json --topology /etc/kv-relay/topology/topology.yaml --dc-id image-test
ready_file_written() {
  [[ $(podman container inspect -f '{{.State.Running}}' "$prefix-engine") == true ]] || { logs engine; die "engine: the relay exited"; }
  [[ -s "$work/engine/tmp/ready.json" ]]
}
until_ok "engine: the relay's --ready-file" ready_file_written
wan=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["wan"])' "$work/engine/tmp/ready.json")
ingest=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["ingest"])' "$work/engine/tmp/ready.json")
await_serving engine "$ingest" kvrelay.ingest.v1.RelayIngest

engine_command '{"op": "await_subscribers", "count": 1, "timeout_ms": 30000}'
engine_command '{"op": "random", "seed": 16, "batches": 8, "events_per_batch": 4, "blocks_per_store": 2}'
seq=${answer#*seq=}
engine_command '{"op": "metrics", "usage": {"0": 0.25}}' 
source_ingested() {
  "$cli" state --json --target "$ingest" | "$python" -c '
import json, sys
state, seq = json.load(sys.stdin), sys.argv[1]
sources = [s for e in state["endpoints"] for s in e.get("sources", [])]
pools = state.get("pools", [])
print(sources, [p.get("uniqueBlocks") for p in pools])
ok = (len(sources) == 1 and sources[0]["transport"] == "zmq" and sources[0].get("connected")
      and sources[0].get("lastSequence") == seq and len(pools) == 1 and int(pools[0].get("uniqueBlocks", 0)) > 0)
sys.exit(0 if ok else 1)' "$seq"
}
until_ok "engine: kvrelay-cli state shows the zmq source connected at seq $seq" source_ingested
"$cli" state --target "$ingest" | grep -E -q '^image-test/engine/generate +1 +0 +zmq +yes +'"$seq"' ' ||
  die "engine: kvrelay-cli state's source table"
load_scraped() {  # the engine's page (25 % of 1024 blocks) reaches the pool's load window
  "$cli" load --json --target "$wan" | "$python" -c '
import json, sys
pools = json.load(sys.stdin).get("pools", [])
loads = [(p.get("kvUsedBlocks"), p.get("totalKvBlocks"), p.get("kvObservedRanks")) for p in pools]
print(loads)
sys.exit(0 if loads == [("256", "1024", 1)] else 1)'
}
until_ok "engine: kvrelay-cli load shows the engine's metrics page (256/1024 blocks)" load_scraped
say "engine: the relay in the image (--network host) subscribed to tools/fake_engine.py over ZeroMQ (connected, last seq $seq) and scraped its metrics page"
stop engine
engine_command '{"op": "quit"}' 
wait "$engine_pid" 2>/dev/null || true
engine_pid=""

# ---- 3. the chart's container, unchanged ---------------------------------------------

helm=""
helm_cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/kv-relay/helm
if command -v helm >/dev/null; then
  helm=$(command -v helm)
else
  # No cache yet (deploy-check has not run here) is "no helm", not a failure of the pipeline.
  helm=$(find "$helm_cache" -maxdepth 2 -type f -name helm -perm -u+x 2>/dev/null | head -n1 || true)
fi
if [[ -z "$helm" ]] || ! "$python" -c 'import yaml' 2>/dev/null; then
  say "SKIPPED the chart step: no helm (scripts/deploy-check.sh fetches it into $helm_cache) or no python3-yaml"
else
  chart=deploy/helm/kv-relay
  for render in default all-on; do
    values=(--set dcId=image-test)  # the chart has no default data center id
    [[ "$render" == all-on ]] && values=(-f "$chart/ci/all-on-values.yaml")
    "$helm" template kv-relay "$chart" --namespace kv-relay "${values[@]}" >"$work/$render.yaml" ||
      die "helm template ($render)"
    mkdir -p "$work/chart-$render"
    # The kv-relay container of the StatefulSet as podman options; its volumes as files here.
    "$python" - "$work/$render.yaml" "$work/chart-$render" >"$work/chart-$render.args" <<'PY' ||
import os, re, secrets, sys
import yaml

manifest, root = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(manifest)) if d]
configmaps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
sts = next(d for d in docs if d["kind"] == "StatefulSet")
pod = sts["spec"]["template"]["spec"]
relay = next(c for c in pod["containers"] if c["name"] == "kv-relay")
assert not relay.get("command"), "the chart must keep the image's entrypoint"
psc, sc = pod.get("securityContext") or {}, relay.get("securityContext") or {}
options = []
uid, gid = sc.get("runAsUser", psc.get("runAsUser")), sc.get("runAsGroup", psc.get("runAsGroup"))
if uid is not None:
    options += ["--user", f"{uid}:{gid}" if gid is not None else str(uid)]
if psc.get("fsGroup") is not None:
    options += ["--group-add", str(psc["fsGroup"])]
if sc.get("readOnlyRootFilesystem"):
    options.append("--read-only")
if sc.get("allowPrivilegeEscalation") is False:
    options += ["--security-opt", "no-new-privileges"]
for cap in (sc.get("capabilities") or {}).get("drop", []):
    options += ["--cap-drop", cap]
if sc.get("privileged"):
    sys.exit("the chart runs the relay privileged")
for var in relay.get("env") or []:
    # A downward-API value stands in as what the pod index label holds.
    options += ["--env", f"{var['name']}={var.get('value', '0')}"]
volumes = {v["name"]: v for v in pod.get("volumes") or []}
for mount in relay.get("volumeMounts") or []:
    volume, path = volumes[mount["name"]], mount["mountPath"]
    ro = ":ro" if mount.get("readOnly") else ""
    if "emptyDir" in volume:
        size = (volume["emptyDir"] or {}).get("sizeLimit", "64Mi").replace("Mi", "m").replace("Gi", "g")
        options += ["--tmpfs", f"{path}:rw,size={size},mode=1777"]
        continue
    directory = os.path.join(root, mount["name"])
    os.makedirs(directory, exist_ok=True)
    if "configMap" in volume:
        for key, text in configmaps[volume["configMap"]["name"]].items():
            with open(os.path.join(directory, key), "w") as f:
                f.write(text)
            os.chmod(os.path.join(directory, key), 0o644)
    elif "secret" in volume:  # a token file in place of the Secret, with its mode and fsGroup
        for item in volume["secret"].get("items") or []:
            file = os.path.join(directory, item["path"])
            with open(file, "w") as f:
                f.write(secrets.token_hex(16) + "\n")
            try:
                os.chown(file, 0, psc.get("fsGroup", 0))
                os.chmod(file, volume["secret"].get("defaultMode", 0o644))
            except PermissionError:  # not root (rootless podman): readable by all instead
                os.chmod(file, 0o444)
    else:
        sys.exit(f"volume {mount['name']}: no stand-in for {sorted(volume)}")
    os.chmod(directory, 0o755)
    options += ["-v", f"{directory}:{path}{ro}"]
for port in relay.get("ports") or []:
    options += ["-p", f"127.0.0.1::{port['containerPort']}"]
# Health checks: the probes' (port, grpc service).
for probe in ("readinessProbe", "livenessProbe"):
    grpc = (relay.get(probe) or {}).get("grpc")
    if grpc:
        print(f"probe\t{probe}\t{grpc['port']}\t{grpc.get('service', '')}")
for option in options:
    print(f"option\t{option}")
print(f"image\t{relay['image']}")
for arg in relay.get("args") or []:
    print(f"arg\t{arg}")
PY
      die "the chart's StatefulSet ($render) cannot be run as is"
    options=() args=() probes=()
    while IFS=$'\t' read -r kind a b c; do
      case $kind in
        option) options+=("$a") ;;
        arg) args+=("$a") ;;
        image) image=$a ;;
        probe) probes+=("$a $b ${c:-}") ;;
      esac
    done <"$work/chart-$render.args"
    [[ "$image" == "$tag" ]] || die "chart ($render): image $image, but make image builds $tag"
    ((${#probes[@]} > 0)) || die "chart ($render): no gRPC probes to await"
    start "chart-$render" "${options[@]}" "$image" "${args[@]}"
    for probe in "${probes[@]}"; do
      read -r _ probe_port probe_service <<<"$probe"
      await_serving "chart-$render" "127.0.0.1:$(host_port "chart-$render" "$probe_port")" "${probe_service:-}"
    done
    token=$(find "$work/chart-$render" -path '*ingest-auth*' -type f | head -n1)
    if [[ -n "$token" ]]; then
      # The mounted token file is the one the relay enforces: with it `state` answers, without not.
      port=127.0.0.1:$(host_port "chart-$render" 50052)
      "$cli" state --ingest-token-file "$token" --target "$port" >/dev/null || die "chart ($render): kvrelay-cli state with the token"
      if env -u KV_RELAY_INGEST_TOKEN_FILE "$cli" state --target "$port" >/dev/null 2>"$work/no-token.err" ||
         ! grep -q 'needs credentials' "$work/no-token.err"; then
        cat "$work/no-token.err" >&2
        die "chart ($render): the ingest API must refuse a call without the token"
      fi
    fi
    say "chart ($render): ${#args[@]} args, ${#options[@]} podman options from the StatefulSet; probes SERVING: ${probes[*]}"
    stop "chart-$render"
  done
fi

say "passed in $((SECONDS - started)) s; image $tag is $size"
