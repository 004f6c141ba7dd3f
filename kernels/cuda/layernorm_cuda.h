// CUDA backend of LayerNorm and the fused bias + dropout + residual + LayerNorm
// (kernels/layernorm.h); same contract as the CPU backend (kernels/cpu/layernorm_cpu.h).
#pragma once

#include "core/tensor.h"
#include "kernels/dropout_mask.h"
#include "kernels/elementwise.h"

namespace foldcore::ops::cuda {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
void bias_dropout_residual_layernorm_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                             const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& gamma,
                                             const Tensor& beta, float eps, const Tensor& h, const Tensor& y,
                                             const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
void layernorm_backward(const Tensor& dy, const Tensor& h, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dh, const Tensor& dx, const Tensor& dbias,
                        const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& dgamma, const Tensor& dbeta,
                        int64_t rows, int64_t c, bool accumulate_dh = false);

// Channel-major LayerNorm (kernels/layernorm.h): x [c][rows], y and dy [rows][c], dx [c][rows],
// through shared-memory tiles of 32 rows; for c ≤ 128 (layernorm_channel_major_tiled: two fp32
// tiles of [c][33] in the backward's 48 KB), the dispatcher composes the row kernels otherwise.
bool layernorm_channel_major_tiled(int64_t c);
void layernorm_channel_major_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
void layernorm_channel_major_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      int64_t rows, int64_t c, bool accumulate_dx);

// LayerNorm and a head-major projection (kernels/layernorm.h, layernorm_project_heads_*): one
// kernel each way for c ≤ 128 and heads ≤ 8 (layernorm_project_heads_fused); x [rows][c], w
// [c][heads], out and dout [heads][rows].
bool layernorm_project_heads_fused(int64_t c, int64_t heads);
void layernorm_project_heads_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& w, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                     int64_t rows, int64_t c, int64_t heads);
void layernorm_project_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& w, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta, const Tensor& dw, int64_t rows,
                                      int64_t c, int64_t heads, bool accumulate_dx);

}  // namespace foldcore::ops::cuda
