#!/usr/bin/env bash
# BERT-Large pre-training on a GPU, FoldCore vs PyTorch in the same run (docs/benchmarks.md, BERT):
#   1. bench_bert --device cuda:0 --config large --precision bf16 --packing both: seq 512, batch 56,
#      unpacked and packed, on Wikipedia-like synthetic data (HDF5 shards when the build has HDF5,
#      else the same rows from memory), writing the training rows' lengths for step 2;
#   2. if torch and transformers import: bench/bert_pytorch_reference.py with the same batch, sequence
#      length, masked positions and the same sequence lengths (when h5py imports: they go to it as
#      the input_mask of an MLPerf-layout file);
#   3. prints FoldCore ÷ PyTorch sequences/s (goal ≥ 1.3) and FoldCore's MFU (goal ≥ 0.60) against the
#      bf16 GEMM measured in the run and against the datasheet dense bf16 peak.
# Exits non-zero, measuring nothing, when there is no CUDA device or no CUDA build of bench_bert.
#   scripts/bench_bert_gpu.sh            (STEPS=20, BATCH=56; PEAK_TFLOPS overrides the datasheet peak;
#                                         results also in ${OUT:-out}/bench_bert_gpu.jsonl)
# BENCH_BERT=path/to/bench_bert picks the binary; default: the first of build/bench/bench_bert,
# build-gpu-prebuilt/bench/bench_bert (gpu_check.sh --prebuilt ARCHIVE unpacks there),
# build-gpu-portable/prebuilt/bench/bench_bert (scripts/gpu_build_portable.sh) and
# build-gpu/bench/bench_bert (scripts/gpu_check.sh) that is a CUDA build and whose libraries all
# load here.
# It needs CUDA and the data pipeline (zlib), not HDF5.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64 "${CUDA_HOME:-/usr/local/cuda}"/lib; do  # the toolkit's runtime, cuBLAS
  if [ -d "$d" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
BIN=${BENCH_BERT:-}
if [ -z "$BIN" ]; then
  for b in build/bench/bench_bert build-gpu-prebuilt/bench/bench_bert build-gpu-portable/prebuilt/bench/bench_bert \
           build-gpu/bench/bench_bert; do
    # a CUDA build (links the CUDA runtime) whose libraries all resolve here
    if [ -x "$b" ] && ldd "$b" | grep -q libcudart && ! ldd "$b" | grep -q 'not found'; then BIN=$b; break; fi
  done
  BIN=${BIN:-build/bench/bench_bert}
fi
STEPS=${STEPS:-20}
BATCH=${BATCH:-56}
OUT_DIR=${OUT:-out}
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/bench_bert_gpu.jsonl"
: >"$RESULTS"

die() { echo "bench_bert_gpu: $1" >&2; exit "${2:-1}"; }

# 1. A CUDA device, or nothing to measure.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  die "no CUDA device on this machine (nvidia-smi lists none): the BERT-Large GPU benchmark and the PyTorch comparison did not run" 1
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "bench_bert_gpu: GPU 0: $GPU_NAME"
[ -x "$BIN" ] || die "$BIN not found: build it with CUDA (cmake -S . -B build -G Ninja && ninja -C build bench_bert), or run scripts/gpu_build_portable.sh on a machine with the CUDA toolkit and copy build-gpu-portable/prebuilt here" 2

# Datasheet dense bf16 peak (TFLOP/s, no sparsity) for the second MFU.
PEAK=${PEAK_TFLOPS:-}
if [ -z "$PEAK" ]; then
  case "$GPU_NAME" in
    *H100*PCIe*) PEAK=756 ;;
    *H100*|*H200*) PEAK=989.4 ;;  # SXM-class parts (GH200 included)
    *A100*) PEAK=312 ;;
    *) PEAK=0 ;;
  esac
fi

# 2. FoldCore, unpacked and packed, keeping the training rows' lengths for PyTorch.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "bench_bert_gpu: $BIN --device cuda:0 --config large --precision bf16 --packing both --steps $STEPS --batch_size $BATCH"
"$BIN" --device cuda:0 --config large --precision bf16 --packing both --steps "$STEPS" --batch_size "$BATCH" \
  --lengths_out "$WORK/lengths.txt" | tee -a "$RESULTS"
grep -q '"mode": "unpacked"' "$RESULTS" || die "bench_bert printed no result (built without the data pipeline or CUDA?)" 2

# 3. PyTorch, when it is installed.
HAVE_TORCH=0
if python3 -c "import torch, transformers" >/dev/null 2>&1; then
  HAVE_TORCH=1
  DATA_ARGS=()
  # The reference reads the lengths from an MLPerf shard's input_mask (its --data): write one.
  if python3 -c '
import sys
import h5py
import numpy as np
lengths = np.loadtxt(sys.argv[1], dtype=np.int64, ndmin=1)
mask = (np.arange(512)[None, :] < lengths[:, None]).astype(np.int8)
with h5py.File(sys.argv[2], "w") as f:
    f["input_mask"] = mask
' "$WORK/lengths.txt" "$WORK/lengths.hdf5"; then
    DATA_ARGS=(--data "$WORK/lengths.hdf5")
  else
    echo "bench_bert_gpu: could not write the lengths as HDF5 (h5py, numpy?): PyTorch draws its own Wikipedia-like lengths"
  fi
  echo "bench_bert_gpu: python3 bench/bert_pytorch_reference.py --batch_size $BATCH --seq_len 512 --max_predictions 76 --steps $STEPS ${DATA_ARGS[*]}"
  python3 bench/bert_pytorch_reference.py --batch_size "$BATCH" --seq_len 512 --max_predictions 76 --steps "$STEPS" \
    --peak_tflops "$PEAK" "${DATA_ARGS[@]}" | tee -a "$RESULTS"
else
  echo "bench_bert_gpu: PyTorch comparison NOT RUN: python3 cannot import torch and transformers" \
       "(pip install torch transformers); FoldCore's numbers above stand alone"
fi

# 4. Summary against the goals.
python3 - "$RESULTS" "$PEAK" "$HAVE_TORCH" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peak, have_torch = float(sys.argv[2]), sys.argv[3] == "1"
fc = {r["mode"]: r for r in rows if r.get("impl", "foldcore") == "foldcore"}
pt = next((r for r in rows if r.get("impl") == "pytorch"), None)
for mode in ("unpacked", "packed"):
    r = fc.get(mode)
    if not r:
        continue
    line = (f"FoldCore {mode:8s}: {r['sequences_per_s']:.1f} seq/s, {r['tokens_per_s']:.0f} real tokens/s, "
            f"{r['ms_per_step']:.1f} ms/step, efficiency {r['packing_efficiency']:.3f}, {r['tflops']:.1f} TFLOP/s, "
            f"MFU {r['mfu']:.3f} vs measured GEMM {r['peak_tflops']:.0f} TFLOP/s")
    if peak > 0:
        line += f", {r['tflops'] / peak:.3f} vs datasheet {peak:g}"
    print(line)
if "packed_vs_unpacked" in fc:
    print(f"packing speed-up (real tokens/s): {fc['packed_vs_unpacked']['speedup_tokens_per_s']:.2f}x")
u = fc.get("unpacked")
if u:
    mfu = u["tflops"] / peak if peak > 0 else u["mfu"]
    print(f"MFU goal >= 0.60 (unpacked, {'datasheet' if peak > 0 else 'measured GEMM'} peak): {mfu:.3f} -> "
          f"{'met' if mfu >= 0.60 else 'NOT met'}")
if pt and u:
    ratio = u["sequences_per_s"] / pt["sequences_per_s"]
    print(f"PyTorch  unpacked: {pt['sequences_per_s']:.1f} seq/s, {pt['ms_per_step']:.1f} ms/step, "
          f"{pt['tflops']:.1f} TFLOP/s (torch {pt['torch']})")
    print(f"FoldCore / PyTorch sequences/s (both unpacked, same batch): {ratio:.2f}x -> goal >= 1.3x "
          f"{'met' if ratio >= 1.3 else 'NOT met'}")
    if "packed" in fc:
        print(f"FoldCore packed / PyTorch unpacked sequences/s: {fc['packed']['sequences_per_s'] / pt['sequences_per_s']:.2f}x "
              "(counted separately: different work per sequence)")
elif not have_torch:
    print("FoldCore / PyTorch: not measured (no torch/transformers)")
EOF
