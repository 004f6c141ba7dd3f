#!/usr/bin/env bash
# Mutation check of the emulated GPU suite (not part of CI): applies deliberate faults to CUDA
# kernels one at a time — an off-by-one tile bound, a dropped __syncthreads, a wrong shuffle
# offset — rebuilds the host-emulation build and runs the gpu-emu tests of the op. Every fault
# must make them fail; the script exits non-zero if one survives (or if the unmutated suite fails).
#   scripts/emu_mutation_check.sh            # work tree copy and build in build-mutation/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${EMU_MUTATION_DIR:-$ROOT/build-mutation}
JOBS=${JOBS:-$(nproc)}
SRC=$WORK/src
BUILD=$SRC/build-emu  # same layout as build-emu/ in the checkout, so the compiler cache hits

# A copy of the working tree (tracked and untracked, not ignored files), so the faults never
# touch the checkout.
mkdir -p "$SRC"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$SRC"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}  # compiler cache hits from build-emu/
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLDCORE_CUDA=EMULATE -DFOLDCORE_SANITIZE=address -DFOLDCORE_MPI=OFF \
  -DFOLDCORE_APPS=OFF -DFOLDCORE_BENCH=OFF >/dev/null

# name | file | sed expression | tests (ctest regex)
MUTATIONS=(
  "off-by-one tile bound (load_tile reads row rend)|kernels/cuda/attention_common.cuh|s/if (r0 + r < rend \&\& c < D)/if (r0 + r <= rend \&\& c < D)/|kernels_test_attention_cuda"
  "dropped __syncthreads after the K/V tile loads|kernels/cuda/attention_fwd_cuda.cu|/load_tile<kBlockN, Dp>(sv,/{n;s/__syncthreads();//}|kernels_test_attention_cuda"
  "dropped __syncthreads after the mma kernel's K/Vt tile loads|kernels/cuda/attention_fwd_mma_cuda.cu|/mma_load_tile<kMmaBlockN, Dp, true>(svt,/{n;s/__syncthreads();//}|kernels_test_attention_cuda"
  "P fragment with swapped columns in the mma kernels (C→A)|kernels/cuda/attention_mma.cuh|s/a.r\[1\] = pack_f32_bf16(c0.r\[2\], c0.r\[3\]);/a.r[1] = pack_f32_bf16(c0.r[3], c0.r[2]);/|kernels_test_attention_cuda"
  "dropped __syncthreads before reading the warp partials|kernels/cuda/softmax_row_reduce.cuh|/partial\[threadIdx.x >> 5\] = v;/{n;s/__syncthreads();//}|kernels_test_softmax_cuda"
  "wrong shuffle offset in the block sum (o + 1)|kernels/cuda/reduce_cuda.cu|0,/__shfl_down_sync(0xffffffffu, v, o)/s//__shfl_down_sync(0xffffffffu, v, o + 1)/|kernels_test_reduce_cuda"
)

run_tests() {  # $1: ctest regex; returns ctest's status
  (cd "$BUILD" && ctest -L gpu-emu -R "$1" -j "$JOBS" --timeout 900 >"$WORK/last_ctest.log" 2>&1)
}

echo "mutation check: baseline build"
cmake --build "$BUILD" -j "$JOBS" --target gpu_tests >/dev/null
all_tests=$(printf '%s\n' "${MUTATIONS[@]}" | cut -d'|' -f4 | sort -u | paste -sd'|')
if ! run_tests "$all_tests"; then
  echo "mutation check: the unmutated suite fails; see $WORK/last_ctest.log" >&2
  exit 1
fi

survivors=0
printf '%-60s %s\n' "fault" "result"
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r name file expr tests <<<"$m"
  cp "$SRC/$file" "$WORK/orig"
  sed -i "$expr" "$SRC/$file"
  if cmp -s "$SRC/$file" "$WORK/orig"; then
    echo "mutation check: '$name' did not apply to $file (the kernel changed?)" >&2
    exit 1
  fi
  result="caught"
  if ! cmake --build "$BUILD" -j "$JOBS" --target gpu_tests >"$WORK/last_build.log" 2>&1; then
    result="caught (build fails)"
  elif run_tests "$tests"; then
    result="SURVIVED"
    survivors=$((survivors + 1))
  else
    result="caught: $(grep -cE '^\s+[0-9]+ - .*\(Failed|Subprocess aborted|Exception\)' "$WORK/last_ctest.log" || true) failing tests"
  fi
  printf '%-60s %s\n' "$name" "$result"
  cp "$WORK/orig" "$SRC/$file"
done
cmake --build "$BUILD" -j "$JOBS" --target gpu_tests >/dev/null
if ((survivors)); then
  echo "mutation check: $survivors fault(s) survived" >&2
  exit 1
fi
echo "mutation check: every fault was caught"
