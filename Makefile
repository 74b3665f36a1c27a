# kv-relay: `make run` and `make test` do all the set-up on a fresh Debian 12 machine.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
# Configures a build tree once, after `deps` has installed ccache, so the compiler launcher
# never changes between invocations (a changed launcher would rebuild every object). Later
# CMakeLists changes are picked up by `cmake --build` itself.
configure = [[ -f $(1)/build.ninja ]] || cmake -S . -B $(1) $(CMAKE_FLAGS) \
  $$(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) $(2) >/dev/null
CTEST_FLAGS := --output-on-failure --timeout 600 -j $(JOBS)
# ccache keys on paths relative to the checkout, and not on the build directory (which -g
# would otherwise add), so a clone in another folder (CI) reuses the objects an earlier build
# compiled.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: deps build build-asan test test-normal test-asan bench soak run image-check deploy-check rebuild-check format clean

deps:
	@bash scripts/install-deps.sh

build: deps
	@$(call configure,build)
	@cmake --build build -j $(JOBS)

build-asan: deps
	@$(call configure,build-asan,-DKVRELAY_SANITIZE=ON -DKVRELAY_BENCHMARKS=OFF)
	@cmake --build build-asan -j $(JOBS)

test-normal: build
	@bash scripts/rebuild-check.sh
	@cd build && ctest $(CTEST_FLAGS)
	@bash scripts/image-check.sh build/bin
	@bash scripts/deploy-check.sh build/bin/kv-relay
	@bash scripts/image-test.sh build/bin

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS)

# The whole suite twice: the normal build, then AddressSanitizer + UBSan.
test: test-normal test-asan

# Starts the relay on its built-in demo deployment (Ctrl-C stops it). Ingest calls need the
# demo's bearer token, deploy/demo/ingest-token, as a deployment's would need its own.
RUN_FLAGS ?=
run: deps
	@$(call configure,build)
	@cmake --build build -j $(JOBS) --target kv-relay kvrelay-cli
	@build/bin/kv-relay --demo --topology deploy/demo/topology.yaml --ingest-token-file deploy/demo/ingest-token $(RUN_FLAGS)

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

# The container image kv-relay:<version> (podman, from build/bin on a mmdebstrap base: no
# registry needed), and that image run for real: the demo, an engine, the chart's command lines.
.PHONY: image image-test
image: build
	@bash scripts/image-build.sh build/bin

image-test: build
	@bash scripts/image-test.sh build/bin

# libFuzzer: every harness of tests/fuzz/ for FUZZ_SECONDS each, from a clang build in build-fuzz/
# (crashes in build-fuzz/crashes/<harness>/); fails if any harness found one.
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh

# A second `make build` compiles nothing (also run by `make test`).
rebuild-check: build
	@bash scripts/rebuild-check.sh

clean:
	rm -rf build build-asan

# Applies .clang-format to every C++ source (the suite's format check fails on drift).
format:
	@git ls-files '*.cpp' '*.hpp' '*.h' | grep -v '^proto/' | xargs clang-format-14 -i
