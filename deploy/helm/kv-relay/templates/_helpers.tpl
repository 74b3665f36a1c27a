{{/* Names and labels. */}}
{{- define "kv-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kv-relay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A name derived from the full name: "kv-relay.child" (list . "suffix"). */}}
{{- define "kv-relay.child" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "kv-relay.fullname" $root | trunc (int (sub 62 (len (index . 1))))) (index . 1) | trimSuffix "-" -}}
{{- end -}}

{{- define "kv-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kv-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kv-relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kv-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kv-relay
{{- end -}}

{{- define "kv-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kv-relay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
A scalar as the relay reads it: values files hand numbers over as float64, which would
print 16777216 as 1.6777216e+07.
*/}}
{{- define "kv-relay.scalar" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/*
Refuses a number that a values file cannot have carried exactly: Helm reads numbers as float64,
so a 64-bit id past 2^53 (a worker, frontend or router id, an instance id) arrives rounded and
would name another instance. (list VALUE PATH): walks maps and lists.
*/}}
{{- define "kv-relay.exactNumbers" -}}
{{- $value := index . 0 -}}
{{- $path := index . 1 -}}
{{- if kindIs "map" $value -}}
{{- range $key, $item := $value }}{{ include "kv-relay.exactNumbers" (list $item (printf "%s.%s" $path $key)) }}{{ end -}}
{{- else if kindIs "slice" $value -}}
{{- range $i, $item := $value }}{{ include "kv-relay.exactNumbers" (list $item (printf "%s[%d]" $path $i)) }}{{ end -}}
{{- else if and (kindIs "float64" $value) (ge $value 9007199254740992.0) -}}
{{- fail (printf "%s: %s is past 2^53, which Helm cannot read exactly from a values file: quote it (\"7587888435464773378\"), or pass the topology with --set-file topology=FILE" $path (toString $value)) -}}
{{- end -}}
{{- end -}}

{{/* Every flag of kv-relay --help but --version and the test hooks, those the chart sets
included (they are refused by name below): a typo under relay: fails here, not in a crash
loop. scripts/deploy-check.sh checks the list against the binary. */}}
{{- define "kv-relay.flags" -}}
config listen ingest-listen metrics-listen dc-id instance-id topology expected-unique-blocks
expected-unique-blocks-fallback relayout-load relayout-min-interval-ms memory-budget-bytes
publication-threshold publication-delay-ms pool-stream-frames-per-s load-window-ms
stream-queue-frames stream-queue-bytes max-message-bytes max-catalog-subscribers
max-readiness-subscribers max-load-subscribers max-serving-load-subscribers
serving-load-freshness-ms serving-load-retention-ms max-pool-streams-total
max-subscribers-per-pool max-initialized-pool-hubs snapshot-encoders
snapshot-progress-timeout-ms pool-heartbeat-ms readiness-heartbeat-ms catalog-heartbeat-ms
drain-timeout-ms ingest-token-file max-batch-events max-event-blocks max-event-tokens
max-ingest-string-bytes max-engine-message-bytes max-serving-endpoints max-workers-per-endpoint
max-kv-sources max-ingest-streams max-serving-load-sources max-serving-load-models ready-file
log-level demo demo-events-per-second
{{- end -}}

{{/* The relay map with "_" spelled "-" and null entries dropped. */}}
{{- define "kv-relay.relayValues" -}}
{{- $out := dict -}}
{{- $flags := include "kv-relay.flags" . | replace "\n" " " | splitList " " -}}
{{- range $key, $value := .Values.relay -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $name := $key | replace "_" "-" -}}
{{- if not (has $name $flags) -}}
{{- fail (printf "relay.%s is not a kv-relay flag (kv-relay --help lists them)" $key) -}}
{{- end -}}
{{- if hasKey $out $name -}}
{{- fail (printf "relay.%s is given twice (with - and with _)" $name) -}}
{{- end -}}
{{- $_ := set $out $name $value -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* --drain-timeout-ms in whole seconds, rounded up (the relay's default is 5000 ms). */}}
{{- define "kv-relay.drainSeconds" -}}
{{- $relay := include "kv-relay.relayValues" . | fromJson -}}
{{- $ms := 5000 -}}
{{- if hasKey $relay "drain-timeout-ms" -}}
{{- $ms = int64 (include "kv-relay.scalar" (index $relay "drain-timeout-ms")) -}}
{{- end -}}
{{- div (add $ms 999) 1000 -}}
{{- end -}}

{{/* How long Envoy keeps serving after the pod is told to stop (0 without the sidecar). */}}
{{- define "kv-relay.envoyHoldSeconds" -}}
{{- if .Values.mtls.enabled -}}
{{- if kindIs "invalid" .Values.mtls.drainHoldSeconds -}}
{{- add (include "kv-relay.drainSeconds" . | int64) 2 -}}
{{- else -}}
{{- int64 .Values.mtls.drainHoldSeconds -}}
{{- end -}}
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* The pod's grace period: above both the relay's drain, with the second its last calls may
still take after the timeout (docs/operations.md#restarts-upgrades-and-drain), and Envoy's hold. */}}
{{- define "kv-relay.gracePeriodSeconds" -}}
{{- $drain := include "kv-relay.drainSeconds" . | int64 -}}
{{- $hold := include "kv-relay.envoyHoldSeconds" . | int64 -}}
{{- $floor := max (add $drain 1) $hold -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add (max $drain $hold) 15 -}}
{{- else -}}
{{- $grace := int64 .Values.terminationGracePeriodSeconds -}}
{{- if le $grace $floor -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be above the drain timeout plus its last second and the Envoy hold (%d s)" $grace $floor) -}}
{{- end -}}
{{- $grace -}}
{{- end -}}
{{- end -}}

{{/* Where the relay's WAN listener binds: the pod address, or loopback behind Envoy. */}}
{{- define "kv-relay.listen" -}}
{{- if .Values.mtls.enabled -}}
127.0.0.1:{{ .Values.ports.relayLoopback }}
{{- else -}}
{{ .Values.bindAddress }}:{{ .Values.ports.wan }}
{{- end -}}
{{- end -}}

{{- define "kv-relay.hasTopology" -}}
{{- if .Values.topology -}}true{{- end -}}
{{- end -}}

{{/* The ingest API's bearer token: a Secret's key, mounted as a directory (so that the
kubelet's updates reach it; a subPath mount would never see a rotation). */}}
{{- define "kv-relay.hasIngestAuth" -}}
{{- if .Values.ingestAuth.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "kv-relay.ingestTokenFile" -}}
/etc/kv-relay/ingest-auth/token
{{- end -}}

{{/*
The kv-relay command line the chart appends to the image's entrypoint, one flag per line
as "--name=value". scripts/deploy-check.sh checks every one against `kv-relay --help`.
*/}}
{{- define "kv-relay.args" -}}
{{- $relay := include "kv-relay.relayValues" . | fromJson -}}
{{- range $managed := list "listen" "ingest-listen" "metrics-listen" "dc-id" "instance-id" "topology" "ingest-token-file" "config" -}}
{{- if hasKey $relay $managed -}}
{{- fail (printf "relay.%s is set by the chart (see the comment above relay: in values.yaml)" $managed) -}}
{{- end -}}
{{- end -}}
- {{ printf "--listen=%s" (include "kv-relay.listen" .) | quote }}
- {{ printf "--ingest-listen=%s:%v" .Values.bindAddress .Values.ports.ingest | quote }}
{{- if .Values.metrics.enabled }}
- {{ printf "--metrics-listen=%s:%v" .Values.bindAddress .Values.ports.metrics | quote }}
{{- else }}
- "--metrics-listen=off"
{{- end }}
- {{ printf "--dc-id=%s" .Values.dcId | quote }}
{{- if eq .Values.instanceId.source "value" }}
- {{ printf "--instance-id=%s" (include "kv-relay.scalar" .Values.instanceId.value) | quote }}
{{- end }}
{{- if include "kv-relay.hasTopology" . }}
- "--topology=/etc/kv-relay/topology/topology.yaml"
{{- end }}
{{- if include "kv-relay.hasIngestAuth" . }}
- {{ printf "--ingest-token-file=%s" (include "kv-relay.ingestTokenFile" .) | quote }}
{{- end }}
{{- if and (not (hasKey $relay "memory-budget-bytes")) (include "kv-relay.memoryLimitBytes" .) }}
- {{ printf "--memory-budget-bytes=%d" (div (mul (include "kv-relay.memoryLimitBytes" . | int64) 4) 5) | quote }}
{{- end }}
{{- range $name, $value := $relay }}
- {{ printf "--%s=%s" $name (include "kv-relay.scalar" $value) | quote }}
{{- end }}
{{- end -}}

{{/* The relay's --max-message-bytes, which Envoy's message limit follows. */}}
{{- define "kv-relay.maxMessageBytes" -}}
{{- $relay := include "kv-relay.relayValues" . | fromJson -}}
{{- if hasKey $relay "max-message-bytes" }}{{ include "kv-relay.scalar" (index $relay "max-message-bytes") }}{{ else }}8388608{{ end -}}
{{- end -}}

{{/* The relay container's memory limit in bytes, or "" without one: the memory budget is 80 %
of it (docs/protocol/capacity.md#budget). Kubernetes quantities: plain or decimal numbers of
bytes, k/M/G/T, Ki/Mi/Gi/Ti (1.5Gi). */}}
{{- define "kv-relay.memoryLimitBytes" -}}
{{- $limit := "" -}}
{{- /* A plain number in a values file arrives as a float: printed as an integer, not 2.1e+09. */ -}}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = include "kv-relay.scalar" . }}{{ end }}{{ end }}{{ end -}}
{{- if $limit -}}
{{- $number := regexFind "^[0-9]+([.][0-9]+)?" $limit -}}
{{- $unit := trimPrefix $number $limit -}}
{{- $scale := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if or (not $number) (not (hasKey $scale $unit)) -}}
{{- fail (printf "resources.limits.memory %q: use bytes or a k, M, G, T, Ki, Mi, Gi or Ti suffix" $limit) -}}
{{- end -}}
{{- if contains "." $number -}}
{{- floor (mulf $number (get $scale $unit)) | int64 -}}
{{- else -}}
{{- mul ($number | int64) (get $scale $unit) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Every check on the values that the templates cannot express as a schema. */}}
{{- define "kv-relay.validate" -}}
{{- if not (or (kindIs "invalid" .Values.dcId) (kindIs "string" .Values.dcId)) -}}
{{- fail (printf "dcId must be a string: YAML and --set read %v as a %s, which would not render as written (quote it, or use --set-string dcId=...)" .Values.dcId (kindOf .Values.dcId)) -}}
{{- end -}}
{{- if not .Values.dcId -}}
{{- fail "dcId must be set (--set dcId=<this data center's id>): it is hashed into every PoolId; give each data center its own and keep it" -}}
{{- end -}}
{{- if not (has .Values.instanceId.source (list "podIndex" "hostname" "value")) -}}
{{- fail "instanceId.source must be podIndex, hostname or value" -}}
{{- end -}}
{{- if eq .Values.instanceId.source "value" -}}
{{- if kindIs "invalid" .Values.instanceId.value -}}
{{- fail "instanceId.source value needs instanceId.value" -}}
{{- end -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- fail "instanceId.source value with more than one replica would give every replica the same instance id" -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.wanService.type (list "ClusterIP" "NodePort" "LoadBalancer")) -}}
{{- fail "wanService.type must be ClusterIP, NodePort or LoadBalancer" -}}
{{- end -}}
{{- if and (ne .Values.wanService.type "ClusterIP") (not .Values.mtls.enabled) (not .Values.wanService.allowUnauthenticated) -}}
{{- fail (printf "wanService.type %s without mtls.enabled would expose the unauthenticated relay; enable mtls or set wanService.allowUnauthenticated=true if an authenticating proxy is in front" .Values.wanService.type) -}}
{{- end -}}
{{- if and .Values.ingestAuth.existingSecret (not .Values.ingestAuth.key) -}}
{{- fail "ingestAuth.existingSecret needs ingestAuth.key (the Secret's key that holds the token)" -}}
{{- end -}}
{{- if and .Values.mtls.enabled (not .Values.mtls.secretName) -}}
{{- fail "mtls.enabled needs mtls.secretName (a Secret with tls.crt, tls.key and ca.crt)" -}}
{{- end -}}
{{- if and .Values.mtls.enabled (eq (int .Values.ports.relayLoopback) (int .Values.ports.wan)) -}}
{{- fail "ports.relayLoopback must differ from ports.wan (Envoy listens on ports.wan)" -}}
{{- end -}}
{{- if .Values.mtls.enabled -}}
{{- $relayLimit := include "kv-relay.maxMessageBytes" . -}}
{{- if gt ($relayLimit | int64) 1073741823 -}}
{{- fail (printf "relay.max-message-bytes (%s) of 1 GiB or more with mtls.enabled: Envoy's HTTP/2 connection window (twice the message limit) would pass 2^31 - 1" $relayLimit) -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.mtls.maxMessageBytes) -}}
{{- $envoy := include "kv-relay.scalar" .Values.mtls.maxMessageBytes -}}
{{- if ne $envoy $relayLimit -}}
{{- fail (printf "mtls.maxMessageBytes (%s) must equal the relay's --max-message-bytes (%s): leave it null to follow it" $envoy $relayLimit) -}}
{{- end -}}
{{- end -}}
{{- $proxyOnly := list (dict "podSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" "kv-relay-mtls-proxy"))) -}}
{{- if and .Values.networkPolicy.enabled (eq (toJson .Values.networkPolicy.wanFrom) (toJson $proxyOnly)) -}}
{{- fail "mtls.enabled with the default networkPolicy.wanFrom admits only a separate mTLS proxy, not the routers Envoy now serves: set networkPolicy.wanFrom to their addresses (ipBlocks) or the load balancer's" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" -}}
{{- end -}}
{{- if not (kindIs "string" .Values.topology) -}}
{{- include "kv-relay.exactNumbers" (list .Values.topology "topology") -}}
{{- end -}}
{{- include "kv-relay.exactNumbers" (list .Values.instanceId.value "instanceId.value") -}}
{{- $_ := include "kv-relay.gracePeriodSeconds" . -}}
{{- end -}}
