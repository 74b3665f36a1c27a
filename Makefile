# kv-relay: `make run` and `make test` do all the set-up on a fresh Debian 12 machine.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD_TYPE ?= RelWithDebInfo
CCACHE := $(shell command -v ccache 2>/dev/null)
CMAKE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
  $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE))
CTEST_FLAGS := --output-on-failure --timeout 600 -j $(JOBS)

.PHONY: deps build build-asan test test-normal test-asan bench soak run image-check deploy-check clean

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B build $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j $(JOBS)

build-asan: deps
	@cmake -S . -B build-asan $(CMAKE_FLAGS) -DKVRELAY_SANITIZE=ON -DKVRELAY_BENCHMARKS=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)

test-normal: build
	@cd build && ctest $(CTEST_FLAGS)
	@bash scripts/image-check.sh build/bin
	@bash scripts/deploy-check.sh build/bin/kv-relay

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS)

# The whole suite twice: the normal build, then AddressSanitizer + UBSan.
test: test-normal test-asan

# Starts the relay on its built-in demo deployment (Ctrl-C stops it).
RUN_FLAGS ?=
run: build
	@build/bin/kv-relay --demo --topology deploy/demo/topology.yaml $(RUN_FLAGS)

bench: build
	@bash scripts/run-benchmarks.sh build/bin

# The container's runtime package list must match ldd of the built binaries.
image-check: build
	@bash scripts/image-check.sh build/bin

# Ten minutes of churn against one relay (SOAK_SECONDS to change); prints a summary table.
SOAK_SECONDS ?= 600
soak: build
	@build/bin/soak $(SOAK_SECONDS)

# The Helm chart: lint, render, yamllint, and every flag it passes known to kv-relay.
deploy-check: build
	@bash scripts/deploy-check.sh build/bin/kv-relay

clean:
	rm -rf build build-asan
