#!/usr/bin/env python3
"""PyTorch reference for bench_bert: BERT pre-training steps with transformers' BertForPreTraining
(SDPA attention, bf16 autocast over fp32 weights, fused AdamW + gradient clipping), timed the way
bench_bert times FoldCore, printing one JSON line with bench_bert's keys ("impl": "pytorch").

Same work as `bench_bert --device cuda:0 --config large --packing off`:
  - BERT-Large as configs/bert/large.yaml: vocab 30522, hidden 1024, 24 layers, 16 heads, FFN 4096
    (exact-erf GELU), 512 positions, 2 segment types, LayerNorm eps 1e-12, hidden dropout 0.1.
    FoldCore has no dropout on the attention probabilities, so neither does this run
    (attention_probs_dropout_prob 0; MLPerf's reference uses 0.1).
  - batch B rows of L tokens, one sequence per row padded to L (the padding mask goes to SDPA),
    P = 76 masked positions per row at most (15% of the real tokens, MLPerf's rounding), one NSP
    label per row.
  - Masked LM head on the masked positions only (gathered before the head, as MLPerf's reference
    and FoldCore do), not on all B·L tokens: BertForPreTraining's own forward would run the
    30522-wide decoder over every token, work neither FoldCore nor the MLPerf reference does.
    --full_mlm_head runs the stock forward instead (for reference).
  - Optimizer: torch.optim.AdamW(fused=True) with weight decay 0.01 and clip_grad_norm_(1.0).
    LAMB adds one norm per tensor to Adam's update: a negligible difference in step time.
Sequence lengths: from an MLPerf HDF5 shard (--data, e.g. bench_bert --corpus DIR keeps
DIR/train/part-00000-of-00001.hdf5; needs h5py), else drawn from the same Wikipedia-like shape as
bench_bert's corpus (mean ≈ 0.49·L). With padding the dense compute does not depend on the lengths;
they set the real-token count (tokens/s) and the mask.
FLOPs: the same count as FoldCore (src/models/bert/bert_model.cpp forward_flops, ×3 for a training
step, real tokens only); MFU against a bf16 GEMM measured in the same run and against --peak_tflops
(datasheet dense bf16) when given.

  python3 bench/bert_pytorch_reference.py [--batch_size 56] [--seq_len 512] [--max_predictions 76]
      [--steps 20] [--warmup 5] [--data SHARD.hdf5] [--peak_tflops 989.4] [--full_mlm_head]
"""
import argparse
import json
import math
import random
import sys
import time


def wikipedia_like_lengths(n, seq_len, rng):
    """Pair lengths with the shape of data::wikipedia_like_lengths (bert_corpus.h), approximated:
    ≈ 13% full-length rows, the rest spread down to a few tokens, mean ≈ 0.49·L."""
    out = []
    for _ in range(n):
        if rng.random() < 0.13:
            out.append(seq_len)
        else:  # roughly uniform-decreasing spread over [8, L): triangular with mode at the bottom
            out.append(max(8, min(seq_len, int(rng.triangular(8, seq_len, 8 + 0.25 * seq_len)))))
    return out


def lengths_from_shard(path, n, seq_len):
    import h5py  # optional dependency, only for --data
    import numpy as np
    with h5py.File(path, "r") as f:
        mask = np.asarray(f["input_mask"][:n])
    if mask.shape[1] != seq_len:
        sys.exit(f"bert_pytorch_reference: {path} has L = {mask.shape[1]}, not --seq_len {seq_len}")
    lengths = [int(x) for x in mask.sum(axis=1)]
    while len(lengths) < n:
        lengths += lengths[: n - len(lengths)]
    return lengths


def forward_flops(cfg, tokens, attn_len, predictions, sequences):
    """bert_model.cpp BertForPreTraining::forward_flops: matmul FLOPs (2 per multiply-add)."""
    d, ff, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    per_token_layer = 8 * d * d + 4 * d * ff + 4 * attn_len * d
    return (tokens * per_token_layer * cfg.num_hidden_layers + predictions * (2 * d * d + 2 * d * v)
            + sequences * (2 * d * d + 4 * d))


def measure_gemm_peak(torch, device, n=1024):
    """bf16 n×n×n GEMM, best of 3 (bert_trainer.cpp measure_gemm_peak_flops), in FLOP/s."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    torch.matmul(a, b)
    torch.cuda.synchronize(device)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch_size", type=int, default=56)
    ap.add_argument("--seq_len", type=int, default=512)
    ap.add_argument("--max_predictions", type=int, default=76)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--data", default="", help="an MLPerf HDF5 shard to take the sequence lengths from")
    ap.add_argument("--peak_tflops", type=float, default=0.0, help="datasheet dense bf16 TFLOP/s for a second MFU")
    ap.add_argument("--full_mlm_head", action="store_true", help="stock BertForPreTraining forward (head on all tokens)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    try:
        import torch
        from transformers import BertConfig, BertForPreTraining
    except ImportError as e:
        sys.exit(f"bert_pytorch_reference: needs torch and transformers ({e})")
    if not torch.cuda.is_available():
        sys.exit("bert_pytorch_reference: no CUDA device (torch.cuda.is_available() is False)")
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    B, L, P = args.batch_size, args.seq_len, args.max_predictions

    cfg = BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                     intermediate_size=4096, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
                     layer_norm_eps=1e-12, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0,
                     initializer_range=0.02)
    model = BertForPreTraining._from_config(cfg, attn_implementation="sdpa").to(device)
    model.train()
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=4e-4, betas=(0.9, 0.999), eps=1e-6, fused=True)

    # Batches: one sequence per row, padding after it; P masked positions (15%, at least 1).
    n_rows = B * (args.warmup + args.steps)
    lengths = lengths_from_shard(args.data, n_rows, L) if args.data else wikipedia_like_lengths(n_rows, L, rng)
    batches = []
    for s in range(args.warmup + args.steps):
        lens = lengths[s * B:(s + 1) * B]
        ids = torch.randint(1000, cfg.vocab_size, (B, L))
        mask = torch.zeros(B, L, dtype=torch.long)
        seg = torch.zeros(B, L, dtype=torch.long)
        mpos = torch.zeros(B, P, dtype=torch.long)
        mw = torch.zeros(B, P)
        for r, n in enumerate(lens):
            mask[r, :n] = 1
            seg[r, n // 2:n] = 1
            k = min(P, max(1, round(0.15 * n)), n - 3)
            pos = sorted(rng.sample(range(1, n - 1), k)) if k > 0 else []
            mpos[r, :len(pos)] = torch.tensor(pos, dtype=torch.long)
            mw[r, :len(pos)] = 1
        ids = ids * mask
        mlab = torch.gather(ids, 1, mpos)
        nsp = torch.randint(0, 2, (B,))
        batches.append({k: v.to(device) for k, v in dict(ids=ids, mask=mask, seg=seg, mpos=mpos, mw=mw, mlab=mlab,
                                                         nsp=nsp).items()})

    ce = torch.nn.CrossEntropyLoss()

    def step(b):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if args.full_mlm_head:
                labels = torch.full((B, L), -100, dtype=torch.long, device=device)
                labels.scatter_(1, b["mpos"], torch.where(b["mw"] > 0, b["mlab"], -100))
                out = model(input_ids=b["ids"], attention_mask=b["mask"], token_type_ids=b["seg"], labels=labels,
                            next_sentence_label=b["nsp"])
                loss = out.loss
            else:
                seq, pooled = model.bert(input_ids=b["ids"], attention_mask=b["mask"], token_type_ids=b["seg"],
                                         return_dict=False)[:2]
                sel = b["mw"].reshape(-1) > 0
                rows = (b["mpos"] + torch.arange(B, device=device)[:, None] * L).reshape(-1)[sel]
                mlm_logits = model.cls.predictions(seq.reshape(B * L, -1)[rows])
                nsp_logits = model.cls.seq_relationship(pooled)
                loss = ce(mlm_logits.float(), b["mlab"].reshape(-1)[sel]) + ce(nsp_logits.float(), b["nsp"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for b in batches[:args.warmup]:
        step(b)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for b in batches[args.warmup:]:
        step(b)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0

    timed_lengths = lengths[args.warmup * B:]
    tokens = sum(timed_lengths)
    attn_sq = sum(n * n for n in timed_lengths)
    predictions = sum(min(P, max(1, round(0.15 * n)), n - 3) for n in timed_lengths)
    flops = 3 * forward_flops(cfg, tokens, attn_sq / tokens, predictions, len(timed_lengths))
    tflops = flops / seconds / 1e12
    peak = measure_gemm_peak(torch, device) / 1e12
    line = {"bench": "bert", "case": "large", "mode": "unpacked", "impl": "pytorch",
            "device": args.device, "precision": "bf16", "batch_size": B, "seq_len": L, "steps": args.steps,
            "ms_per_step": 1e3 * seconds / args.steps, "sequences_per_s": B * args.steps / seconds,
            "tokens_per_s": tokens / seconds, "mean_length": tokens / len(timed_lengths),
            "packing_efficiency": tokens / (len(timed_lengths) * L), "tflops": tflops, "peak_tflops": peak,
            "mfu": tflops / peak, "peak_memory_bytes": torch.cuda.max_memory_allocated(device),
            "torch": torch.__version__, "mlm_head": "all_tokens" if args.full_mlm_head else "masked_positions"}
    if args.peak_tflops > 0:
        line["mfu_datasheet"] = tflops / args.peak_tflops
    print(json.dumps(line), flush=True)
    return 0 if math.isfinite(seconds) else 1


if __name__ == "__main__":
    sys.exit(main())
