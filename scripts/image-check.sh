#!/usr/bin/env bash
# Checks that deploy/docker/runtime-packages.txt lists exactly the Debian packages that
# provide the shared libraries the shipped binaries link (from ldd), so the slim runtime
# image has everything it needs and nothing more. No Docker engine is needed.
# Usage: scripts/image-check.sh [BIN_DIR]   (default build/bin); --write regenerates the list.
set -euo pipefail
cd "$(dirname "$0")/.."
write=false
if [[ "${1:-}" == "--write" ]]; then write=true; shift; fi
bin_dir=${1:-build/bin}
list=deploy/docker/runtime-packages.txt

# The package owning a library file; dpkg may record it under /lib or /usr/lib (usrmerge).
owner_of() {
  local path
  for path in "$1" "$(readlink -f "$1")"; do
    for candidate in "$path" "${path#/usr}" "/usr$path"; do
      if owner=$(dpkg -S "$candidate" 2>/dev/null); then
        echo "${owner%%:*}"
        return 0
      fi
    done
  done
  echo "image-check: no Debian package owns $1" >&2
  return 1
}

for binary in "$bin_dir/kv-relay" "$bin_dir/kvrelay-cli"; do
  [[ -x "$binary" ]] || { echo "image-check: $binary is missing (run make build)" >&2; exit 1; }
done
libraries=$(for binary in "$bin_dir/kv-relay" "$bin_dir/kvrelay-cli"; do
  ldd "$binary" | awk '/=> \// { print $3 }'
done | sort -u)
derived=$(for library in $libraries; do owner_of "$library"; done | sed 's/:amd64$//' | sort -u)

if $write; then
  { echo "# Runtime packages of the kv-relay image, derived from ldd by scripts/image-check.sh --write."
    echo "$derived"; } > "$list"
  echo "image-check: wrote $list"
  exit 0
fi

listed=$(grep -v '^#' "$list" | sort -u)
if [[ "$derived" != "$listed" ]]; then
  echo "image-check: $list does not match the binaries' libraries:" >&2
  diff <(echo "$listed") <(echo "$derived") >&2 || true
  echo "image-check: run scripts/image-check.sh --write and review the change" >&2
  exit 1
fi
echo "image-check: $(echo "$listed" | wc -l) runtime packages match ldd of kv-relay and kvrelay-cli"
