#!/usr/bin/env bash
# GPU check on a machine with the CUDA toolkit, cmake and ninja but none of the Debian
# libraries: builds only libfoldcore + tests + benchmarks (no HDF5, MPI, OpenBLAS, CLI11),
# runs the GPU tests (ctest -L gpu) and the CUDA benchmarks. googletest is built from source:
# GTEST_SRC (default /usr/src/googletest, else .cache/googletest — copy it there beforehand on a
# machine that has it: `mkdir -p .cache && cp -r /usr/src/googletest .cache/`).
set -euo pipefail
cd "$(dirname "$0")/.."
GTEST_SRC=${GTEST_SRC:-/usr/src/googletest}
[ -d "$GTEST_SRC" ] || GTEST_SRC=$PWD/.cache/googletest
BUILD_DIR=${BUILD_DIR:-build-gpu}
ARCHS=${ARCHS:-90a}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLDCORE_CUDA=ON -DFOLDCORE_APPS=OFF \
  -DFOLDCORE_HDF5=OFF -DFOLDCORE_BLAS=OFF -DFOLDCORE_DATA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DFOLDCORE_GTEST_SOURCE="$GTEST_SRC" -DCMAKE_CUDA_ARCHITECTURES="$ARCHS"
cmake --build "$BUILD_DIR" -j "$(nproc)"
nvidia-smi --query-gpu=name,memory.total --format=csv || true
(cd "$BUILD_DIR" && ctest -L gpu --output-on-failure) | tee "${OUT:-.}/gpu_tests.log"
for b in "$BUILD_DIR"/bench/bench_*; do
  [ -x "$b" ] || continue
  "$b" --device cuda --full | tee -a "${OUT:-.}/gpu_bench.jsonl"
done
