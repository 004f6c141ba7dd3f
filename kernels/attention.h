// Fused gated multi-head attention (AlphaFold2 Alg. 7/13/14/15, BERT self-attention):
//
//   s[b,h,i,j] = scale · Σ_d q[b,h,i,d] k[b,h,j,d] + Σ_t bias_t[b,h,i,j]
//   p[b,h,i,:] = softmax_j s[b,h,i,:]                      lse[b,h,i] = log Σ_j exp s[b,h,i,j]
//   a[b,h,i,:] = Σ_j p[b,h,i,j] v[b,h,j,:]
//   o[b,h,i,:] = sigmoid(g[b,h,i,:]) ⊙ a[b,h,i,:]           (o = a when there is no gate)
//
// Layout: q, g, o, a: [B, H, Lq, D]; k, v: [B, H, Lk, D] — LOGICAL shapes with arbitrary strides
// (last-dim stride 1), so a projection output [B, L, H·D] viewed as [B, L, H, D] and permuted to
// [B, H, L, D] is passed without a copy.
// Biases: up to kMaxBiases 4-D tensors, each dim either the full extent of [B, H, Lq, Lk] or 1
// (a size-1 dim is broadcast; any strides; an expand()ed view with stride 0 also works in the
// forward). Pass biases UN-EXPANDED (e.g. AlphaFold's pair bias [1, H, L, L] shared over MSA rows,
// the mask bias [B, 1, 1, Lk] = 1e9·(mask−1), BERT's padding mask [B, 1, 1, L]) so that the
// gradient has the bias's natural shape.
// Packed variable-length sequences (BERT packing): cu_seqlens i32 [n+1] with B = 1 and Lq = Lk,
// cu[0] = 0 ≤ cu[1] ≤ … ≤ cu[n] = L; row i attends only to keys j in its own segment
// [cu[s], cu[s+1]) (segments apply to both axes).
// dtypes: q, k, v, g, o, a, biases f32/bf16/f16 (all the same); lse f32; fp32 accumulation.
// CPU: forward per (b, h, query tile of ≤ 128 rows): s for the tile materialised in fp32 scratch,
// q·kᵀ and p·v as sgemm calls; backward: reference loops, one row of s at a time.
// CUDA: FlashAttention-style tiled kernels with online softmax; never materialise s or p in the
// forward; the backward recomputes p tile by tile from lse. bf16 by default runs the
// register-tiled mma.sync kernels (S, P, O and dK, dV in registers), f32/f16 the shared-memory
// WMMA/FMA kernels (see AttentionKernel below).
//
// Backward, with dO given (and dA = dO ⊙ sigmoid(g) when gated):
//   dg = dO ⊙ a ⊙ sigmoid(g)(1 − sigmoid(g))
//   dp = dA · vᵀ,  delta[i] = Σ_d dA[i,d] a[i,d],  ds = p ⊙ (dp − delta)
//   dq = scale · ds · k,  dk = scale · dsᵀ · q,  dv = pᵀ · dA,
//   dbias_t = ds summed over the size-1 dims of dbias_t.
// Outputs not wanted are left undefined. dq, dk, dv, dg are overwritten; dbias_t are f32 4-D
// tensors (any strides), each dim the full extent or 1 — normally bias_t's own un-expanded shape —
// and are ACCUMULATED (+=). CPU: deterministic. CUDA: dbias elements shared by several CTAs
// (dims of size 1 in b, h or j) are accumulated with fp32 atomicAdd (order not deterministic);
// sums over i are done inside a CTA in a fixed order.
// A row whose scores are all −inf (possible only with −inf biases) gives a = 0, lse = −inf and
// zero gradients. CUDA: head dims D ≤ 64 (padded with zeros to 16, 32 or 64; larger D: Error).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace foldcore::ops {

constexpr int kMaxBiases = 4;

// Which CUDA kernels compute bf16 attention (f32 and f16 always use the shared-memory kernels):
//   AttentionKernel::mma   register-tiled tensor-core kernels on mma.sync m16n8k16
//                          (FlashAttention-2 layout: S, P and O stay in registers); the default;
//   AttentionKernel::smem  shared-memory tiles with WMMA (the first kernels).
// FOLDCORE_ATTENTION_KERNEL=mma|smem in the environment sets the initial choice (any other value
// is an error at the first use); benches and tests switch it to compare the two in one process.
// The CPU path ignores it.
enum class AttentionKernel { mma, smem };
void set_attention_kernel(AttentionKernel k);
AttentionKernel attention_kernel();
const char* attention_kernel_name(AttentionKernel k);
// With the mma kernels, how the gradient of a bias shared by the batch rows (dbias of size 1 in b,
// B > 1: AlphaFold's pair bias) is summed over b: false (default) — one fp32 atomicAdd per element
// per b from the backward's CTAs; true — a separate pass, one CTA per (key tile, query tile, h)
// looping over b, that recomputes the tile's P and dP and writes each element once. Which is faster
// is a GPU measurement (bench_attention); FOLDCORE_ATTENTION_DBIAS=atomic|pass sets the initial
// choice.
void set_attention_dbias_pass(bool on);
bool attention_dbias_pass();
// With the mma kernels, whether the forward runs its pipelined form where it applies (16-byte
// rows, every bias read 8 keys at a time or broadcast over the rows, no segments): the next key
// tile's loads go through cp.async into a second stage of shared memory while the warps compute on
// the current one (kernels/cuda/attention_fwd_mma_cuda.cu). Both forms give the same bits; true
// (the default) is 1.4-1.5× faster on an H200. (The same pipelining of the backward measured
// slower there: docs/benchmarks.md, "Fused attention".) FOLDCORE_ATTENTION_PIPELINE=on|off sets
// the initial choice; bench_attention times both.
void set_attention_pipeline(bool on);
bool attention_pipeline();
// With the mma kernels, the backward main kernel's form of the per-score work: true (the default)
// — by row: each query row's lse and delta read once for its keys, no range check in a tile whose
// rows all see its 64 keys, the bias-gradient descriptors walked once per 16-query slice, dSᵀ
// stored to shared memory as packed pairs; false — per score, the form measured on an H200 up to
// 2026-11-30. Both give the same bits (tests compare them); which is faster is a GPU measurement
// (bench_attention times both). FOLDCORE_ATTENTION_BWD_FORM=rows|scores sets the initial choice.
void set_attention_bwd_row_form(bool on);
bool attention_bwd_row_form();
// Whether the CUDA backward's row-wise passes (the preprocess: dA, delta, the gate's gradient; and
// the dq conversion) read and write 16 bytes per thread where head dim, pointers and strides allow
// (the default), or one element per thread. delta is summed in another order by the two (the same
// to fp32 rounding); tests compare them.
void set_attention_bwd_vec_rows(bool on);
bool attention_bwd_vec_rows();
// With the mma kernels (bf16), whether the backward runs composed of cuBLASLt products instead of
// its fused main kernel: S = scale·QKᵀ and dP = dA·Vᵀ in fp32, P = exp(S + Σbias − lse) and
// dS = P ⊙ (dP − delta) in bf16 by two row passes, dV = Pᵀ·dA, dQ = scale·dS·K, dK = scale·dSᵀ·Q,
// the bias gradients summed from dS (kernels/cuda/attention_composed_cuda.cu). The scores of a chunk
// of batch rows exist in memory (6 bytes per score: at most attention_bwd_composed_bytes() at a
// time, at least one batch row); P is rounded to bf16 before dS (the fused kernel keeps it fp32).
// Without segments (cu_seqlens) only; else the fused kernel. Which is faster is a GPU measurement
// (bench_attention times both); FOLDCORE_ATTENTION_BWD=fused|composed sets the initial choice.
void set_attention_bwd_composed(bool on);
bool attention_bwd_composed();
// The composed backward's bound on its scores' memory per chunk (default 256 MiB; tests set less
// to run several chunks at small sizes). At least 1.
void set_attention_bwd_composed_bytes(int64_t bytes);
int64_t attention_bwd_composed_bytes();
// The most batch rows one CUDA attention launch covers. A launch's grid has the batch rows on its z
// axis, whose extent is at most 65,535 (the default, and the ceiling); a larger batch (the pair
// stacks' row-chunked triangle attention from N = 4,096 on: chunk 16 × N rows) goes in slices of this
// many rows, one launch each, in order on the same stream. Tests set a small value to run the
// slicing at small sizes (the host emulation takes minutes over 65,536 CTAs). Values outside
// [1, 65,535] are an error.
void set_attention_batch_slice(int rows);
int attention_batch_slice();

struct AttentionInputs {
  Tensor q, k, v;
  std::vector<Tensor> biases;  // each a 4-D view broadcastable to [B, H, Lq, Lk]
  Tensor gate;                 // optional, [B, H, Lq, D]
  Tensor cu_seqlens;           // optional, i32 [n+1], requires B == 1
  float scale = 1.f;
};

// Writes o [B,H,Lq,D] and lse [B,H,Lq] f32; `a` (pre-gate output) is written when given and
// is required for the gated backward (it may be left undefined when there is no gate).
void attention_forward(const AttentionInputs& in, const Tensor& o, const Tensor& lse, const Tensor& a = {});

// Combines two attention results over DISJOINT key sets of the same queries (FlashDecoding's
// split-KV merge; AlphaFold's template pointwise attention visits its templates one at a time):
//   m = max(lse, lse_part),  w = exp(lse − m),  w' = exp(lse_part − m)
//   a ← (w·a + w'·a_part) / (w + w'),  lse ← m + log(w + w')
// in place on (a, lse). a, a_part: PRE-GATE outputs [B, H, L, D] (logical shapes, any strides with
// last-dim stride 1), same float dtype; lse, lse_part [B, H, L] f32 (any strides). The gate, when
// there is one, is applied after the last merge. A side with lse = −inf (no keys, or all masked
// with −inf) contributes nothing; both −inf leaves (a, lse) unchanged. Merging the attention over
// keys K₁ with that over K₂ gives the attention over K₁ ∪ K₂ up to fp32 rounding (a few ulps per
// merge). No autograd (inference). CUDA: one thread per (b, h, l) row, the same fp32 operations.
void attention_combine(const Tensor& a, const Tensor& lse, const Tensor& a_part, const Tensor& lse_part);

struct AttentionGrads {
  Tensor dq, dk, dv;           // same logical shapes as q, k, v
  Tensor dgate;                // when gated
  std::vector<Tensor> dbias;   // one per bias (undefined = not needed), f32, shape of the bias
  // Per dbias (empty: none): its values are undefined (a fresh gradient slot) and the op zeroes it
  // before adding; the CUDA backend does so in the preprocess kernel that passes every row anyway,
  // instead of a fill launch of its own.
  std::vector<bool> dbias_zero;
  // Zeroes every dbias that dbias_zero marks (a backend that zeroes none of them in its kernels).
  void zero_fresh_dbias() const {
    for (size_t t = 0; t < dbias_zero.size(); ++t)
      if (dbias_zero[t] && dbias[t].defined()) Tensor(dbias[t]).zero_();
  }
};

// `a_or_o`: the pre-gate output a when gated, else o.
void attention_backward(const AttentionInputs& in, const Tensor& a_or_o, const Tensor& lse, const Tensor& d_o,
                        const AttentionGrads& grads);

// AlphaFold2 global attention (Alg. 19, extra-MSA column attention), per batch b (a column):
//   s[b,h,j] = scale · Σ_d q[b,h,d] k[b,j,d] + bias[b,j]       (q: one query per head, mean-pooled
//   p = softmax_j s,  a[b,h,:] = Σ_j p[b,h,j] v[b,j,:]           over the sequences by the caller)
//   o[b,j,h,:] = sigmoid(g[b,j,h,:]) ⊙ a[b,h,:]                  (k, v shared by all heads)
// q: [B,H,D], k, v: [B,S,D], bias: [B,S] (mask bias; may be undefined = 0), g, o: [B,S,H,D]
// (strided, last-dim stride 1); a: [B,H,D] saved (written by the forward). Same dtype for all.
void global_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& g, float scale, const Tensor& o, const Tensor& a);
// Gradients for q, k, v, g (overwritten); bias gets no gradient (it is a mask).
void global_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                               const Tensor& g, float scale, const Tensor& a, const Tensor& d_o, const Tensor& dq,
                               const Tensor& dk, const Tensor& dv, const Tensor& dg);

}  // namespace foldcore::ops
