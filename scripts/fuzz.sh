#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer harnesses of tests/fuzz/ with clang in build-fuzz/ and runs
# each for FUZZ_SECONDS (default 60) seconds, starting from its seed corpus (tests/fuzz/corpus/,
# read only) and a working corpus of its own (build-fuzz/corpus/<harness>/, kept between runs).
# Crashing inputs go to build-fuzz/crashes/<harness>/, each run's output to build-fuzz/logs/.
# Exits non-zero when any harness found a crash (or a timeout, a leak, an out-of-memory).
#
#   FUZZ_HARNESSES="cbi1_frames engine_events"  only these (default: every tests/fuzz/*_fuzz.cpp)
#   FUZZ_PARALLEL=2                             harnesses run at once (default 1)
#
# clang 16, not 14: clang 14 cannot compile libstdc++ 12's std::expected for an error type with a
# destructor (std::expected<T, std::string>), which core/ uses throughout.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-1}
JOBS=${JOBS:-$(nproc)}
BUILD=build-fuzz
bash scripts/install-deps.sh --fuzz

if [[ ! -f $BUILD/build.ninja ]]; then
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  CC=clang-16 CXX=clang++-16 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVRELAY_FUZZ=ON \
    -DKVRELAY_BENCHMARKS=OFF "${launcher[@]}" >/dev/null
fi
cmake --build "$BUILD" -j "$JOBS" --target fuzz_harnesses

if [[ -n ${FUZZ_HARNESSES:-} ]]; then
  read -r -a harnesses <<<"$FUZZ_HARNESSES"
else
  harnesses=()
  for source in tests/fuzz/*_fuzz.cpp; do
    name=$(basename "$source")
    harnesses+=("${name%_fuzz.cpp}")
  done
fi

# Symbolized stacks in the logs; the sanitizers find no symbolizer of their own on Debian.
for symbolizer in llvm-symbolizer-16 llvm-symbolizer-14 llvm-symbolizer; do
  if command -v "$symbolizer" >/dev/null; then
    export ASAN_SYMBOLIZER_PATH
    ASAN_SYMBOLIZER_PATH=$(readlink -f "$(command -v "$symbolizer")")
    break
  fi
done

mkdir -p "$BUILD/logs"
run_harness() {
  local harness=$1
  local corpus=$BUILD/corpus/$harness crashes=$BUILD/crashes/$harness log=$BUILD/logs/$harness.log
  mkdir -p "$corpus" "$crashes"
  # -timeout: an input that takes seconds is a finding too (a denial of service), not patience.
  local rc=0
  "$BUILD/bin/fuzz_$harness" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$corpus" "tests/fuzz/corpus/$harness" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$BUILD/logs/$harness.rc"
}

echo "fuzz: ${#harnesses[@]} harnesses, ${FUZZ_SECONDS} s each, ${FUZZ_PARALLEL} at a time"
for harness in "${harnesses[@]}"; do
  [[ -x $BUILD/bin/fuzz_$harness ]] || { echo "fuzz: no harness named $harness" >&2; exit 2; }
  run_harness "$harness" &
  while (($(jobs -rp | wc -l) >= FUZZ_PARALLEL)); do wait -n || true; done
done
wait

failed=0
printf '%-20s %12s %8s  %s\n' HARNESS EXECUTIONS CORPUS RESULT
for harness in "${harnesses[@]}"; do
  log=$BUILD/logs/$harness.log
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  units=$(find "$BUILD/corpus/$harness" -type f | wc -l)
  found=$(find "$BUILD/crashes/$harness" -type f | wc -l)
  if [[ $(cat "$BUILD/logs/$harness.rc") != 0 || $found != 0 ]]; then
    failed=1
    result="FAILED: $found input(s) in $BUILD/crashes/$harness/, see $log"
  else
    result=ok
  fi
  printf '%-20s %12s %8s  %s\n' "$harness" "$runs" "$units" "$result"
done
exit "$failed"
