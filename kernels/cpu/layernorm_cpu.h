// CPU backend of LayerNorm (kernels/layernorm.h). Shapes are validated by the dispatcher; x, y,
// dy, dx are contiguous [rows, c].
#pragma once

#include "core/tensor.h"

namespace foldcore::ops::cpu {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, int64_t rows,
                        int64_t c);

}  // namespace foldcore::ops::cpu
