// The attention backward composed of cuBLASLt products (ops::set_attention_bwd_composed): after the
// preprocess (dA = dO ⊙ σ(g) into the bf16 scratch, delta, dg; attention_bwd_cuda.cu), per chunk of
// batch rows b, with the (b, h) heads as one strided batch:
//   S  = scale · Q Kᵀ                        fp32 [b·h, Lq, Lk]   (GEMM, alpha = scale)
//   P  = exp(S + Σ_t bias_t − lse)           bf16                  (attention_scores_pass_kernel)
//   dV = Pᵀ dA                                                     (GEMM)
//   dP = dA Vᵀ                               fp32, into S's buffer (GEMM)
//   dS = P ⊙ (dP − delta)                    bf16, in place of P   (the same kernel's kGrad form)
//   dbias_t += dS summed over bias_t's size-1 dims                 (ops::sum / ops::add_into)
//   dQ = scale · dS K,  dK = scale · dSᵀ Q                         (GEMMs, alpha = scale)
// The products run on the tensor cores at cuBLASLt's speed, and the per-score work is two
// memory-bound passes, where the fused main kernel does five products per tile with its per-score
// work between them. The price is the scores' memory: 6 bytes per score and head of a chunk
// (fp32 S/dP, bf16 P/dS), chunked over b to at most attention_bwd_composed_bytes(), and the
// copies of q, k, v (and of dq, dk, dv back) where they are not [B, H, L, D] contiguous.
// P is rounded to bf16 before dS = P ⊙ (dP − delta) (the fused kernel keeps it in fp32), so dS,
// dbias and dq/dk differ from the fused kernel's by that rounding (tests: AttentionCuda.*/bf16_mma_composed*,
// AttentionCudaForms.ComposedBackwardRunsItsProductsAndMatchesTheFusedKernel).
#include <algorithm>
#include <utility>
#include <vector>

#include "core/profile.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"

namespace foldcore::ops::cuda {
namespace detail {
namespace {

constexpr int kRowWarps = 8;  // a warp per score row, 8 rows per block

// The global (b, h, i) of row r of the chunk that starts at batch row b0.
struct ScoreRow {
  int b, h, i;
  int64_t global;  // (b·H + h)·Lq + i: the row of delta [B, H, Lq]
};
__device__ __forceinline__ ScoreRow score_row(const AttnParams& p, int b0, int64_t r) {
  ScoreRow s;
  s.i = static_cast<int>(r % p.Lq);
  const int64_t bh = r / p.Lq;
  s.h = static_cast<int>(bh % p.H);
  s.b = b0 + static_cast<int>(bh / p.H);
  s.global = (static_cast<int64_t>(s.b) * p.H + s.h) * p.Lq + s.i;
  return s;
}

// One pass over the chunk's score rows r (a warp per row), in place of the fused kernel's per-score
// work. kGrad = false: P[r, j] = exp(S[r, j] + Σ_t bias_t[b, h, i, j] − lse[b, h, i]) from S (`x`,
// already scaled); a row with lse = −inf (every score −inf) gives 0, as the fused kernels do.
// kGrad = true: dS[r, j] = P[r, j] · (dP[r, j] − delta[b, h, i]) from dP (`x`), written over P.
template <typename T, bool kGrad>
__global__ void attention_scores_pass_kernel(const AttnParams p, int b0, int64_t rows, const float* __restrict__ x,
                                             T* __restrict__ prob) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const ScoreRow sr = score_row(p, b0, r);
  const float* xrow = x + r * p.Lk;
  T* prow = prob + r * p.Lk;
  if constexpr (kGrad) {
    const float delta = p.delta[sr.global];
    for (int j = lane; j < p.Lk; j += 32) prow[j] = from_f32<T>(to_f32(prow[j]) * (xrow[j] - delta));
  } else {
    const float lse = p.lse[sr.b * p.lse_s[0] + sr.h * p.lse_s[1] + sr.i * p.lse_s[2]];
    const bool empty = isinf(lse) && lse < 0.f;
    for (int j = lane; j < p.Lk; j += 32) {
      const float bias = bias_sum<T>(p, sr.b, sr.h, sr.i, j);
      prow[j] = from_f32<T>(empty ? 0.f : __expf(xrow[j] + bias - lse));
    }
  }
}

// t as a [B·H, L, D] strided batch (contiguous [B, H, L, D]), or a contiguous copy of it.
Tensor heads_batch(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  return c.view({t.size(0) * t.size(1), t.size(2), t.size(3)});
}

// Where a GEMM writes the gradient of a [B, H, L, D] tensor: the gradient itself when it is
// contiguous, else a contiguous temporary copied into it at the end.
Tensor gemm_target(const Tensor& grad) {
  if (!grad.defined()) return Tensor();
  return grad.is_contiguous() ? grad : Tensor::empty(grad.shape(), grad.dtype(), grad.device());
}

// dbias += dS [n, H, Lq, Lk] of batch rows [b0, b0 + n) summed over dbias's size-1 dims.
void add_dbias(const Tensor& ds, const Tensor& dbias, int b0, int64_t n, int64_t B) {
  const Tensor target = dbias.size(0) == B && B > 1 ? dbias.narrow(0, b0, n) : dbias;
  std::vector<int> axes;
  for (int d = 0; d < 4; ++d)
    if (target.size(d) == 1 && ds.size(d) > 1) axes.push_back(d);
  Tensor out = target.is_contiguous() ? target : Tensor::empty(target.shape(), DType::f32, target.device());
  if (!target.is_contiguous()) out.copy_(target);
  if (axes.empty()) add_into(out, ds.view(out.shape()));
  else sum(ds, axes, out, /*accumulate=*/true);
  if (!target.is_contiguous()) Tensor(target).copy_(out);
}

}  // namespace

void run_attention_bwd_composed(const AttentionInputs& in, const AttnParams& p, const AttentionGrads& grads,
                                const Tensor& da, cudaStream_t stream) {
  const int B = p.B, H = p.H, Lq = p.Lq, Lk = p.Lk, D = p.D;
  const Device dev = in.q.device();
  const Tensor q = heads_batch(in.q), k = heads_batch(in.k), v = heads_batch(in.v);
  const Tensor dA = da.view({static_cast<int64_t>(B) * H, Lq, D});
  const Tensor dq = gemm_target(grads.dq), dk = gemm_target(grads.dk), dv = gemm_target(grads.dv);
  const int64_t per_b = static_cast<int64_t>(H) * Lq * Lk * 6;
  const int64_t chunk = std::clamp<int64_t>(attention_bwd_composed_bytes() / per_b, 1, B);
  const Tensor s_buf = Tensor::empty({chunk * H, Lq, Lk}, DType::f32, dev);
  const Tensor p_buf = Tensor::empty({chunk * H, Lq, Lk}, DType::bf16, dev);
  using T = __nv_bfloat16;
  for (int b0 = 0; b0 < B; b0 += static_cast<int>(chunk)) {
    const int64_t n = std::min<int64_t>(chunk, B - b0), nb = n * H, rows = nb * Lq;
    const int64_t h0 = static_cast<int64_t>(b0) * H;
    const Tensor qc = q.narrow(0, h0, nb), kc = k.narrow(0, h0, nb), vc = v.narrow(0, h0, nb), dac = dA.narrow(0, h0, nb);
    const Tensor s = s_buf.narrow(0, 0, nb), pr = p_buf.narrow(0, 0, nb);
    auto heads = [&](const Tensor& t) { return t.view({t.size(0) * t.size(1), t.size(2), t.size(3)}).narrow(0, h0, nb); };
    GemmArgs scaled_nt;
    scaled_nt.trans_b = true;
    scaled_nt.alpha = p.scale;
    gemm(qc, kc, s, scaled_nt);  // S = scale·Q Kᵀ
    const unsigned grid = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
    launch_kernel<attention_scores_pass_kernel<T, false>>(grid, 32 * kRowWarps, 0, stream, p, b0, rows, s.data<float>(),
                                                          static_cast<T*>(pr.data_ptr()));  // P
    FC_CUDA_CHECK_LAUNCH();
    if (dv.defined()) {
      GemmArgs tn;
      tn.trans_a = true;
      gemm(pr, dac, heads(dv), tn);  // dV = Pᵀ dA
    }
    GemmArgs nt;
    nt.trans_b = true;
    gemm(dac, vc, s, nt);  // dP = dA Vᵀ, over S
    launch_kernel<attention_scores_pass_kernel<T, true>>(grid, 32 * kRowWarps, 0, stream, p, b0, rows, s.data<float>(),
                                                         static_cast<T*>(pr.data_ptr()));  // dS over P
    FC_CUDA_CHECK_LAUNCH();
    const Tensor ds4 = pr.view({n, H, Lq, Lk});
    for (const Tensor& db : grads.dbias)
      if (db.defined()) add_dbias(ds4, db, b0, n, B);
    GemmArgs scaled;
    scaled.alpha = p.scale;
    if (dq.defined()) gemm(pr, kc, heads(dq), scaled);  // dQ = scale·dS K
    if (dk.defined()) {
      GemmArgs scaled_tn = scaled;
      scaled_tn.trans_a = true;
      gemm(pr, qc, heads(dk), scaled_tn);  // dK = scale·dSᵀ Q
    }
  }
  for (const auto& [target, grad] : {std::pair{dq, grads.dq}, std::pair{dk, grads.dk}, std::pair{dv, grads.dv}})
    if (grad.defined() && target.data_ptr() != grad.data_ptr()) Tensor(grad).copy_(target);
}

}  // namespace detail
}  // namespace foldcore::ops::cuda
