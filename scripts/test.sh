#!/usr/bin/env bash
# The test command: installs what is needed, builds CPU + CUDA, runs every test.
# GPU tests (ctest label gpu) skip cleanly when no device is present. Then the parser fuzzers run
# for FUZZ_SECONDS (default 60) per target.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "$(nproc)" --timeout 1200)
# Parser fuzzing (libFuzzer + sanitizers) for a bounded time per target; any finding fails.
scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
