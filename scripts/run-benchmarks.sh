#!/usr/bin/env bash
# Runs every benchmark binary of a build and prints their tables. The Google Benchmark
# micro-benchmarks (core_bench, client_bench) run pinned to one core and take the extra
# flags; the system benchmarks (relay_bench, ingest_bench), whose relay runs its actors,
# gRPC and ZeroMQ threads side by side, get both cores, and so does the load generator's short
# sweep (kvrelay-bench: a relay process, its sources and its consumers).
# Usage: scripts/run-benchmarks.sh BIN_DIR [extra Google Benchmark flags]
set -euo pipefail
bin_dir=${1:?usage: run-benchmarks.sh BIN_DIR}
shift
one_core=() both_cores=()
if command -v taskset >/dev/null; then
  one_core=(taskset -c 0)
  both_cores=(taskset -c 0,1)
fi
for bench in "$bin_dir"/*_bench; do
  echo "== $(basename "$bench")"
  case $(basename "$bench") in
    relay_bench | ingest_bench) "${both_cores[@]}" "$bench" ;;
    *) "${one_core[@]}" "$bench" --benchmark_counters_tabular=true "$@" ;;
  esac
done
echo "== kvrelay-bench (short sweep; docs/benchmarks.md#the-load-generator-issue-15 has the full one)"
"${both_cores[@]}" "$bin_dir/kvrelay-bench" --rate 10000,100000 --consumers 1,64 --duration 5
