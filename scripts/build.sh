#!/usr/bin/env bash
# Configures and builds into ${BUILD_DIR:-build} (Release, CPU + CUDA when nvcc is present).
# Extra arguments go to cmake, e.g. scripts/build.sh -DFOLDCORE_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
