#!/usr/bin/env bash
# GPU check on a machine with an NVIDIA GPU, the CUDA toolkit, cmake and ninja, but maybe none of
# the Debian development libraries: runs every GPU test (tests/*/test_*_cuda.cpp, the ctest label
# gpu) and the CUDA benchmarks. Two ways to get the binaries:
#   scripts/gpu_check.sh [parts]                 builds them here in build-gpu (BUILD_DIR): CUDA for
#       ARCHS (default 90a), no HDF5, OpenBLAS, MPI, CLI11; the data pipeline and the models (and
#       their GPU tests) only when zlib's headers are found (FOLDCORE_DATA=AUTO). googletest from
#       GTEST_SRC (default /usr/src/googletest, else .cache/googletest: copy it there beforehand on
#       a machine that has it: `mkdir -p .cache && cp -r /usr/src/googletest .cache/`).
#   scripts/gpu_check.sh --prebuilt DIR|FILE [parts]  runs the binaries scripts/gpu_build_portable.sh
#       built on another machine: DIR = its build-gpu-portable/prebuilt, or FILE = its
#       build-gpu-portable/prebuilt.tar.xz (unpacked to build-gpu-prebuilt/). Nothing is compiled here.
#   --prebuilt-mpi DIR|FILE (with either): also the multi-rank tests of MPI=1
#       scripts/gpu_build_portable.sh (build-gpu-portable-mpi/prebuilt.tar.xz, linked to the
#       machine's Open MPI libmpi.so.40) under mpirun with 1 and 2 ranks, after the tests.
# parts: --tests (GPU tests), --sanitize (compute-sanitizer memcheck and racecheck over the op
# tests, tests/kernels_*_cuda), --bench (gemm, layernorm, copy, attention with --device cuda --full;
# evoformer with --device cuda; predict of the full-depth model at 256 and 1,000 residues, bf16,
# 3 recycles), --bert (scripts/bench_bert_gpu.sh with this bench_bert), --train (bench_train: one
# training step of the full model, bf16 with recomputation, crops 256 and 384), --long (the bf16
# long-sequence memory curve, bench_predict --memory, and its fit), --largest (one bf16 prediction
# at the largest N the GPU's free memory holds, 1 Evoformer block, up to 590 s), --profile (where the time goes:
# bench_predict and bench_train with FOLDCORE_PROFILE=1, one line per model stage, and
# bench_evoformer --profile, one line per Evoformer submodule, and bench_attention's phases of the
# fused attention op), --kernels (device time per kernel, FOLDCORE_PROFILE_KERNELS=1, of the crop-256
# training step and the N = 1,000 prediction), --ncu (Nsight Compute's counters of the attention
# kernels and of a sample of the training step's kernels, ncu_*.txt), --goal (the training goal's
# figures alone, for a short device lease: the crop-256 step, the average step of 8 drawn samples,
# bench_gemm's side-by-side lines that decide the GEMM defaults, one kernel-profiled step; about 5
# minutes on an H200 by the limits' sum;
# with 15 minutes of device time: CHECK_SECONDS=150 TEST_TIMEOUT=150 scripts/gpu_check.sh
# --prebuilt build-gpu-portable/prebuilt.tar.xz --jobs 8 --tests --goal);
# default --tests --sanitize --bench. Tests and the sanitizer run first, side by side (--jobs N test binaries at a time,
# default 4: they check numbers, not time), then the benchmarks one at a time, alone on the GPU.
# Every binary runs under a time limit (TEST_TIMEOUT, SAN_TIMEOUT seconds, default 600 and 240,
# cut so that tests and sanitizer together end within CHECK_SECONDS, default unlimited;
# each benchmark its own, scaled by BENCH_SCALE, default 1), so one hang cannot eat the rest; a
# limit reached counts as a failure and names the binary. A summary table (test counts, sanitizer
# findings, each benchmark's figure and its goal; the kernel and stage lists only in gpu_bench.jsonl)
# closes the output. The tests run from the repository root with FOLDCORE_SHARED_DIR (default: ./shared,
# else ../shared); one gtest XML per binary. Results go to ${OUT:-out}/: gpu_tests.log,
# gpu_tests/*.xml, gpu_bench.jsonl, gpu_bench.log (and bench_bert_gpu.jsonl with --bert).
# Exits 1 without building or running anything when no CUDA device is visible; non-zero when a
# test fails or is skipped for want of a device (on a GPU machine that means the device was not
# usable) or a benchmark fails. A test skipped for a part its build lacks (the portable build has no
# HDF5, so the loader's feature-store test) is listed at the end, not counted as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PREBUILT=""
PREBUILT_MPI=""
MPI_SUMMARY=()
PARTS=()
JOBS=4
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) PREBUILT=${2:?--prebuilt needs a directory}; shift 2 ;;
    --prebuilt-mpi) PREBUILT_MPI=${2:?--prebuilt-mpi needs an archive or directory}; shift 2 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    --tests|--sanitize|--bench|--bert|--train|--long|--largest|--profile|--kernels|--ncu|--goal) PARTS+=("${1#--}"); shift ;;
    *) echo "usage: $0 [--prebuilt DIR|FILE.tar.xz] [--prebuilt-mpi DIR|FILE.tar.xz] [--jobs N] [--tests] [--sanitize] [--bench] [--bert] [--train] [--long] [--largest] [--profile] [--kernels] [--ncu] [--goal]" >&2; exit 2 ;;
  esac
done
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
SAN_TIMEOUT=${SAN_TIMEOUT:-240}
BENCH_SCALE=${BENCH_SCALE:-1}
[ ${#PARTS[@]} -gt 0 ] || PARTS=(tests sanitize bench)
want() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
die() { echo "gpu_check: $1" >&2; exit "${2:-1}"; }
OUT_DIR=${OUT:-$ROOT/out}
mkdir -p "$OUT_DIR"

# 1. A CUDA device, or nothing to check.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  die "no CUDA device on this machine (nvidia-smi lists none): no GPU test or benchmark ran" 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
# NCCL for the single-process NCCL test (tests/dist/test_nccl_local_cuda.cpp): from the dynamic
# loader's paths, else the toolkit's folders or PyTorch's nvidia-nccl wheel.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  for d in /usr/local/cuda/lib /usr/local/cuda/lib64 \
    "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
    if [ -n "$d" ] && [ -f "$d/libnccl.so.2" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "gpu_check: libnccl.so.2 from $d"
      break
    fi
  done
fi

# MPI, for the multi-rank paths with CUDA tensors (issue: distributed layer): the portable build has
# none, so only say what this machine offers (a launcher, a libmpi, mpi4py's build) for a later
# build against it. Never fails.
{
  echo "gpu_check: MPI probe: mpirun=$(command -v mpirun || echo none) mpiexec=$(command -v mpiexec || echo none)"
  ldconfig -p 2>/dev/null | grep -E 'libmpi(ch)?\.so' | head -3 | sed 's/^/gpu_check: MPI probe: /' || true
  timeout 20 python3 -c 'import mpi4py, mpi4py.MPI as M; print("gpu_check: MPI probe: mpi4py", mpi4py.__version__, M.Get_library_version().splitlines()[0], mpi4py.get_config())' 2>&1 | head -2 || true
} || true

# 2. The binaries: prebuilt, or built here.
for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64 "${CUDA_HOME:-/usr/local/cuda}"/lib; do  # the toolkit's runtime, cuBLAS
  if [ -d "$d" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
if [ -n "$PREBUILT" ]; then
  if [ -f "$PREBUILT" ]; then  # the .tar.xz archive: unpack it next to the sources
    BIN_DIR=$ROOT/build-gpu-prebuilt
    rm -rf "$BIN_DIR" && mkdir -p "$BIN_DIR"
    if command -v xz >/dev/null 2>&1; then
      tar -xJf "$PREBUILT" -C "$BIN_DIR"
    else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$PREBUILT" "$BIN_DIR"
    fi
  else
    BIN_DIR=$(cd "$PREBUILT" && pwd)
  fi
  [ -d "$BIN_DIR/tests" ] && [ -d "$BIN_DIR/bench" ] || die "$PREBUILT has no tests/ and bench/ (made by scripts/gpu_build_portable.sh?)" 2
  [ -f "$BIN_DIR/MANIFEST" ] && cat "$BIN_DIR/MANIFEST"
  missing=$(for f in "$BIN_DIR"/tests/* "$BIN_DIR"/bench/*; do ldd "$f" | sed -n "s|^|$(basename "$f"): |; /not found/p"; done)
  [ -z "$missing" ] || die "shared libraries not found (set CUDA_HOME or LD_LIBRARY_PATH to the CUDA toolkit's lib64):
$missing" 2
else
  GTEST_SRC=${GTEST_SRC:-/usr/src/googletest}
  [ -d "$GTEST_SRC" ] || GTEST_SRC=$ROOT/.cache/googletest
  BUILD_DIR=${BUILD_DIR:-build-gpu}
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLDCORE_CUDA=ON -DFOLDCORE_APPS=OFF \
    -DFOLDCORE_HDF5=OFF -DFOLDCORE_BLAS=OFF -DFOLDCORE_DATA=AUTO -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
    -DFOLDCORE_GTEST_SOURCE="$GTEST_SRC" -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a}"
  cmake --build "$BUILD_DIR" -j "$(nproc)"
  grep -q 'FOLDCORE_HAVE_DATA' "$BUILD_DIR/build.ninja" ||
    echo "gpu_check: NOTE: no zlib headers here, so no data pipeline and no model tests/benchmarks;" \
         "scripts/gpu_build_portable.sh + --prebuilt covers them"
  BIN_DIR=$ROOT/$BUILD_DIR
fi

if [ -z "${FOLDCORE_SHARED_DIR:-}" ]; then
  for d in "$ROOT/shared" "$ROOT/../shared"; do
    [ -d "$d" ] && { FOLDCORE_SHARED_DIR=$(cd "$d" && pwd); break; }
  done
fi
export FOLDCORE_SHARED_DIR=${FOLDCORE_SHARED_DIR:-$ROOT/shared}
[ -d "$FOLDCORE_SHARED_DIR" ] || echo "gpu_check: WARNING: no shared data at $FOLDCORE_SHARED_DIR (FOLDCORE_SHARED_DIR): tests that need its fixtures will fail"
echo "gpu_check: binaries from $BIN_DIR, shared data from $FOLDCORE_SHARED_DIR, results in $OUT_DIR"
export OMP_WAIT_POLICY=passive
failed=()
skipped=()

# 3. GPU tests: every *_cuda test binary, run directly (no ctest files: those name the paths of
# the build machine), from the repository root (configs/ and examples/ relative to it), JOBS at a
# time. 3b. compute-sanitizer over the op tests at the same time: memcheck (out-of-bounds and
# misaligned device accesses, leaks) and racecheck (shared-memory hazards between threads of a
# block, which the host emulation cannot show). One filtered f32 pass per binary (plus the bf16
# mma attention cases; all its tests where none is named f32) keeps it within the time budget. Each binary leaves NAME.rc beside its log; failures are collected afterwards.
# limit: the binary's own limit, cut to what is left of CHECK_SECONDS (tests + sanitizer together)
limit_for() {
  local left=$((CHECK_DEADLINE - $(date +%s)))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
run_test() {  # $1 = binary; its log, gtest XML and exit status under $OUT_DIR/gpu_tests
  local name rc limit
  name=$(basename "$1")
  limit=$(limit_for "$TEST_TIMEOUT")
  [ "$limit" -ge 10 ] || { echo "not run: no time left" >"$OUT_DIR/gpu_tests/$name.log"; echo 124 >"$OUT_DIR/gpu_tests/$name.rc"; return 0; }
  timeout "$limit" "$1" --gtest_output="xml:$OUT_DIR/gpu_tests/$name.xml" >"$OUT_DIR/gpu_tests/$name.log" 2>&1
  rc=$?
  echo "$rc" >"$OUT_DIR/gpu_tests/$name.rc"
  echo "gpu_check: $name exit $rc ($(grep -E '^\[  (PASSED  \]|FAILED  \]|SKIPPED \] [0-9]+ test)' "$OUT_DIR/gpu_tests/$name.log" | tr '\n' ' '))"
}
run_sanitizer() {  # $1 = tool, $2 = binary
  local name rc limit
  name=$(basename "$2")
  limit=$(limit_for "$SAN_TIMEOUT")
  [ "$limit" -ge 10 ] || { echo "not run: no time left" >"$OUT_DIR/sanitizer/$name.$1.log"; echo 124 >"$OUT_DIR/sanitizer/$name.$1.rc"; return 0; }
  # the f32 cases where a binary names them, plus the register-tiled (mma) attention kernels, which
  # only run in bf16; else all of its tests (a filter that selects nothing leaves the sanitizer
  # without a single instrumented call: it fails, checking nothing)
  local filter='*F32*:*f32*:*Fp32*:*_mma:*_mma_dbiaspass'
  "$2" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -q '^  ' || filter='*'
  # BatchBeyondTheGridLimit launches 65,537 CTAs per kernel case: racecheck did not finish it in
  # 230 s on an H200 (every other attention case took seconds); BatchInSlices runs the same
  # slicing with 3-row slices under the sanitizer
  filter="$filter-*BatchBeyondTheGridLimit*"
  timeout "$limit" "$CS" --tool "$1" --error-exitcode 3 "$2" --gtest_filter="$filter" \
    >"$OUT_DIR/sanitizer/$name.$1.log" 2>&1
  rc=$?
  echo "$rc" >"$OUT_DIR/sanitizer/$name.$1.rc"
  echo "gpu_check: $1 $name exit $rc"
}
CHECK_DEADLINE=$(( $(date +%s) + ${CHECK_SECONDS:-100000} ))
export -f limit_for run_test run_sanitizer
export OUT_DIR TEST_TIMEOUT SAN_TIMEOUT CHECK_DEADLINE
SANITIZER_SUMMARY=()
pids=()
if want tests; then
  mkdir -p "$OUT_DIR/gpu_tests"
  tests=$(ls "$BIN_DIR"/tests/*_cuda 2>/dev/null || true)
  [ -n "$tests" ] || die "no GPU test binaries (*_cuda) in $BIN_DIR/tests" 2
  # the slowest (whole models) first, so the pool ends together
  (printf '%s\n' $tests | grep models_; printf '%s\n' $tests | grep -v models_) |
    xargs -P "$JOBS" -I{} bash -c 'run_test {}' &
  pids+=($!)
fi
if want sanitize; then
  CS=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  [ -x "$CS" ] || die "compute-sanitizer not found (CUDA toolkit's bin/)" 2
  export CS
  mkdir -p "$OUT_DIR/sanitizer"
  for tool in memcheck racecheck; do
    for t in "$BIN_DIR"/tests/kernels_*_cuda; do echo "$tool $t"; done
  done | xargs -P "${SAN_JOBS:-4}" -L 1 bash -c 'run_sanitizer "$0" "$1"' &
  pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p" || true; done

# 3c. Multi-rank tests with CUDA tensors (--prebuilt-mpi: the archive of MPI=1
# scripts/gpu_build_portable.sh, linked to the machine's libmpi.so.40): each under mpirun with 1 rank
# (NCCL, bootstrapped over MPI) and 2 ranks on this one GPU (NCCL refuses two ranks on one device:
# the MPI staged backend). Logs in $OUT_DIR/gpu_mpi_tests/. A skip counts as a failure here (the
# tests skip only without a usable CUDA device).
if [ -n "$PREBUILT_MPI" ]; then
  if [ -f "$PREBUILT_MPI" ]; then
    MPI_BIN=$ROOT/build-gpu-prebuilt-mpi
    rm -rf "$MPI_BIN" && mkdir -p "$MPI_BIN" && tar -xJf "$PREBUILT_MPI" -C "$MPI_BIN"
  else
    MPI_BIN=$(cd "$PREBUILT_MPI" && pwd)
  fi
  [ -f "$MPI_BIN/MANIFEST" ] && cat "$MPI_BIN/MANIFEST"
  mkdir -p "$OUT_DIR/gpu_mpi_tests"
  if ! command -v mpirun >/dev/null 2>&1; then
    failed+=("multi-rank tests: no mpirun on this machine")
  else
    for t in "$MPI_BIN"/tests/*_cuda_mpi; do
      [ -x "$t" ] || continue
      for np in 1 2; do
        name=$(basename "$t").np$np
        set +e
        timeout 300 mpirun --oversubscribe --allow-run-as-root -np "$np" env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
          OMP_NUM_THREADS=1 FOLDCORE_COMM_TIMEOUT_S=120 "$t" --gtest_color=no >"$OUT_DIR/gpu_mpi_tests/$name.log" 2>&1
        rc=$?
        result=$(grep -E '^\[  (PASSED  \]|FAILED  \]|SKIPPED \] [0-9]+ test)' "$OUT_DIR/gpu_mpi_tests/$name.log" | sort -u | tr '\n' ' ')
        set -e
        echo "gpu_check: $name exit $rc ($result)"
        MPI_SUMMARY+=("$name | exit $rc, $result")
        if [ "$rc" -ne 0 ]; then failed+=("$name (exit $rc)")
        elif grep -q 'no CUDA device' "$OUT_DIR/gpu_mpi_tests/$name.log"; then failed+=("$name (skipped: the CUDA device was not usable)")
        elif grep -q 'SKIPPED \]' "$OUT_DIR/gpu_mpi_tests/$name.log"; then  # e.g. a 2-rank test at -np 1: listed, not failed
          skipped+=("$name: $(grep -h -A1 ': Skipped$' "$OUT_DIR/gpu_mpi_tests/$name.log" | grep -v -e ': Skipped$' -e '^--$' | sort -u | tr '\n' ' ')"); fi
      done
    done
    # The collectives' bandwidth on CUDA tensors, nccl-tests' terms (algbw/busbw): 1 rank on NCCL
    # (send_recv left out: a rank sending to itself), 2 ranks on this one GPU through the MPI staged
    # backend. One JSON line per case in $OUT_DIR/gpu_comm.jsonl.
    if [ -x "$MPI_BIN/bench/bench_comm" ]; then
      for np in 1 2; do
        ops=all_reduce,reduce_scatter,all_gather,all_to_all,broadcast
        [ "$np" -gt 1 ] && ops=$ops,send_recv
        set +e
        timeout 90 mpirun --oversubscribe --allow-run-as-root -np "$np" env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
          OMP_NUM_THREADS=1 FOLDCORE_COMM_TIMEOUT_S=60 "$MPI_BIN/bench/bench_comm" --device cuda --quick \
          --max_bytes 256M --ops "$ops" >>"$OUT_DIR/gpu_comm.jsonl" 2>"$OUT_DIR/gpu_mpi_tests/bench_comm.np$np.log"
        rc=$?
        set -e
        cases=$(grep -c "\"ranks\":$np," "$OUT_DIR/gpu_comm.jsonl" || true)
        echo "gpu_check: bench_comm --device cuda at $np rank(s): exit $rc, $cases cases"
        MPI_SUMMARY+=("bench_comm.np$np | exit $rc, $cases cases (gpu_comm.jsonl)")
        [ "$rc" -eq 0 ] || failed+=("bench_comm.np$np (exit $rc)")
      done
      # DAP-2 training step of a 2-block Evoformer stack on CUDA tensors (the ranks share this GPU
      # through the MPI staged backend), communication overlapped vs in place: gpu_dap.jsonl.
      if [ -x "$MPI_BIN/bench/bench_dap" ]; then
        set +e
        timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
          OMP_NUM_THREADS=1 FOLDCORE_COMM_TIMEOUT_S=60 "$MPI_BIN/bench/bench_dap" --device cuda --n-res 256 \
          --n-seq 128 --blocks 2 --iters 5 >"$OUT_DIR/gpu_dap.jsonl" 2>"$OUT_DIR/gpu_mpi_tests/bench_dap.np2.log"
        rc=$?
        set -e
        echo "gpu_check: bench_dap --device cuda at 2 ranks: exit $rc"
        cat "$OUT_DIR/gpu_dap.jsonl" || true
        MPI_SUMMARY+=("bench_dap.np2 | exit $rc (gpu_dap.jsonl)")
        [ "$rc" -eq 0 ] || failed+=("bench_dap.np2 (exit $rc)")
      fi
      # the largest message of each collective, one line each
      python3 - "$OUT_DIR/gpu_comm.jsonl" <<'PY' || true
import json, sys
best = {}
for raw in open(sys.argv[1]):
    try:
        r = json.loads(raw)
    except ValueError:
        continue
    k = (r["ranks"], r["backend"], r["case"])
    if k not in best or r["size_bytes"] > best[k]["size_bytes"]:
        best[k] = r
for (n, backend, case), r in sorted(best.items()):
    print(f"gpu_check: comm {backend} ranks={n} {case} {r['size_bytes']} B: {r['time_us']:.1f} us, algbw {r['algbw_gbs']:.1f} GB/s, busbw {r['busbw_gbs']:.1f} GB/s")
PY
    fi
  fi
fi
if want tests; then
  : >"$OUT_DIR/gpu_tests.log"
  for t in $tests; do
    name=$(basename "$t")
    cat "$OUT_DIR/gpu_tests/$name.log" >>"$OUT_DIR/gpu_tests.log" 2>/dev/null || true
    rc=$(cat "$OUT_DIR/gpu_tests/$name.rc" 2>/dev/null || echo "none")
    if [ "$rc" != 0 ]; then
      [ "$rc" = 124 ] && failed+=("$name (time limit)") || failed+=("$name (exit $rc)")
    elif grep -q 'no CUDA device' "$OUT_DIR/gpu_tests/$name.log"; then
      failed+=("$name (skipped: the CUDA device was not usable)")
    elif grep -q '^\[  SKIPPED \]' "$OUT_DIR/gpu_tests/$name.log"; then
      # skipped for a missing part of this build (e.g. HDF5 in the portable build): listed, not failed
      skipped+=("$name: $(grep -A1 ': Skipped$' "$OUT_DIR/gpu_tests/$name.log" | sed -n 2p)")
    fi
  done
fi
if want sanitize; then
  for tool in memcheck racecheck; do
    errors=0 unfinished=0
    for t in "$BIN_DIR"/tests/kernels_*_cuda; do
      name=$(basename "$t")
      rc=$(cat "$OUT_DIR/sanitizer/$name.$tool.rc" 2>/dev/null || echo "none")
      if [ "$rc" = 124 ]; then
        unfinished=$((unfinished + 1))
        failed+=("$tool: $name (time limit, see sanitizer/$name.$tool.log)")
      elif [ "$rc" != 0 ]; then
        errors=$((errors + 1))
        failed+=("$tool: $name (exit $rc, see sanitizer/$name.$tool.log)")
      fi
    done
    SANITIZER_SUMMARY+=("$tool: $errors binaries with findings, $unfinished not finished in their time")
  done
fi

# 4. CUDA benchmarks, one JSON line per case, one at a time; $1 = time limit (seconds, times
# BENCH_SCALE), $2 = binary.
: >"$OUT_DIR/gpu_bench.jsonl"
: >"$OUT_DIR/gpu_bench.log"
run_bench() {
  local limit b rc
  limit=$(awk -v a="$1" -v s="$BENCH_SCALE" 'BEGIN { printf "%d", a * s }')
  b=$BIN_DIR/bench/$2
  shift 2
  [ -x "$b" ] || { echo "gpu_check: $(basename "$b") not built, skipped" | tee -a "$OUT_DIR/gpu_bench.log"; failed+=("$(basename "$b") (not built)"); return 0; }
  echo "gpu_check: $(basename "$b") $* (limit ${limit} s)" | tee -a "$OUT_DIR/gpu_bench.log"
  set +e
  timeout "$limit" "$b" "$@" 2>>"$OUT_DIR/gpu_bench.log" | tee -a "$OUT_DIR/gpu_bench.jsonl"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -eq 124 ]; then failed+=("$(basename "$b") $* (time limit of ${limit} s)")
  elif [ "$rc" -ne 0 ]; then failed+=("$(basename "$b") $* (exit $rc)"); fi
}
if want bench; then
  run_bench 30 bench_gemm --device cuda --full
  run_bench 45 bench_attention --device cuda --full
  # the full-depth model (48 Evoformer + 4 extra-MSA blocks), 3 recycles, 1024 MSA rows
  # (512 clusters + 512 extra), as AlphaFold2's published timings (A100: 100 residues 4.9 s, 1,000 96 s)
  run_bench 100 bench_predict --device cuda:0 --precision bf16 --lengths 256,1000 --evoformer_blocks 48 \
    --extra_msa_blocks 4 --msa_rows 1024 --recycles 3
fi

# 5b. Training step of the full model, bf16 with per-block recomputation (issue goals: crop 256
# <= 0.3 s per step on one H100; crop 384 fits in 40 GB).
if want train; then
  # bf16 with fp32 streams and with bf16 streams (Af2Config::bf16_training_streams, the presets' default)
  run_bench 150 bench_train --device cuda:0 --crops 256,384 --configs bf16:1,bf16_streams:1 --evoformer_blocks 48 \
    --extra_msa_blocks 4
  # the same step at crop 256 with the last 40 Evoformer blocks kept (recompute_keep_blocks; about
  # 62 GB, what an 80 GB H100 holds), with as many kept as this device holds (auto: the count and
  # the measured block in the line) and without recomputation: what the recomputed forwards cost
  # on the GPU, and the step's peak when the blocks' activations stay alive until the backward
  run_bench 120 bench_train --device cuda:0 --crops 256 --configs bf16:1:40,bf16:1:auto,bf16:0 --evoformer_blocks 48 \
    --extra_msa_blocks 4
  # the goal's step: the average training step (8 samples drawn as the trainer's: 1-4 recycling
  # iterations, 0-4 templates; the "af2_step_average" line), with every block recomputed and with
  # auto kept blocks
  run_bench 240 bench_train --device cuda:0 --crops 256 --configs bf16:1,bf16:1:auto --evoformer_blocks 48 \
    --extra_msa_blocks 4 --samples 8
  # the crop-256 step with the attention backward's per-score form (the line's attention_bwd_form),
  # against the row form of the first line
  FOLDCORE_ATTENTION_BWD_FORM=scores run_bench 60 bench_train --device cuda:0 --crops 256 --configs bf16:1 \
    --evoformer_blocks 48 --extra_msa_blocks 4
fi

# 5b'. The training goal's figures alone (a short lease): the crop-256 step (3 steps, the faster
# counts) with fp32 and with bf16 streams (bf16 and bf16_streams: the presets' default since
# 2026-12-01), the average step of the 8 samples the trainer would draw with bf16 streams, every
# block recomputed and as the presets run it (recompute_keep_blocks: auto, as many blocks kept as
# this device holds: the goal's configuration), the GEMM forms whose
# defaults were chosen without a GPU (bench_gemm's af2_* lines: speedup_vs_product_and_copy of the
# outer product mean, speedup_vs_per_pair and speedup_vs_separate_sums of the projections' input
# gradient with its bias column sums, in bf16 as the step writes it), the step's
# kernels with bf16 streams, and the step and the attention op with the attention backward composed
# of cuBLASLt products (opt-in) against the fused kernel (the default).
if want goal; then
  run_bench 90 bench_train --device cuda:0 --crops 256 --configs bf16:1,bf16_streams:1 --evoformer_blocks 48 \
    --extra_msa_blocks 4 --steps 3
  run_bench 240 bench_train --device cuda:0 --crops 256 --configs bf16_streams:1,bf16_streams:1:auto --evoformer_blocks 48 \
    --extra_msa_blocks 4 --samples 8
  run_bench 30 bench_gemm --device cuda --full
  # where the crop-256 step's device time goes now: its 40 largest kernels and kernel × module pairs
  # (the train_kernels lines; scripts/gemm_floor.py reads them with FOLDCORE_PROFILE_TOP=0)
  FOLDCORE_PROFILE_KERNELS=1 FOLDCORE_PROFILE=1 run_bench 60 bench_train --device cuda:0 --crops 256 \
    --configs bf16_streams:1 --evoformer_blocks 48 --extra_msa_blocks 4 --steps 1
  # the attention backward composed of cuBLASLt products (FOLDCORE_ATTENTION_BWD=composed; the
  # line's attention_bwd) against the fused kernel of the first line, in the step and alone
  # (bench_attention's mma fwd_bwd lines: composed_ms, fused_ms, speedup_composed_vs_fused)
  FOLDCORE_ATTENTION_BWD=composed run_bench 60 bench_train --device cuda:0 --crops 256 --configs bf16_streams:1 \
    --evoformer_blocks 48 --extra_msa_blocks 4 --steps 3
  run_bench 45 bench_attention --device cuda --full
fi

# 5c. Where the time goes: stage times of a full-depth prediction and of a training step, and the
# Evoformer block's submodules one by one.
if want profile; then
  FOLDCORE_PROFILE=1 run_bench 60 bench_train --device cuda:0 --crops 256 --configs bf16:1 --evoformer_blocks 48 \
    --extra_msa_blocks 4
  run_bench 30 bench_evoformer --device cuda --n-res 256 --profile
  # the attention op's phases (forward; backward: pre, main, dbias pass, dq conversion) per kernel family
  FOLDCORE_PROFILE=1 run_bench 45 bench_attention --device cuda --full
  FOLDCORE_PROFILE=1 run_bench 120 bench_predict --device cuda:0 --precision bf16 --lengths 256,1000 \
    --evoformer_blocks 48 --extra_msa_blocks 4 --msa_rows 1024 --recycles 3
fi

# 5c'. Device time kernel by kernel (FOLDCORE_PROFILE_KERNELS=1, src/core/kernel_profile.h): the
# crop-256 training step and the N = 1,000 prediction, each kernel's calls and seconds and the
# device's idle time inside the run (the "train_kernels" / "predict_kernels" lines).
if want kernels; then
  FOLDCORE_PROFILE_KERNELS=1 run_bench 60 bench_train --device cuda:0 --crops 256 --configs bf16:1 \
    --evoformer_blocks 48 --extra_msa_blocks 4
  FOLDCORE_PROFILE_KERNELS=1 run_bench 100 bench_predict --device cuda:0 --precision bf16 --lengths 1000 \
    --evoformer_blocks 48 --extra_msa_blocks 4 --msa_rows 1024 --recycles 3
fi

# 5c''. Hardware counters (Nsight Compute, where the machine's runtime lets ncu read them; not on
# every one): per kernel its duration, memory and SM throughput against the device's peaks,
# occupancy, issue slots and the warps' stall reasons. The attention backward's main kernel and
# its pre/dq passes at the MSA-row shape (bench_attention --full's first case; the backward takes
# 5.8x its forward where FlashAttention-2's takes about 2.5x: which stall), the forward, and a
# sample of a crop-256 training step's kernels: 60 of its elementwise, LayerNorm, copy and
# reduction kernels and 24 of its GEMMs (past the warm-up step's; bench_train --steps 1), whether
# they reach the bandwidth their bytes need. Text reports in ncu_<name>.txt; an ncu that cannot
# read the counters is noted, not counted as a failure.
run_ncu() {  # limit name kernel-regex launch-skip launch-count bench [args...]
  local limit name=$2 regex=$3 skip=$4 count=$5 b=$BIN_DIR/bench/$6 rc
  limit=$(awk -v a="$1" -v s="$BENCH_SCALE" 'BEGIN { printf "%d", a * s }')
  shift 6
  if ! command -v ncu > /dev/null; then
    echo "gpu_check: ncu not on PATH, ncu_$name skipped" | tee -a "$OUT_DIR/gpu_bench.log"
    return 0
  fi
  [ -x "$b" ] || { failed+=("$(basename "$b") (not built)"); return 0; }
  echo "gpu_check: ncu ($name) $(basename "$b") $* (limit ${limit} s)" | tee -a "$OUT_DIR/gpu_bench.log"
  set +e
  timeout "$limit" ncu --clock-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis "$b" "$@" > "$OUT_DIR/ncu_$name.txt" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 124 ]; then failed+=("ncu ($name) (time limit of ${limit} s)")
  elif ! grep -q "Duration" "$OUT_DIR/ncu_$name.txt"; then
    echo "gpu_check: ncu ($name) read no counters (exit $rc): $(grep -m1 -i 'error' "$OUT_DIR/ncu_$name.txt")" |
      tee -a "$OUT_DIR/gpu_bench.log"
  fi
}
if want ncu; then
  run_ncu 240 attention_bwd 'attention_bwd_mma_kernel|attention_bwd_pre|dq_convert' 0 6 bench_attention --device cuda --full
  run_ncu 120 attention_fwd 'attention_fwd_mma_kernel' 0 2 bench_attention --device cuda --full --forward
  # about 8,300 launches of these kernels per step at 48 + 4 blocks (the emulation's launch list):
  # the warm-up step's, then 2,000 into the crop-256 step (its Evoformer forward)
  run_ncu 300 train_kernels \
    'ln_forward|ln_backward|ln_param|bias_dropout_residual|dropout_backward|masked_gate|run_copy|transpose_copy|strided_copy|contiguous_convert|strided_binary|col_sum' \
    10300 60 bench_train --device cuda:0 --crops 256 --configs bf16:1 --evoformer_blocks 48 --extra_msa_blocks 4 --steps 1
  run_ncu 300 train_gemms 'gemm|nvjet|xmma|cutlass' 3000 24 bench_train --device cuda:0 --crops 256 --configs bf16:1 \
    --evoformer_blocks 48 --extra_msa_blocks 4 --steps 1
fi

# 5d. Long sequences: the bf16 memory curve from the CUDA allocator and its fit (n_max_80gb), with
# each length's stage times (N = 2,048 takes about 40 s on an H200 at 1 + 1 blocks).
if want long; then
  FOLDCORE_PROFILE=1 run_bench 90 bench_predict --memory --device cuda:0 --precision bf16 --lengths 1024,1536,2048
fi

# 5d'. The largest prediction this GPU holds (issue goal: a bf16 prediction at the largest N that fits
# the device, within 10 minutes, at reduced depth): one Evoformer block, no templates, no extra-MSA
# stack, summary result arrays (the pair-sized heads streamed), N from the GPU's memory: the trunk
# measured 1.02 fp32 pairs at N = 10,000 on an H200, so N = sqrt(0.93·free / (1.10·c_z·4)) rounded
# down to a multiple of 256 (LARGEST_N overrides); about 15,600 on an H200 (141 GB), 11,500 on an
# H100 (80 GB).
if want largest; then
  free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1 | tr -d ' ')
  n_largest=${LARGEST_N:-$(awk -v m="$free_mib" 'BEGIN { n = sqrt(0.93 * m * 1048576 / (1.10 * 512)); printf "%d", int(n / 256) * 256 }')}
  echo "gpu_check: largest: ${free_mib} MiB free -> N = ${n_largest}" | tee -a "$OUT_DIR/gpu_bench.log"
  FOLDCORE_PROFILE=1 run_bench 590 bench_predict --memory --device cuda:0 --precision bf16 --lengths "$n_largest" \
    --templates 0 --extra_msa_blocks 0 --evoformer_blocks 1 --result_arrays summary
fi

# 5e. BERT-Large vs PyTorch.
if want bert; then
  BENCH_BERT=$BIN_DIR/bench/bench_bert OUT=$OUT_DIR timeout "$(awk -v s="$BENCH_SCALE" 'BEGIN { printf "%d", 120 * s }')" \
    "$ROOT/scripts/bench_bert_gpu.sh" || failed+=("bench_bert_gpu.sh (exit $?)")
fi

# 5f. The remaining op benchmarks.
if want bench; then
  run_bench 40 bench_layernorm --device cuda --full
  # layout copies at crop 256: runs by vectors vs element by element, side by side
  run_bench 30 bench_copy --device cuda --full
  run_bench 40 bench_evoformer --device cuda
fi

# 6. Summary table: test counts from the gtest XML, sanitizer findings, benchmark figures with
# the goals of docs/benchmarks.md.
echo
echo "| part | result |"
echo "| --- | --- |"
if want tests; then
  # per binary from its gtest XML (a binary that crashed or hit its limit wrote none: its exit status)
  python3 - "$OUT_DIR/gpu_tests" $tests <<'PY' || true
import os, re, sys
d, bins = sys.argv[1], [os.path.basename(b) for b in sys.argv[2:]]
tot = {"tests": 0, "failures": 0, "skipped": 0}
for b in bins:
    rc = open(os.path.join(d, b + ".rc")).read().strip() if os.path.exists(os.path.join(d, b + ".rc")) else "none"
    x = os.path.join(d, b + ".xml")
    head = re.search(r"<testsuites ([^>]*)>", open(x).read()) if os.path.exists(x) else None
    if head:
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', head.group(1)))
        n = {k: int(attrs.get(k, 0)) for k in ("tests", "failures")}
        n["skipped"] = open(x).read().count('result="skipped"')
        for k in tot:
            tot[k] += n[k]
        print(f"| {b} | {n['tests']} run, {n['failures']} failed, {n['skipped']} skipped, exit {rc} |")
    else:
        print(f"| {b} | no result (exit {rc}{': time limit' if rc == '124' else ''}) |")
print(f"| gpu tests | {tot['tests']} run, {tot['failures']} failed, {tot['skipped']} skipped |")
PY
fi
for line in "${SANITIZER_SUMMARY[@]}"; do echo "| compute-sanitizer | $line |"; done
for line in "${MPI_SUMMARY[@]+"${MPI_SUMMARY[@]}"}"; do echo "| $line |"; done
if [ -s "$OUT_DIR/gpu_bench.jsonl" ]; then
  # Goals: attention fwd+bwd >= 2x eager, AF2 prediction of 1,000 residues <= 10 s.
  python3 - "$OUT_DIR/gpu_bench.jsonl" <<'PY' || true
import json, sys
goals = {"attention": "fwd+bwd >= 2x eager", "predict_memory": "N >= 10,000 on 80 GB", "predict": "1,000 residues <= 10 s",
         "bert": ">= 60% MFU", "train": "crop 256 <= 0.3 s/step, crop 384 in 40 GB"}
for raw in open(sys.argv[1]):
    try:
        r = json.loads(raw)
    except ValueError:
        continue
    name = r.get("bench", r.get("name", "?"))
    if str(name).endswith("_kernels") or str(name).endswith("_profile"):
        continue  # the kernel and stage lists (FOLDCORE_PROFILE_KERNELS=1, FOLDCORE_PROFILE=1) stay in gpu_bench.jsonl
    figs = [f"{k}={r[k]}" for k in ("case", "kernel", "attention_kernel", "stage", "size", "shape", "n_res", "crop", "ms", "seconds", "step_seconds", "tflops", "gflops", "fraction_of_peak", "fraction_of_gemm_peak", "ratio", "speedup", "speedup_vs_smem", "dbias_share", "speedup_vs_atomic", "peak_mb", "peak_alloc_mib", "step_peak_mib", "n_max_80gb") if k in r]
    goal = goals.get(str(name), "")
    print(f"| {name} | {', '.join(figs)} {('(goal: ' + goal + ')') if goal else ''} |")
PY
fi

for line in "${skipped[@]}"; do echo "gpu_check: skipped (not a failure): $line"; done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'gpu_check: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu_check: all selected parts passed (${PARTS[*]})"
