#!/usr/bin/env python3
"""A lower bound on a training step's GEMM time from its kernel list (docs/benchmarks.md).

Reads the JSON lines of `bench_train` run with FOLDCORE_PROFILE_KERNELS=1 (and FOLDCORE_PROFILE_TOP=0,
so every kernel is listed) — on a GPU, or on the CUDA host emulation, where the calls are exact and
the times are not — and bounds each cuBLASLt GEMM from below by the larger of its arithmetic at a
stated peak and its bytes at a stated memory bandwidth (a roofline), plus a fixed time per call.
The GEMM names say the dtypes, m×n×k, transposes and batch ("gemm bf16->f32 65536x128x128 NT
batch 4"). A model, not a measurement: every assumption is a flag.

    FOLDCORE_PROFILE_TOP=0 FOLDCORE_PROFILE_KERNELS=1 FOLDCORE_EMU_SKIP_DEVICE_WORK=1 \\
      FOLDCORE_EMU_DEVICE_MEMORY_MB=65536 build-emu-rel/bench/bench_train --device cuda:0 --crops 256 \\
      --configs bf16:1 --evoformer_blocks 48 --extra_msa_blocks 4 --steps 1 > step.jsonl
    scripts/gemm_floor.py step.jsonl                        # H100 SXM figures (below)
    scripts/gemm_floor.py step.jsonl --bandwidth_tbs 4.3    # 90% of an H200's 4.8 TB/s

With `bench_train --samples K` (the average training step) the kernel lines of case
"<config>:average" sum the K samples' steps; the bound is then given per step (their mean).

Bytes per GEMM, two counts. The bound: A and B read once per call, C written once, in their
dtypes, and for a batched call A counted once (the step's batched GEMMs share their input across
the batch: the projections of one LayerNorm output, the weight gradients of one input; where A is
not shared this undercounts, which keeps it a bound). The estimate: A once per batch entry (once
where it is small enough to stay in the L2, --l2_mb: the outer product mean's 2 MiB shared operand
across its 256 entries), and an fp32 C also read (the step's fp32 products are gradients that the GEMMs add
into what is there, beta = 1). Caches and reuse across calls are ignored. A GEMM can only beat the bound by not
running, or by having its memory traffic fused into a neighbour.
"""
import argparse
import json
import re
import sys
from collections import defaultdict

GEMM = re.compile(r"gemm (\w+)(?:->(\w+))? (\d+)x(\d+)x(\d+)(?: (NN|NT|TN|TT))?(?: batch (\d+))?")
BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8}


def gemm_cost(name, l2_bytes=0):
    """(flop, bound bytes, estimate bytes, c_dtype) of one call of the GEMM `name`, or None. In the
    estimate a batched call's A is read once per batch entry, or once where it fits in `l2_bytes`
    (it stays in the L2 cache across the batch: the outer product mean's shared 2 MiB operand)."""
    m = GEMM.match(name)
    if not m:
        return None
    ab, c = m.group(1), m.group(2) or m.group(1)
    rows, cols, k = int(m.group(3)), int(m.group(4)), int(m.group(5))
    batch = int(m.group(7) or 1)
    flop = 2.0 * rows * cols * k * batch
    a, b, out = BYTES[ab] * rows * k, BYTES[ab] * k * cols, BYTES[c] * rows * cols
    bound = a + batch * (b + out)
    estimate = (a if a <= l2_bytes else batch * a) + batch * (b + out * (2 if c == "f32" else 1))
    return flop, bound, estimate, c


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jsonl", help="bench_train output with train_kernels lines (or - for standard input)")
    p.add_argument("--case", default=None, help="the bench_train config to read (default: the first)")
    # H100 SXM: 989 TFLOP/s dense bf16 on the datasheet, 783-793 measured for 8192^3 (runs 1 and 3);
    # 3.35 TB/s HBM3 on the datasheet. The defaults take the measured peak and 90% of the datasheet
    # bandwidth (what streaming kernels reach), and 3 us per call (a GEMM's launch and tail).
    p.add_argument("--peak_tflops", type=float, default=790.0)
    p.add_argument("--bandwidth_tbs", type=float, default=3.0)
    p.add_argument("--call_us", type=float, default=3.0)
    # H100: 50 MB of L2 in two partitions; an operand the batch entries share stays there when it is
    # small beside the outputs streaming through (8 MB: the outer product mean's 2 MiB does, the
    # projections' 16 MiB inputs are counted per entry, as before).
    p.add_argument("--l2_mb", type=float, default=8.0,
                   help="a batched GEMM's A up to this size is read once in the estimate (0: once per entry)")
    p.add_argument("--top", type=int, default=12, help="GEMM shapes listed, the largest bound first")
    args = p.parse_args()

    stream = sys.stdin if args.jsonl == "-" else open(args.jsonl)
    kernels = []
    samples = 1  # bench_train --samples K: the "<config>:average" lines sum K steps
    for line in stream:
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row.get("case") == "af2_step_average":
            samples = int(row["samples"])
        if row.get("bench") != "train_kernels" or row.get("part") != "kernel":
            continue
        if args.case is None:
            args.case = row.get("case")
        if row.get("case") == args.case:
            kernels.append(row)
    per_step = samples if str(args.case).endswith(":average") else 1
    if not kernels:
        sys.exit(f"{args.jsonl}: no train_kernels kernel lines (run bench_train with FOLDCORE_PROFILE_KERNELS=1 "
                 "and FOLDCORE_PROFILE_TOP=0)")

    per_class = defaultdict(lambda: {"calls": 0, "tflop": 0.0, "gb": 0.0, "seconds": 0.0, "estimate": 0.0})
    shapes = []
    calls_other = 0

    def seconds(flop, nbytes):
        return max(flop / (args.peak_tflops * 1e12), nbytes / (args.bandwidth_tbs * 1e12)) + args.call_us * 1e-6

    for row in kernels:
        cost = gemm_cost(row["name"], args.l2_mb * 1e6)
        if cost is None:
            calls_other += row["calls"]
            continue
        flop, bound, estimate, c = cost
        memory_bound = bound / (args.bandwidth_tbs * 1e12) > flop / (args.peak_tflops * 1e12)
        cls = f"{c} output, {'memory' if memory_bound else 'arithmetic'}-bound"
        calls = row["calls"] / per_step
        k = per_class[cls]
        k["calls"] += calls
        k["tflop"] += flop * calls / 1e12
        k["gb"] += bound * calls / 1e9
        k["seconds"] += seconds(flop, bound) * calls
        k["estimate"] += seconds(flop, estimate) * calls
        shapes.append((seconds(flop, bound) * calls, calls, row["name"], flop / 1e9, bound / 1e6))

    print(f"case {args.case}: {len(kernels)} kernels"
          + (f", per step (the mean of {samples} samples)" if per_step > 1 else "")
          + f"; roofline {args.peak_tflops:g} TFLOP/s, {args.bandwidth_tbs:g} TB/s, {args.call_us:g} us per call")
    print(f"  {'':36s} {'calls':>6s}  {'TFLOP':>7s}  {'GB':>5s}  {'bound':>7s}  {'estimate':>8s}")
    total = {"calls": 0, "tflop": 0.0, "gb": 0.0, "seconds": 0.0, "estimate": 0.0}
    for cls in sorted(per_class):
        k = per_class[cls]
        for key in total:
            total[key] += k[key]
        print(f"  {cls:36s} {k['calls']:6.0f}  {k['tflop']:7.1f}  {k['gb']:5.0f}  {k['seconds']:6.3f}s  {k['estimate']:7.3f}s")
    print(f"  {'all GEMMs':36s} {total['calls']:6.0f}  {total['tflop']:7.1f}  {total['gb']:5.0f}  {total['seconds']:6.3f}s  "
          f"{total['estimate']:7.3f}s")
    print(f"  other kernels: {calls_other / per_step:.0f} calls, not bounded here")
    if args.top > 0:
        print("largest GEMM bounds (seconds, calls, shape, GFLOP per call, bound MB per call):")
        for s in sorted(shapes, reverse=True)[: args.top]:
            print(f"  {s[0]:.4f}  {s[1]:7.1f}  {s[2]:45s} {s[3]:8.2f} {s[4]:8.1f}")

if __name__ == "__main__":
    main()
