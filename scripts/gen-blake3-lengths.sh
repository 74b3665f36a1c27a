#!/usr/bin/env bash
# Regenerates tests/data/blake3_lengths.txt with the reference BLAKE3 CLI (Debian's b3sum):
# the 32-byte hash of the official test-vector input (byte i is i % 251) for every input
# length 0..4096, which crosses every block (64) and chunk (1024) boundary up to four chunks,
# and a few large lengths around deeper tree shapes. One line per length: `<length> <hex>`.
# Usage: scripts/gen-blake3-lengths.sh   (apt-get install b3sum first)
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/data/blake3_lengths.txt
large_lengths=(8191 8192 8193 65536 1048577 3145735)  # 3145735 = 3 * 1048576 + 7

command -v b3sum >/dev/null || { echo "gen-blake3-lengths: b3sum not found (apt-get install b3sum)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work" "$out.tmp"' EXIT

# One period of the pattern (bytes 0..250), doubled until it covers the longest input.
for ((i = 0; i < 251; i++)); do printf "\\$(printf '%03o' "$i")"; done >"$work/pattern"
while (($(stat -c %s "$work/pattern") < large_lengths[-1])); do
  cat "$work/pattern" "$work/pattern" >"$work/doubled"
  mv "$work/doubled" "$work/pattern"
done

digest_of() {
  local digest
  digest=$(head -c "$1" "$work/pattern" | b3sum --no-names)
  [[ "$digest" =~ ^[0-9a-f]{64}$ ]] || { echo "gen-blake3-lengths: bad b3sum output: $digest" >&2; exit 1; }
  echo "$1 $digest"
}

{
  echo "# BLAKE3 hash (32 bytes) of input byte i = i % 251, by length; $(b3sum --version)," \
       "scripts/gen-blake3-lengths.sh"
  for ((n = 0; n <= 4096; n++)); do digest_of "$n"; done
  for n in "${large_lengths[@]}"; do digest_of "$n"; done
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(grep -vc '^#' "$out") lengths)"
