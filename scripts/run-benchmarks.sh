#!/usr/bin/env bash
# Runs every benchmark binary of a build and prints their tables. The Google Benchmark
# micro-benchmarks (core_bench, client_bench) run pinned to one core and take the extra
# flags; the system benchmarks (relay_bench, engine_bench), whose relay runs its actors,
# gRPC and ZeroMQ threads side by side, get both cores.
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
    relay_bench | engine_bench) "${both_cores[@]}" "$bench" ;;
    *) "${one_core[@]}" "$bench" --benchmark_counters_tabular=true "$@" ;;
  esac
done
