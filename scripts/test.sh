#!/usr/bin/env bash
# The test command: installs what is needed, builds CPU + CUDA, runs the parser fuzzers
# for FUZZ_SECONDS (default 60) per target, runs the GPU tests on the CUDA host emulation
# (build-emu/, label gpu-emu, with AddressSanitizer), then every test. GPU tests (ctest label gpu)
# skip cleanly when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# Parser fuzzing (libFuzzer + sanitizers) for a bounded time per target; any finding fails.
scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
# The GPU tests executed on the CPU: CUDA sources compiled as C++ on the host emulation.
EMU_DIR=${EMU_BUILD_DIR:-build-emu}
cmake -S . -B "$EMU_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLDCORE_CUDA=EMULATE -DFOLDCORE_SANITIZE=address -DFOLDCORE_MPI=AUTO \
  -DFOLDCORE_APPS=OFF -DFOLDCORE_BENCH=OFF
cmake --build "$EMU_DIR" -j "${JOBS:-$(nproc)}" --target gpu_tests
(cd "$EMU_DIR" && ctest -L gpu-emu --output-on-failure -j "$(nproc)" --timeout 1200)
# The test suite last, so its summary closes the output.
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 1200
