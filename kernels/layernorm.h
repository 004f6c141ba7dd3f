// LayerNorm over the last dim C (fp32 statistics whatever the storage dtype):
//
//   mean[r] = (1/C) Σ_c x[r,c]           rstd[r] = 1 / sqrt( (1/C) Σ_c (x[r,c]-mean[r])² + eps )
//   y[r,c]  = (x[r,c] - mean[r]) * rstd[r] * gamma[c] + beta[c]
//
// Backward (x̂ = (x-mean)·rstd, ĝ = dy·gamma):
//   dx[r,c]   = rstd[r] · ( ĝ[r,c] - (1/C)Σ_c ĝ[r,c] - x̂[r,c]·(1/C)Σ_c ĝ[r,c]·x̂[r,c] )
//   dgamma[c] += Σ_r dy[r,c]·x̂[r,c]        dbeta[c] += Σ_r dy[r,c]
// x, y, dy, dx: [rows..., C] contiguous, f32/bf16/f16; gamma, beta: [C] f32 (master weights);
// mean, rstd: [rows] f32. dgamma/dbeta are f32 and ACCUMULATED (+=); dx is overwritten, or with
// accumulate_dx the gradient (rounded to dx's dtype first) is added to what dx holds: the same
// bits as writing it to a temporary and adding that (a gradient summed over a residual stream's
// uses, without the temporary's pass).
// y (and so dy) may be 16-bit where x is f32: y is computed in fp32 and rounded once as it is
// stored, the same values as converting an f32 y; the LayerNorm before a bf16 GEMM under autocast
// writes what the GEMM reads, with no f32 y and no conversion pass. Conversely dy may be f32 where
// x is 16-bit (backward only): the fp32 gradient the GEMMs reading a bf16 y hand back, read as it
// is (no rounding pass to bf16 before the backward), dx written in x's dtype.
#pragma once

#include "core/tensor.h"
#include "kernels/elementwise.h"

namespace foldcore::ops {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        bool accumulate_dx = false);

// Channel-major LayerNorm (the triangle multiplication's centre LayerNorm, whose input, the
// per-channel contraction, comes out [C, rows...]): x is [C, rows...] contiguous and normalised over
// its FIRST dim; y and dy are [rows..., C] contiguous; dx is x's shape. The same values as
// layernorm_forward / layernorm_backward of x.permute(channels last).contiguous(), with dx
// permuted back (the CPU computes exactly that; CUDA, for C ≤ 128, reads x and writes dx in their
// layout through shared-memory tiles, so neither transposed copy is made), and the same dtype rules
// (y 16-bit for an f32 x; dy f32 beside a 16-bit x; accumulate_dx).
// y's shape for an x of shape [C, rows...]: [rows..., C].
Shape layernorm_channel_major_y_shape(const Shape& x);
void layernorm_channel_major_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd);
void layernorm_channel_major_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      bool accumulate_dx = false);

// LayerNorm and a narrow projection of its output laid out head-major (AlphaFold's pair bias: a
// [c_z → H] projection of LN(z), read by the attention as [H, N, N]):
//   y[r, c]   = LN(x[r, :])·γ + β, rounded to w's dtype (the GEMM's: as the composition stores it)
//   out[h, r] = Σ_c y[r, c]·w[c, h]      (fp32 sums; out in w's dtype)
// x [rows..., C] contiguous (f32/bf16/f16); w [C, H] contiguous (f32, or the GEMM dtype's copy of
// the weight); out [H, rows...] of w's dtype; mean, rstd [rows] f32. The backward, from dout
// [H, rows...] (w's dtype, or f32: an attention's fp32 bias gradient, read as it is):
//   dy[r, c] = Σ_h dout[h, r]·w[c, h] (fp32),  dw[c, h] += Σ_r y[r, c]·dout[h, r],
// then LayerNorm's backward from dy (dx, added to what dx holds with accumulate_dx; dγ, dβ
// accumulated); y is made again from x (eps as in the forward). The CPU composes LayerNorm, GEMMs
// and transposed copies; CUDA, for
// C ≤ 128 and H ≤ 8, one kernel each way (plus one adding the parameters' partials in order), so
// neither y nor a [rows, H] copy exists, and the composition on the device beyond.
// out's shape for an x of shape [rows..., C] and H heads: [H, rows...].
Shape layernorm_project_heads_out_shape(const Shape& x, int64_t heads);
void layernorm_project_heads_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& w, const Tensor& out, const Tensor& mean, const Tensor& rstd);
void layernorm_project_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      float eps, const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                      const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& dw,
                                      bool accumulate_dx = false);

// Fused post-LN residual block (BERT): one pass per row computes
//   h[r,c] = residual[r,c] + dropout(x[r,c] + bias[c])        (h rounded to x's dtype, as stored)
//   y[r,c] = LayerNorm(h)[r,c]·gamma[c] + beta[c]              (statistics of h as above)
// with the dropout mask of bias_dropout_residual (kernels/elementwise.h, kernels/dropout_mask.h:
// element (r,c) keeps iff philox_keep(seed, offset, mask_index(r·C + c), p); shared_dims allowed),
// so it equals bias_dropout_residual_forward followed by layernorm_forward with the same args.
// residual, h: [rows..., C] contiguous, one float dtype T; x and y: the same shape, each T or, for
// an f32 T, a 16-bit dtype (a pre-LN stream: a bf16 update of the fp32 stream, and the next
// module's LayerNorm straight into its GEMMs' dtype; x's value is exact in fp32, y is rounded once
// as stored); bias: optional [C] of x's dtype; gamma, beta: [C] f32; mean, rstd: [rows] f32. h
// (the pre-LN sum the backward needs, and the stream of a pre-LN model) is optional (undefined: not
// stored, e.g. inference) and may alias residual (in-place residual update).
void bias_dropout_residual_layernorm_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                             const DropoutArgs& d, const Tensor& gamma, const Tensor& beta,
                                             float eps, const Tensor& h, const Tensor& y, const Tensor& mean,
                                             const Tensor& rstd);

// Backward of the above from dy and the saved h, mean, rstd:
//   dh = LayerNorm backward (see above);  dresidual = dh;  dx = mask ⊙ dh / (1−p) (dh rounded to the
//   storage dtype first, as the unfused composition stores it);  dbias[c] += Σ_r dx[r,c];
//   dgamma[c] += Σ_r dy·ĥ;  dbeta[c] += Σ_r dy.
// dx, dresidual: like h, either may be undefined (not written); dbias (f32 [C], accumulated) is
// optional and needs dx; dgamma/dbeta are required (f32 [C], accumulated).
void bias_dropout_residual_layernorm_backward(const Tensor& dy, const Tensor& h, const Tensor& gamma,
                                              const Tensor& mean, const Tensor& rstd, const DropoutArgs& d,
                                              const Tensor& dx, const Tensor& dbias, const Tensor& dresidual,
                                              const Tensor& dgamma, const Tensor& dbeta);

// On CUDA, whether the backward forms dgamma/dbeta (and the fused op's dbias) in its dx pass where
// a warp's row fits (C ≤ 512 with 16-byte vectors; the default), reading x and dy once, or in a
// second pass over them (the form for longer rows). The two sum the rows in other orders (the
// same to fp32 rounding). FOLDCORE_LN_BACKWARD=one_pass|two_pass sets the initial choice;
// bench_layernorm times both. No effect on the CPU.
void set_layernorm_backward_one_pass(bool on);
bool layernorm_backward_one_pass();

}  // namespace foldcore::ops
