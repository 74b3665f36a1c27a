#!/usr/bin/env bash
# Builds the container image kv-relay:<version> (the version of CMakeLists.txt's project(),
# the chart's appVersion) with podman from the already-built binaries: nothing is compiled
# inside the build.
#   1. the base: a Debian 12 root filesystem made with mmdebstrap (minbase + exactly
#      deploy/docker/runtime-packages.txt) from the Debian mirror apt already uses, imported
#      as localhost/kv-relay-base:<hash of the package list, the mirrors and this recipe>.
#      No container registry is needed. The tarball is cached in /var/cache/kv-relay-image
#      (as root; else ${XDG_CACHE_HOME:-~/.cache}/kv-relay/image), so only the first build
#      (or a changed package list) pays its ~100 s. KV_RELAY_BASE_IMAGE=debian:bookworm-slim
#      takes a registry's base instead (the build then apt-installs the runtime packages);
#   2. `podman build -f deploy/docker/Dockerfile --build-arg BINARIES=prebuilt` on a small
#      staged context: the two binaries of BIN_DIR (debug info stripped),
#      deploy/docker/config.yaml and the package list; the base serves as builder image too
#      (the builder stage only copies the binaries).
# The tools (podman, runc, mmdebstrap) are installed with `scripts/install-deps.sh --image`
# when missing.
# Usage: scripts/image-build.sh [--tag NAME:TAG] [BIN_DIR]   (default build/bin, kv-relay:<version>)
# Sourced (scripts/image-test.sh does), it only defines the image_* functions below.

image_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Bump when the base's recipe (mmdebstrap options below) changes: a new cache key.
image_base_recipe=1

image_say() { echo "image: $*" >&2; }

image_version() {
  sed -n 's/^project(kv_relay VERSION \([0-9][0-9.]*\).*/\1/p' "$image_repo/CMakeLists.txt"
}

# Global podman flags: runc (crun fails on hosts with hybrid cgroups). KV_RELAY_PODMAN_RUNTIME
# names another runtime, or "default" for podman's own choice.
image_runtime_flags() {
  local runtime=${KV_RELAY_PODMAN_RUNTIME:-runc}
  [[ "$runtime" == default ]] || echo "--runtime $runtime"
}
# shellcheck disable=SC2046
image_podman() { podman $(image_runtime_flags) "$@"; }

# Resource limits a container may have: podman's default nofile (1048576) is above this host's
# hard limit, and raising it needs CAP_SYS_RESOURCE, so stay within the caller's hard limits.
image_ulimit_flags() {
  local nofile nproc
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [[ "$nofile" == unlimited ]] || ((nofile > 1048576)) && nofile=1048576
  [[ "$nproc" == unlimited ]] || ((nproc > 32768)) && nproc=32768
  echo "--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
}

# Installs the image tools (install-deps.sh --image: podman, buildah, runc, mmdebstrap and the
# network stack published ports need) when one is missing. On failure prints why (one line, on
# stdout) and returns 1.
image_tools() {
  local missing
  missing=$(bash "$image_repo/scripts/install-deps.sh" --image --missing)
  [[ -z "$missing" ]] && return 0
  if [[ $(id -u) -ne 0 ]] && ! sudo -n true 2>/dev/null; then
    echo "$missing not installed, and installing them needs root (scripts/install-deps.sh --image)"
    return 1
  fi
  image_say "installing the image tools ($missing missing): scripts/install-deps.sh --image"
  local log
  log=$(mktemp "${TMPDIR:-/tmp}/kv-relay-image-tools.XXXXXX")
  if ! bash "$image_repo/scripts/install-deps.sh" --image >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    rm -f "$log"
    echo "apt could not install the image tools ($missing)"
    return 1
  fi
  rm -f "$log"
  missing=$(bash "$image_repo/scripts/install-deps.sh" --image --missing)
  [[ -z "$missing" ]] || { echo "$missing still missing after scripts/install-deps.sh --image"; return 1; }
}

# Whether podman can run a container here: a trivial command in a root filesystem of three
# files (no image needed). On failure prints the reason (one line) and returns 1.
image_probe() {
  local root error
  root=$(mktemp -d "${TMPDIR:-/tmp}/kv-relay-probe.XXXXXX")
  for file in /usr/bin/true $(ldd /usr/bin/true | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$file")" && cp -L "$file" "$root$file"
  done
  # shellcheck disable=SC2046
  if ! error=$(timeout 120 podman $(image_runtime_flags) run --rm $(image_ulimit_flags) --network none --rootfs "$root" /usr/bin/true 2>&1); then
    rm -rf "$root"
    echo "podman cannot run a container here: $(echo "$error" | grep -v '^\s*$' | tail -n1)"
    return 1
  fi
  # The default (bridge) network with a published loopback port, as the tests use it.
  # shellcheck disable=SC2046
  if ! error=$(timeout 120 podman $(image_runtime_flags) run --rm $(image_ulimit_flags) -p 127.0.0.1::9 --rootfs "$root" /usr/bin/true 2>&1); then
    rm -rf "$root"
    echo "podman cannot publish a container's port here: $(echo "$error" | grep -v '^\s*$' | tail -n1)"
    return 1
  fi
  rm -rf "$root"
}

# The Debian archives apt uses for this release, as sources.list lines (deb URI SUITE COMPONENTS).
image_mirrors() {
  local codename
  # shellcheck disable=SC1091
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  apt-cache policy 2>/dev/null | awk -v codename="$codename" '
    $1 ~ /^[0-9]+$/ && $2 ~ /^(https?|file):/ && $NF == "Packages" { uri = $2; split($3, sc, "/"); next }
    uri != "" && $1 == "release" {
      if ($0 ~ /o=Debian(,|$)/ && index(sc[1], codename) == 1) {
        key = uri " " sc[1]
        if (!(key in seen)) order[++n] = key
        if (index(" " seen[key] " ", " " sc[2] " ") == 0) seen[key] = seen[key] (seen[key] == "" ? "" : " ") sc[2]
      }
      uri = ""
    }
    END { for (i = 1; i <= n; i++) print "deb " order[i] " " seen[order[i]] }'
}

image_cache_dir() {
  if [[ $(id -u) -eq 0 ]]; then echo /var/cache/kv-relay-image; else echo "${XDG_CACHE_HOME:-$HOME/.cache}/kv-relay/image"; fi
}

# Prints the base image to build on: KV_RELAY_BASE_IMAGE, or the mmdebstrap base (made and
# imported when not there yet).
image_base() {
  if [[ -n "${KV_RELAY_BASE_IMAGE:-}" ]]; then
    echo "$KV_RELAY_BASE_IMAGE"
    return 0
  fi
  local packages mirrors key name cache tarball started
  packages=$(grep -v '^#' "$image_repo/deploy/docker/runtime-packages.txt" | sort -u | paste -sd, -)
  mirrors=$(image_mirrors)
  if [[ -z "$mirrors" ]]; then
    mirrors="deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main"
  fi
  key=$(printf '%s\n' "recipe $image_base_recipe" "$packages" "$mirrors" | sha256sum | cut -c1-16)
  name=localhost/kv-relay-base:$key
  if image_podman image exists "$name"; then
    echo "$name"
    return 0
  fi
  cache=$(image_cache_dir)
  mkdir -p "$cache"
  tarball=$cache/base-$key.tar
  # One builder at a time per cache; a second one waits and then finds the tarball.
  exec {lock}>"$cache/.lock"
  flock "$lock"
  if [[ ! -s "$tarball" ]]; then
    image_say "building the base root filesystem with mmdebstrap (once per package list; ~100 s) from:"
    local line
    while read -r line; do image_say "  $line"; done <<<"$mirrors"
    started=$SECONDS
    local mirror_args=()
    mapfile -t mirror_args <<<"$mirrors"
    if ! mmdebstrap --variant=minbase --include="$packages" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        bookworm "$tarball.partial.tar" "${mirror_args[@]}" >"$cache/mmdebstrap.log" 2>&1; then
      rm -f "$tarball.partial.tar"
      flock -u "$lock"
      image_say "mmdebstrap failed (log: $cache/mmdebstrap.log):"
      tail -n 5 "$cache/mmdebstrap.log" >&2
      return 1
    fi
    mv "$tarball.partial.tar" "$tarball"
    image_say "base root filesystem built in $((SECONDS - started)) s: $tarball ($(du -h "$tarball" | cut -f1))"
    # Tarballs of other package lists or mirrors are stale now.
    find "$cache" -maxdepth 1 -name 'base-*.tar' ! -name "base-$key.tar" -delete
  fi
  if ! image_podman image exists "$name"; then
    local output
    if ! output=$(image_podman import --message "kv-relay base: mmdebstrap minbase + deploy/docker/runtime-packages.txt" \
        "$tarball" "$name" 2>&1); then
      echo "$output" >&2
      flock -u "$lock"
      image_say "podman import $tarball failed"
      return 1
    fi
    # Earlier bases (another package list) are not needed any more.
    image_podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/kv-relay-base:' |
      grep -v -x "$name" | xargs -r podman rmi >/dev/null 2>&1 || true
  fi
  flock -u "$lock"
  echo "$name"
}

# image_build TAG [BIN_DIR]: podman build of deploy/docker/Dockerfile from BIN_DIR's binaries.
image_build() {
  local tag=$1 bin_dir=${2:-$image_repo/build/bin} base context pull=never revision previous binary
  for binary in kv-relay kvrelay-cli; do
    [[ -x "$bin_dir/$binary" ]] || { image_say "$bin_dir/$binary is missing (run make build)"; return 1; }
  done
  base=$(image_base) || return 1
  [[ -n "${KV_RELAY_BASE_IMAGE:-}" ]] && pull=missing
  context=$(mktemp -d "${TMPDIR:-/tmp}/kv-relay-image-context.XXXXXX")
  mkdir -p "$context/build/bin" "$context/deploy/docker"
  for binary in kv-relay kvrelay-cli; do
    strip --strip-debug -o "$context/build/bin/$binary" "$bin_dir/$binary" 2>/dev/null ||
      cp "$bin_dir/$binary" "$context/build/bin/$binary"
  done
  cp "$image_repo/deploy/docker/config.yaml" "$image_repo/deploy/docker/runtime-packages.txt" "$context/deploy/docker/"
  revision=$(git -C "$image_repo" describe --always --dirty 2>/dev/null || echo unknown)
  previous=$(image_podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  image_say "podman build -t $tag on $base"
  # shellcheck disable=SC2046
  if ! image_podman build --pull="$pull" $(image_ulimit_flags) -f "$image_repo/deploy/docker/Dockerfile" \
      --build-arg BINARIES=prebuilt --build-arg BUILDER_IMAGE="$base" --build-arg BASE_IMAGE="$base" \
      --label org.opencontainers.image.title=kv-relay \
      --label org.opencontainers.image.version="$(image_version)" \
      --label org.opencontainers.image.revision="$revision" \
      -t "$tag" "$context" >"$context.log" 2>&1; then
    cat "$context.log" >&2
    rm -rf "$context" "$context.log"
    image_say "podman build failed"
    return 1
  fi
  rm -rf "$context" "$context.log"
  # The image this tag named before (other binaries) is garbage now, unless a container uses it.
  if [[ -n "$previous" && "$previous" != "$(image_podman image inspect --format '{{.Id}}' "$tag")" ]]; then
    image_podman rmi "$previous" >/dev/null 2>&1 || true
  fi
  image_say "built $tag ($(image_size "$tag"))"
}

# Human-readable size of an image (what `podman images` shows).
image_size() {
  image_podman image inspect --format '{{.Size}}' "$1" | numfmt --to=si --suffix=B --format='%.1f'
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  tag=kv-relay:$(image_version)
  if [[ "${1:-}" == "--tag" ]]; then tag=$2; shift 2; fi
  bin_dir=${1:-$image_repo/build/bin}
  if ! reason=$(image_tools); then
    echo "image: cannot build the image: $reason" >&2
    exit 1
  fi
  image_build "$tag" "$bin_dir"
fi
