#!/usr/bin/env bash
# Installs the Debian packages that kv-relay's build, tests and benchmarks need.
# Idempotent: runs `apt-get update` and `apt-get install` only when something is missing.
# `install-deps.sh [--image|--fuzz] --missing` only prints what is missing (nothing: all there).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libcaf-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libspdlog-dev libfmt-dev
  prometheus-cpp-dev
  catch2
  libxxhash-dev
  libyaml-cpp-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libcpp-httplib-dev
  libbenchmark-dev nlohmann-json3-dev libabsl-dev
  libgoogle-perftools-dev
  clang-14 clang-format-14
  python3 python3-grpcio python3-protobuf python3-xxhash python3-zmq python3-msgpack python3-yaml yamllint
  curl unzip b3sum
)
# `install-deps.sh --image`: only the container tools of `make image` and `make image-test`
# (scripts/image-build.sh asks for them when it needs them, so `make build` never waits for them).
# The network stack is named, not left to apt: published ports need the CNI plugins and iptables.
IMAGE_PACKAGES=(mmdebstrap podman buildah runc containernetworking-plugins iptables)
# `install-deps.sh --fuzz`: only the clang of `make fuzz` (scripts/fuzz.sh), with libFuzzer.
FUZZ_PACKAGES=(clang-16 libclang-rt-16-dev)
only_list_missing=false
for arg in "$@"; do
  case "$arg" in
    --image) PACKAGES=("${IMAGE_PACKAGES[@]}") ;;
    --fuzz) PACKAGES=("${FUZZ_PACKAGES[@]}") ;;
    --missing) only_list_missing=true ;;
    *) echo "install-deps: unknown argument $arg (--image, --fuzz, --missing)" >&2; exit 2 ;;
  esac
done

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if $only_list_missing; then
  echo "${missing[*]}"
  exit 0
fi
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo > /dev/null; then
    echo "install-deps: not root and no sudo: install these as root: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=(sudo)
fi
# Through env: sudo resets the environment. The lock timeout waits out apt's daily run on a
# machine that has just booted.
APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
"${APT[@]}" update -qq
"${APT[@]}" install -y -qq --no-install-recommends "${missing[@]}"
