#!/usr/bin/env bash
# The test command: installs what is needed, builds CPU + CUDA, runs the parser fuzzers
# for FUZZ_SECONDS (default 60) per target, then every test. GPU tests (ctest label gpu) skip
# cleanly when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# Parser fuzzing (libFuzzer + sanitizers) for a bounded time per target; any finding fails.
scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
# The test suite last, so its summary closes the output.
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 1200
