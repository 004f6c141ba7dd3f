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
# parts: --tests (GPU tests), --sanitize (compute-sanitizer memcheck and racecheck over the op
# tests, tests/kernels_*_cuda), --bench (gemm, layernorm, attention with --device cuda --full;
# evoformer with --device cuda; predict at 1,000 residues), --bert (scripts/bench_bert_gpu.sh with
# this bench_bert); default --tests --sanitize --bench, about 10 minutes on an H100. A summary
# table (test counts, sanitizer findings, each benchmark's figure and its goal) closes the output. The tests run from the repository root with FOLDCORE_SHARED_DIR (default: ./shared,
# else ../shared); one gtest XML per binary. Results go to ${OUT:-out}/: gpu_tests.log,
# gpu_tests/*.xml, gpu_bench.jsonl, gpu_bench.log (and bench_bert_gpu.jsonl with --bert).
# Exits 1 without building or running anything when no CUDA device is visible; non-zero when a
# test fails or is skipped (a skip on a GPU machine means the device was not usable) or a
# benchmark fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PREBUILT=""
PARTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) PREBUILT=${2:?--prebuilt needs a directory}; shift 2 ;;
    --tests|--sanitize|--bench|--bert) PARTS+=("${1#--}"); shift ;;
    *) echo "usage: $0 [--prebuilt DIR|FILE.tar.xz] [--tests] [--sanitize] [--bench] [--bert]" >&2; exit 2 ;;
  esac
done
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

# 3. GPU tests: every *_cuda test binary, run directly (no ctest files: those name the paths of
# the build machine), from the repository root (configs/ and examples/ relative to it).
if want tests; then
  LOG=$OUT_DIR/gpu_tests.log
  : >"$LOG"
  mkdir -p "$OUT_DIR/gpu_tests"
  tests=$(ls "$BIN_DIR"/tests/*_cuda 2>/dev/null || true)
  [ -n "$tests" ] || die "no GPU test binaries (*_cuda) in $BIN_DIR/tests" 2
  for t in $tests; do
    name=$(basename "$t")
    echo "gpu_check: $name" | tee -a "$LOG"
    set +e
    timeout 900 "$t" --gtest_output="xml:$OUT_DIR/gpu_tests/$name.xml" >"$OUT_DIR/gpu_tests/$name.log" 2>&1
    rc=$?
    set -e
    tee -a "$LOG" <"$OUT_DIR/gpu_tests/$name.log" | grep -E '^\[  (PASSED  \]|FAILED  \]|SKIPPED \] [0-9]+ test)' || true
    if [ $rc -ne 0 ]; then
      failed+=("$name (exit $rc)")
    elif grep -q '^\[  SKIPPED \]' "$OUT_DIR/gpu_tests/$name.log"; then
      failed+=("$name (skipped: the CUDA device was not usable)")
    fi
  done
fi

# 3b. compute-sanitizer over the op tests: memcheck (out-of-bounds and misaligned device accesses,
# leaks) and racecheck (shared-memory hazards between threads of a block, which the host emulation
# cannot show). One filtered f32 pass per binary keeps it within the time budget.
SANITIZER_SUMMARY=()
if want sanitize; then
  CS=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  [ -x "$CS" ] || die "compute-sanitizer not found (CUDA toolkit's bin/)" 2
  mkdir -p "$OUT_DIR/sanitizer"
  for tool in memcheck racecheck; do
    errors=0
    for t in "$BIN_DIR"/tests/kernels_*_cuda; do
      name=$(basename "$t")
      set +e
      timeout 240 "$CS" --tool "$tool" --error-exitcode 3 "$t" --gtest_filter='*F32*:*f32*:*Fp32*' \
        >"$OUT_DIR/sanitizer/$name.$tool.log" 2>&1
      rc=$?
      set -e
      if [ $rc -ne 0 ]; then
        errors=$((errors + 1))
        failed+=("$tool: $name (exit $rc, see sanitizer/$name.$tool.log)")
      fi
    done
    SANITIZER_SUMMARY+=("$tool: $errors binaries with findings")
  done
fi

# 4. CUDA benchmarks, one JSON line per case.
if want bench; then
  : >"$OUT_DIR/gpu_bench.jsonl"
  : >"$OUT_DIR/gpu_bench.log"
  run_bench() {
    local b=$BIN_DIR/bench/$1
    shift
    [ -x "$b" ] || { echo "gpu_check: $(basename "$b") not built, skipped" | tee -a "$OUT_DIR/gpu_bench.log"; return 0; }
    echo "gpu_check: $(basename "$b") $*" | tee -a "$OUT_DIR/gpu_bench.log"
    set +e
    "$b" "$@" 2>>"$OUT_DIR/gpu_bench.log" | tee -a "$OUT_DIR/gpu_bench.jsonl"
    local rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -eq 0 ] || failed+=("$(basename "$b") (exit $rc)")
  }
  run_bench bench_gemm --device cuda --full
  run_bench bench_layernorm --device cuda --full
  run_bench bench_attention --device cuda --full
  run_bench bench_evoformer --device cuda
  run_bench bench_predict --device cuda:0 --precision bf16 --lengths 1000
fi

# 5. BERT-Large vs PyTorch.
if want bert; then
  BENCH_BERT=$BIN_DIR/bench/bench_bert OUT=$OUT_DIR "$ROOT/scripts/bench_bert_gpu.sh" || failed+=("bench_bert_gpu.sh (exit $?)")
fi

# 6. Summary table: test counts from the gtest XML, sanitizer findings, benchmark figures with
# the goals of docs/benchmarks.md.
echo
echo "| part | result |"
echo "| --- | --- |"
if want tests; then
  t_total=0 t_fail=0 t_skip=0
  for x in "$OUT_DIR"/gpu_tests/*.xml; do
    [ -f "$x" ] || continue
    t_total=$((t_total + $(grep -o '<testsuites tests="[0-9]*"' "$x" | grep -o '[0-9]*' || echo 0)))
    t_fail=$((t_fail + $(grep -o '<testsuites tests="[0-9]*" failures="[0-9]*"' "$x" | grep -o '[0-9]*$' || echo 0)))
    t_skip=$((t_skip + $(grep -c 'result="skipped"' "$x" || true)))
  done
  echo "| gpu tests | $t_total run, $t_fail failed, $t_skip skipped |"
fi
for line in "${SANITIZER_SUMMARY[@]}"; do echo "| compute-sanitizer | $line |"; done
if want bench && [ -s "$OUT_DIR/gpu_bench.jsonl" ]; then
  # Goals: attention fwd+bwd >= 2x eager, AF2 prediction of 1,000 residues <= 10 s.
  python3 - "$OUT_DIR/gpu_bench.jsonl" <<'PY' || true
import json, sys
goals = {"attention": "fwd+bwd >= 2x eager", "predict": "1,000 residues <= 10 s", "bert": ">= 60% MFU"}
for raw in open(sys.argv[1]):
    try:
        r = json.loads(raw)
    except ValueError:
        continue
    name = r.get("bench", r.get("name", "?"))
    figs = [f"{k}={r[k]}" for k in ("case", "shape", "n_res", "ms", "seconds", "tflops", "fraction_of_peak", "ratio", "speedup", "peak_mb") if k in r]
    goal = next((g for k, g in goals.items() if k in str(name)), "")
    print(f"| {name} | {', '.join(figs)} {('(goal: ' + goal + ')') if goal else ''} |")
PY
fi

if [ ${#failed[@]} -gt 0 ]; then
  printf 'gpu_check: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu_check: all selected parts passed (${PARTS[*]})"
