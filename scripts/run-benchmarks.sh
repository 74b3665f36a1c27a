#!/usr/bin/env bash
# Runs every benchmark binary of a build on one core and prints their tables.
# Usage: scripts/run-benchmarks.sh BIN_DIR [extra Google Benchmark flags]
set -euo pipefail
bin_dir=${1:?usage: run-benchmarks.sh BIN_DIR}
shift
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
for bench in "$bin_dir"/*_bench; do
  echo "== $(basename "$bench")"
  "${pin[@]}" "$bench" --benchmark_counters_tabular=true "$@"
done
