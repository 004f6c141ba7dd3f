// Elementwise ops, fused where they occur together in AlphaFold/BERT layers. All tensors
// contiguous, same shape unless stated; f32/bf16/f16 with fp32 math. "bias" is [C] broadcast
// over the last dim. Random masks come from Philox (core/philox.h) addressed by
// (seed, offset, element index), so CPU and CUDA agree and the backward regenerates the mask.
// All float operands of one call share one dtype (except dbias, f32); an output may alias an
// input of the same shape (each element is read before it is written).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace foldcore::ops {

// out = a + b;  out = a * b;  out = alpha * a + beta * b.  b may have any strides and any shape
// that broadcasts to a's (it is expand()ed); a and out contiguous.
void add(const Tensor& a, const Tensor& b, const Tensor& out);
// dst += src, both contiguous, one shape; src in dst's dtype, or a 16-bit one when dst is f32 (a
// bf16 gradient added into an fp32 one: on CUDA one kernel reads it as it is, instead of a
// conversion and an add). The same values as add(dst, src.to(dst.dtype()), dst).
void add_into(const Tensor& dst, const Tensor& src);
// mul also takes mixed dtypes, where autocast meets an fp32 factor: a 16-bit a with an fp32 b into
// an fp32 out (out = float(a)·b: the values of converting a first, which is exact), or fp32 a and b
// into a 16-bit out (the fp32 product rounded once, as the product then a conversion). The outer
// product mean's bf16 update times its fp32 normaliser, and that product's gradient for the update,
// each in one pass instead of a conversion and a multiply.
void mul(const Tensor& a, const Tensor& b, const Tensor& out);
void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out);
void scale(const Tensor& x, float s, const Tensor& out);
// out = 1 / (x + eps) (IEEE division in fp32): normalisers made on the tensors' device (the outer
// product mean's 1/(ε + Σ_s mask_si mask_sj), the global attention's 1/(Σ mask + ε)) without a
// copy to the host, which would wait for the device's queue.
void reciprocal_shift(const Tensor& x, float eps, const Tensor& out);

// Activations. gelu is the exact form 0.5·x·(1 + erf(x/√2)) (BERT, MLPerf).
//   relu'(x) = [x > 0];  gelu'(x) = Φ(x) + x·φ(x).
void relu_forward(const Tensor& x, const Tensor& y);
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);
void sigmoid_forward(const Tensor& x, const Tensor& y);
void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);  // dx = dy·y(1−y)

// Sigmoid gating: out = sigmoid(g) ⊙ x;  dx = dout ⊙ sigmoid(g),  dg = dout ⊙ x ⊙ σ(g)(1−σ(g)).
void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& out);
void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dout, const Tensor& dg,
                           const Tensor& dx);

// The triangle update's masked, gated edge, channel-major (AlphaFold2 Alg. 11/12 lines 2-3, laid
// out for the per-channel contraction), in one pass:
//   out[c, i, k] = T( T(σ(g[i, k, c]) · p[i, k, c]) · m[i, k] )
// the values of sigmoid_gate_forward, then mul by the mask, then a permute to [C, N1, N2] made
// contiguous. g, p: [N1, N2, C] contiguous, one float dtype; m: [N1, N2] contiguous, that dtype;
// out: [C, N1, N2] contiguous, that dtype. Its backward from dout [C, N1, N2] is the composition's
// too: d = T(dout[c, i, k] · m[i, k]), s = σ(g), dg = T(d · p · s(1−s)), dp = T(d · s), dg and dp
// [N1, N2, C] contiguous.
void masked_gate_channel_major_forward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& out);
void masked_gate_channel_major_backward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                        const Tensor& dg, const Tensor& dp);

// Dropout with an optionally shared mask. `shared_dims` lists axes along which the mask is
// broadcast (AlphaFold: row-wise dropout shares over axis −3 (rows of the MSA / pair), column-wise
// over axis −2). The mask value at index i is philox_keep(seed, offset, idx') where idx' is the
// flat index of i with the shared axes set to 0. Kept elements are scaled by 1/(1−p).
struct DropoutArgs {
  float p = 0.f;
  uint64_t seed = 0;
  uint64_t offset = 0;
  std::vector<int> shared_dims;
  int64_t index_base = 0;  // added to every mask index (kernels/dropout_mask.h): a slab's part of a larger mask
};

// out = residual + dropout(x + bias).  bias (optional [C]) and residual (optional) may be
// undefined; out may alias residual (in-place residual update). Mixed, without bias: a 16-bit x
// into an fp32 out (and residual), a bf16 update added to an fp32 stream, the values of converting
// x to fp32 first (exact) and adding in fp32; or an fp32 x into a 16-bit out (and residual), an
// fp32 update added to a bf16 stream, the sum taken in fp32 and rounded once to out's dtype.
void bias_dropout_residual_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                   const DropoutArgs& d, const Tensor& out);
// dx = dropout_mask ⊙ dout / (1−p);  dbias (f32 [C], ACCUMULATED) = Σ_rows dx.
// dresidual = dout (the caller reuses dout; nothing is written for it). Mixed (the forward's): an
// fp32 dout into a 16-bit dx, each value rounded once, or a 16-bit dout into an fp32 dx (exact
// before the dropout scale); no dbias then.
void bias_dropout_residual_backward(const Tensor& dout, const DropoutArgs& d, const Tensor& dx,
                                    const Tensor& dbias);

}  // namespace foldcore::ops
