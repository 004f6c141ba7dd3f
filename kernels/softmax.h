// Softmax over the last dim and softmax cross-entropy.
//
//   y[r,:] = softmax(x[r,:])            backward: dx[r,c] = y[r,c] (dy[r,c] − Σ_c' dy[r,c'] y[r,c'])
//
// Cross-entropy with hard labels (BERT masked LM, NSP) or soft labels (AlphaFold distogram,
// masked MSA, pLDDT, PAE heads: one-hot or smoothed targets):
//   hard: loss[r] = w[r] · (lse(x[r,:]) − x[r, label[r]]),  label[r] < 0 ⇒ ignored (loss 0, grad 0)
//   soft: loss[r] = w[r] · (Σ_c t[r,c] · lse(x[r,:]) − Σ_c t[r,c] x[r,c]) = −w[r] Σ_c t[r,c] log softmax(x)[r,c]
//         (t rows need not sum to 1; for rows that do, this is lse − Σ t·x)
//   dlogits[r,c] = w[r] · (softmax(x)[r,c] · Σ_c t[r,c] − t[r,c]) · dscale   (hard: t = onehot)
// Computed in one fused pass (forward and gradient together). x, dlogits: [rows..., C]
// f32/bf16/f16; labels i32/i64 [rows]; targets [rows..., C] same dtype as x or f32; weights f32
// [rows] optional (1 when undefined); loss f32 [rows]. dlogits optional (undefined: forward only).
// Exactly one of labels / targets is given. Labels must be < C (checked on CPU; on CUDA an
// out-of-range label yields a NaN loss for that row rather than a read out of bounds).
#pragma once

#include "core/tensor.h"

namespace foldcore::ops {

void softmax_forward(const Tensor& x, const Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);

struct CrossEntropyArgs {
  Tensor labels;    // hard labels, or
  Tensor targets;   // soft targets
  Tensor weights;   // optional per-row weights
  float dscale = 1.f;  // multiplies dlogits (e.g. 1/num_masked for a mean)
};

void softmax_cross_entropy(const Tensor& logits, const CrossEntropyArgs& args, const Tensor& loss,
                           const Tensor& dlogits = {});

}  // namespace foldcore::ops
