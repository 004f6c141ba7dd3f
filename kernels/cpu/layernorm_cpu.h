// CPU backend of LayerNorm and the fused bias + dropout + residual + LayerNorm
// (kernels/layernorm.h). Shapes are validated by the dispatcher; every tensor is contiguous
// [rows, c] (or [c] / [rows]); undefined optional outputs are not written.
#pragma once

#include "core/tensor.h"
#include "kernels/dropout_mask.h"
#include "kernels/elementwise.h"

namespace foldcore::ops::cpu {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
void bias_dropout_residual_layernorm_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                             const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& gamma,
                                             const Tensor& beta, float eps, const Tensor& h, const Tensor& y,
                                             const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
// One backward for both ops: dh (optional) = LayerNorm input gradient; dx (optional) = mask ⊙ dh
// / (1−p) (d.p == 0: dh); dbias (optional, needs dx) += Σ_rows dx; dgamma/dbeta accumulated.
// Plain LayerNorm: h = its input x, dh = its dx, no dx/dbias; its y and dy may be 16-bit for an
// f32 x, and accumulate_dh adds dh (rounded to h's dtype) to what dh holds.
void layernorm_backward(const Tensor& dy, const Tensor& h, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dh, const Tensor& dx, const Tensor& dbias,
                        const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& dgamma, const Tensor& dbeta,
                        int64_t rows, int64_t c, bool accumulate_dh = false);

}  // namespace foldcore::ops::cpu
