#!/usr/bin/env python3
"""Communication model of AlphaFold2 training under DP, DAP and BP (docs/scaling.md).

Counts the bytes each GPU receives per training step for data parallelism (gradient all-reduce),
dynamic axial parallelism (the MSA/pair transposes and gathers of every Evoformer-like block) and
branch parallelism (the exchange of the two branches' results at the end of each block), and
turns them into a predicted step time and parallel efficiency from stated bandwidths, latencies
and an achieved compute rate. A model, not a measurement: every assumption is a flag.

    scripts/scaling_model.py                      # the tables of docs/scaling.md
    scripts/scaling_model.py --rate_tflops 60     # another achieved compute rate
"""
import argparse

# AlphaFold2 model_1 (Suppl. Table 1 / our configs/model/model_1.yaml) and its training presets.
C_M, C_Z, C_E, C_T = 256, 128, 64, 64
H_MSA, H_PAIR, D_HEAD = 8, 4, 32
C_TRI, C_OPM = 128, 32
EVO_BLOCKS, EXTRA_BLOCKS, TEMPLATE_BLOCKS, TEMPLATES = 48, 4, 2, 4
C_TRI_T, H_T, D_T = 64, 4, 16  # the template pair stack's triangle update channels and attention heads
PARAMS = 93_237_338  # scalars in params_model_1_ptm.npz (../shared/af2/params_manifest_model_1_ptm.txt)
PRESETS = {  # crop, MSA clusters, extra MSA rows (Suppl. Table 4)
    "initial (crop 256)": (256, 128, 1024),
    "finetune (crop 384)": (384, 512, 5120),
}
# Bytes per value on the wire in bf16 training, as the code sends them (measured: bench_dap
# --precision bf16's dap_train_traffic line; dist/dap.h, "The wire dtype"): the residual streams
# never move under DAP; what a module needs in another layout is its LayerNorm output (read only by
# GEMMs) or its gated, masked projections, sent in bf16 (the values its GEMMs round to anyway), and
# its bf16 update comes back. The backward's duals carry the gradients in the dtype of what the
# forward delivered: fp32 for the LayerNorm outputs, edges and projections (delivered in fp32 for
# one process's fp32 gradient sums), bf16 for the updates and the attention biases.
# --fp32_wire: every value in fp32 (fp32 training).
WIRE_BYTES = 2       # LayerNorm outputs, edges, projections: forward
GRAD_WIRE_BYTES = 4  # their gradients: backward
UPDATE_BYTES = 2     # the updates switched back, both ways
BIAS_BYTES = 2       # the attention biases, both ways
STREAM_BYTES = 4     # fp32 streams: the BP exchange, the template embedding's update gathered whole
GRAD_BYTES = 4  # fp32 gradients
# Passes over the trunk per step: on average 1.5 recycling iterations without gradients
# (num_recycles uniform in 0..3), the forward with gradients and its recomputation in the backward
# (one checkpoint per block): FORWARD_PASSES with the forward's collectives; and the backward, whose
# collectives are their duals (the same elements, in the gradients' dtypes).
FORWARD_PASSES = 1.5 + 1 + 1
PASSES = FORWARD_PASSES + 1


def a2a(total_elems, n, bytes_per):
    """Bytes one rank receives in an all-to-all that re-splits a tensor of total_elems."""
    return total_elems / n * (n - 1) / n * bytes_per


def gather(total_elems, n, bytes_per):
    """Bytes one rank receives in an all-gather that assembles a tensor of total_elems (an edge);
    the same for the reduce-scatter of its backward."""
    return total_elems * (n - 1) / n * bytes_per


def bias_gather(total_elems, n):
    """The same for an attention's pair bias."""
    return gather(total_elems, n, BIAS_BYTES)


def step_bytes(fwd, bwd):
    """A block's bytes per training step from its forward's and backward's."""
    return FORWARD_PASSES * fwd + bwd


def block_flops(n_res, n_seq, c_m, msa_heads, global_col):
    """Forward FLOPs of one Evoformer-like block, split into the MSA and the pair branch."""
    m = n_seq * n_res * c_m
    z = n_res * n_res * C_Z
    row_attn = 2 * m * (4 * msa_heads * D_HEAD) + 4 * n_seq * msa_heads * n_res * n_res * D_HEAD
    col_attn = 2 * m * (4 * msa_heads * D_HEAD) + (0 if global_col else 4 * n_res * msa_heads * n_seq * n_seq * D_HEAD)
    msa_transition = 2 * m * c_m * 4 * 2
    opm = 2 * n_seq * n_res * c_m * 2 * C_OPM + 2 * n_res * n_res * n_seq * C_OPM * C_OPM + 2 * n_res * n_res * C_OPM * C_OPM * C_Z
    tri_mult = 2 * (2 * z * C_TRI * 6 + 2 * n_res ** 3 * C_TRI)
    tri_attn = 2 * (2 * z * C_Z * 5 + 4 * n_res * H_PAIR * n_res * n_res * D_HEAD)
    pair_transition = 2 * z * C_Z * 4 * 2
    return row_attn + col_attn + msa_transition + opm, tri_mult + tri_attn + pair_transition


def dap_block(n_res, n_seq, c_m, n):
    """(forward bytes, backward bytes, collectives, overlapped) one rank receives in one block under
    DAP-n (evoformer_parallel.cpp). The streams stay split by rows. MSA: the column attention's
    LayerNorm output goes to the columns and its update comes back (2 all-to-alls of the MSA), the
    outer product mean's left projection goes to the columns (an all-to-all of C_OPM channels) and
    its right one is gathered whole; row attention gathers its pair bias. Pair: the incoming
    update's and the ending node's LayerNorm outputs go to the columns and their updates come back
    (4 all-to-alls of the pair); each triangle update gathers one C_TRI edge; each triangle
    attention gathers its bias.

    overlapped: (bytes, FLOPs of one rank's work that runs while they move) for each collective the
    code overlaps (ParallelGroup::gather_async): each gathered pair bias with the q, k, v and gate
    projections of its attention, the outer product mean's right projection with its left one,
    each triangle update's right edge with its left edge, left gate and output gate. The backward
    mirrors them (its windows are about twice as long; counted as the forward's)."""
    if n == 1:
        return 0.0, 0.0, 0, []
    m, z = n_seq * n_res * c_m, n_res * n_res * C_Z
    proj = n_seq * n_res * C_OPM
    fwd = a2a(m, n, WIRE_BYTES) + a2a(m, n, UPDATE_BYTES) + a2a(proj, n, WIRE_BYTES) + gather(proj, n, WIRE_BYTES)
    bwd = a2a(m, n, GRAD_WIRE_BYTES) + a2a(m, n, UPDATE_BYTES) + a2a(proj, n, GRAD_WIRE_BYTES) + gather(proj, n, GRAD_WIRE_BYTES)
    fwd += 2 * (a2a(z, n, WIRE_BYTES) + a2a(z, n, UPDATE_BYTES)) + 2 * gather(n_res * n_res * C_TRI, n, WIRE_BYTES)
    bwd += 2 * (a2a(z, n, GRAD_WIRE_BYTES) + a2a(z, n, UPDATE_BYTES)) + 2 * gather(n_res * n_res * C_TRI, n, GRAD_WIRE_BYTES)
    biases = bias_gather(n_res * n_res * H_MSA, n) + 2 * bias_gather(n_res * n_res * H_PAIR, n)
    fwd += biases
    bwd += biases
    overlapped = [
        (bias_gather(n_res * n_res * H_MSA, n), 2 * m * 4 * H_MSA * D_HEAD / n),
        (gather(proj, n, WIRE_BYTES), 2 * n_seq * n_res * c_m * C_OPM / n),
    ] + 2 * [
        (gather(n_res * n_res * C_TRI, n, WIRE_BYTES), 3 * 2 * z * C_TRI / n),
        (bias_gather(n_res * n_res * H_PAIR, n), 4 * 2 * z * H_PAIR * D_HEAD / n),
    ]
    return fwd, bwd, 3 + 1 + 4 + 2 + 2, overlapped


def dap_template_block(n_res, n):
    """(forward bytes, backward bytes, collectives, overlapped) one rank receives in one template
    pair block under DAP-n (TemplatePairBlock::forward_dap: the Evoformer's pair track at C_T): 4
    all-to-alls of the template pair (the incoming update's and the ending node's LayerNorm outputs
    and updates), each triangle update gathers one C_TRI_T edge, each triangle attention its bias;
    overlapped as the Evoformer's."""
    if n == 1:
        return 0.0, 0.0, 0, []
    t = n_res * n_res * C_T
    edge = n_res * n_res * C_TRI_T
    fwd = 2 * (a2a(t, n, WIRE_BYTES) + a2a(t, n, UPDATE_BYTES)) + 2 * gather(edge, n, WIRE_BYTES)
    bwd = 2 * (a2a(t, n, GRAD_WIRE_BYTES) + a2a(t, n, UPDATE_BYTES)) + 2 * gather(edge, n, GRAD_WIRE_BYTES)
    biases = 2 * bias_gather(n_res * n_res * H_T, n)
    overlapped = 2 * [
        (gather(edge, n, WIRE_BYTES), 3 * 2 * t * C_TRI_T / n),
        (bias_gather(n_res * n_res * H_T, n), 4 * 2 * t * H_T * D_T / n),
    ]
    return fwd + biases, bwd + biases, 4 + 2 + 2, overlapped


def step(preset, n_dap, n_bp, rate, bw, lat):
    n_res, n_seq, n_extra = PRESETS[preset]
    blocks = [(EVO_BLOCKS, n_seq, C_M, H_MSA, False), (EXTRA_BLOCKS, n_extra, C_E, H_MSA, True)]
    flops = comm_bytes = comm_time = hidden = 0.0
    t_compute = 0.0
    for count, s, c, h, glob in blocks:
        f_msa, f_pair = block_flops(n_res, s, c, h, glob)
        f = f_msa + f_pair
        flops += count * PASSES * f
        fwd, bwd, colls, overlapped = dap_block(n_res, s, c, n_dap)
        b = step_bytes(fwd, bwd) / PASSES  # per pass, on average
        # What the code's overlap hides: each overlapped collective up to the length of its window.
        hidden += count * PASSES * sum(min(ob / bw, of / rate) for ob, of in overlapped)
        # BP-2: the MSA branch (with the outer product mean at the block's end) on one rank, the
        # pair branch on the other; they swap results: the pair rank receives the new MSA and the
        # outer-product update, the MSA rank the new pair (the larger of the two bounds the time).
        if n_bp == 2:
            bp_bytes = max(s * n_res * c + n_res * n_res * C_Z, n_res * n_res * C_Z) * STREAM_BYTES / n_dap
            b += bp_bytes
            colls += 1
            branch = max(f_msa, f_pair)
        else:
            branch = f
        comm_bytes += count * PASSES * b
        comm_time += count * PASSES * (b / bw + colls * lat)
        t_compute += count * PASSES * branch / n_dap / rate
    # The template embedding (pair-only blocks at C_T for every template) runs split by rows over
    # DAP too (TemplateEmbedder::forward_dap), with its blocks' collectives, and gathers its update
    # [N, N, C_Z] whole once per pass.
    f_t = TEMPLATES * TEMPLATE_BLOCKS * block_flops(n_res, 0, 0, 0, True)[1] * (C_T / C_Z)
    flops += PASSES * f_t
    t_compute += PASSES * f_t / n_dap / rate
    if n_dap > 1:
        fwd, bwd, colls, overlapped = dap_template_block(n_res, n_dap)
        per_pass = TEMPLATES * TEMPLATE_BLOCKS * step_bytes(fwd, bwd) / PASSES + gather(n_res * n_res * C_Z, n_dap, STREAM_BYTES)
        comm_bytes += PASSES * per_pass
        comm_time += PASSES * (per_pass / bw + (TEMPLATES * TEMPLATE_BLOCKS * colls + 1) * lat)
        hidden += TEMPLATES * TEMPLATE_BLOCKS * PASSES * sum(min(ob / bw, of / rate) for ob, of in overlapped)
    return flops, comm_bytes, comm_time, t_compute, hidden


def dp_allreduce(n, bw, lat):
    """Ring all-reduce of the fp32 gradients: bytes one rank receives, and the time."""
    b = 2 * (n - 1) / n * PARAMS * GRAD_BYTES
    return b, b / bw + 2 * (n - 1) * lat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate_tflops", type=float, default=179.0,
                    help="achieved bf16 rate of the model's kernels on one GPU (179: the 0.3 s/step goal at crop 256)")
    ap.add_argument("--nvlink_gbs", type=float, default=300.0, help="per-GPU collective bandwidth inside a node, GB/s")
    ap.add_argument("--nvlink_lat_us", type=float, default=15.0, help="latency per collective inside a node, µs")
    ap.add_argument("--ib_gbs", type=float, default=40.0, help="per-GPU bandwidth between nodes (one 400 Gb/s NIC per GPU), GB/s")
    ap.add_argument("--ib_lat_us", type=float, default=30.0, help="latency per collective step between nodes, µs")
    ap.add_argument("--fp32_wire", action="store_true",
                    help="every value on the wire in fp32: fp32 training (and bf16 training before the bf16 wire)")
    ap.add_argument("--dap-block", nargs=3, type=int, metavar=("N_RES", "N_SEQ", "P"),
                    help="only print the MB one rank receives per Evoformer block in one training step (forward, "
                         "recomputation, backward: 3 passes) under DAP-P, to set beside bench_dap --precision "
                         "bf16's dap_train_traffic line")
    a = ap.parse_args()
    global WIRE_BYTES, UPDATE_BYTES, BIAS_BYTES
    if a.fp32_wire:
        WIRE_BYTES = UPDATE_BYTES = BIAS_BYTES = 4
    if a.dap_block:
        n_res, n_seq, p = a.dap_block
        fwd, bwd = dap_block(n_res, n_seq, C_M, p)[:2]
        print(f"DAP-{p}, N = {n_res}, S = {n_seq}, forward {WIRE_BYTES} / updates {UPDATE_BYTES} / biases {BIAS_BYTES} "
              f"bytes per value, gradients {GRAD_WIRE_BYTES}: {(2 * fwd + bwd) / 1e6:.3f} MB per block per step")
        return
    rate, bw, lat = a.rate_tflops * 1e12, a.nvlink_gbs * 1e9, a.nvlink_lat_us * 1e-6

    print(f"Assumptions: achieved rate {a.rate_tflops:g} TFLOP/s per GPU; inside a node {a.nvlink_gbs:g} GB/s and "
          f"{a.nvlink_lat_us:g} µs per collective; between nodes {a.ib_gbs:g} GB/s and {a.ib_lat_us:g} µs; "
          f"{PASSES:g} trunk passes per step; on the wire {WIRE_BYTES} bytes per LayerNorm-output, edge or projection "
          f"value in the forward ({GRAD_WIRE_BYTES} for its gradient), {UPDATE_BYTES} per update value and "
          f"{BIAS_BYTES} per attention-bias value both ways, {STREAM_BYTES} per stream value (the BP exchange, the "
          f"template update), fp32 gradients.\n")
    print("| preset | layout | TFLOP/step | compute s | received GB/GPU/step | comm s | step s, no overlap | efficiency, no overlap | comm s hidden by this code's overlap | efficiency, this code's overlap | efficiency, full overlap |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for preset in PRESETS:
        t1 = step(preset, 1, 1, rate, bw, lat)[3]
        for n_dap, n_bp in [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (4, 2)]:
            flops, b, tc, tk, hid = step(preset, n_dap, n_bp, rate, bw, lat)
            gpus = n_dap * n_bp
            serial = tk + tc
            eff = t1 / (gpus * serial)
            eff_code = t1 / (gpus * (serial - hid))
            eff_overlap = t1 / (gpus * max(tk, tc))
            print(f"| {preset} | DAP-{n_dap} × BP-{n_bp} | {flops / 1e12:.1f} | {tk:.3f} | {b / 1e9:.2f} | {tc:.3f} | "
                  f"{serial:.3f} | {eff:.0%} | {hid:.3f} | {eff_code:.0%} | {eff_overlap:.0%} |")
    print()
    print("| DP ranks | where | gradient GB received/GPU/step | all-reduce s |")
    print("| --- | --- | --- | --- |")
    for n, where, b_, l_ in [(8, "one node", bw, lat), (64, "8 nodes", a.ib_gbs * 1e9, a.ib_lat_us * 1e-6),
                             (512, "64 nodes", a.ib_gbs * 1e9, a.ib_lat_us * 1e-6)]:
        gb, t = dp_allreduce(n, b_, l_)
        print(f"| {n} | {where} | {gb / 1e9:.2f} | {t:.3f} |")


if __name__ == "__main__":
    main()
