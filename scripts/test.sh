#!/usr/bin/env bash
# The test command: installs what is needed, builds CPU + CUDA, runs the parser fuzzers
# for FUZZ_SECONDS (default 30) per target, runs the GPU tests on the CUDA host emulation
# (build-emu/, label gpu-emu, with AddressSanitizer), then every test. GPU tests (ctest label gpu)
# skip cleanly when no device is present. The last line gives each phase's seconds (also when a
# phase fails); docs/testing.md ("Time") has them for a clean checkout on the 2-core CI machine,
# where CI allows 60 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

PHASES=""
phase_start=$SECONDS
phase_name=""
phase() {  # phase NAME: closes the running phase's timing and starts NAME's
  if [[ -n $phase_name ]]; then PHASES+=" $phase_name $((SECONDS - phase_start)) s,"; fi
  phase_name=$1
  phase_start=$SECONDS
}
report() {
  local rc=$?
  phase ""
  echo "test.sh phases:${PHASES%,}; total $SECONDS s (exit $rc)"
}
trap report EXIT

phase setup
scripts/setup.sh
phase build
scripts/build.sh
# Parser fuzzing (libFuzzer + sanitizers) for a bounded time per target; any finding fails.
phase fuzz
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
# The GPU tests executed on the CPU: CUDA sources compiled as C++ on the host emulation. The
# orchestration code at -O1 (FOLDCORE_LIGHT_HOST_OPT: the kernels keep -O3) and no RDKit (no GPU
# test checks structures): this build's compile time matters more than its speed.
phase emulation-build
EMU_DIR=${EMU_BUILD_DIR:-build-emu}
cmake -S . -B "$EMU_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLDCORE_CUDA=EMULATE -DFOLDCORE_SANITIZE=address -DFOLDCORE_MPI=AUTO \
  -DFOLDCORE_APPS=OFF -DFOLDCORE_BENCH=OFF -DFOLDCORE_LIGHT_HOST_OPT=ON -DFOLDCORE_RDKIT=OFF
cmake --build "$EMU_DIR" -j "${JOBS:-$(nproc)}" --target gpu_tests
phase emulation-tests
(cd "$EMU_DIR" && ctest -L gpu-emu --output-on-failure -j "$(nproc)" --timeout 1200)
# The test suite last, so its summary closes the output (then the phases' line).
phase tests
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 1200
