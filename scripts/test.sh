#!/usr/bin/env bash
# The test command: installs what is needed, builds CPU + CUDA, runs every test.
# GPU tests (ctest label gpu) skip cleanly when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 1200
