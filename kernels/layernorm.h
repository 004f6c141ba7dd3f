// LayerNorm over the last dim C (fp32 statistics whatever the storage dtype):
//
//   mean[r] = (1/C) Σ_c x[r,c]           rstd[r] = 1 / sqrt( (1/C) Σ_c (x[r,c]-mean[r])² + eps )
//   y[r,c]  = (x[r,c] - mean[r]) * rstd[r] * gamma[c] + beta[c]
//
// Backward (x̂ = (x-mean)·rstd, ĝ = dy·gamma):
//   dx[r,c]   = rstd[r] · ( ĝ[r,c] - (1/C)Σ_c ĝ[r,c] - x̂[r,c]·(1/C)Σ_c ĝ[r,c]·x̂[r,c] )
//   dgamma[c] += Σ_r dy[r,c]·x̂[r,c]        dbeta[c] += Σ_r dy[r,c]
// x, y, dy, dx: [rows..., C] contiguous, f32/bf16/f16; gamma, beta: [C] f32 (master weights);
// mean, rstd: [rows] f32. dgamma/dbeta are f32 and ACCUMULATED (+=); dx is overwritten.
#pragma once

#include "core/tensor.h"

namespace foldcore::ops {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

}  // namespace foldcore::ops
