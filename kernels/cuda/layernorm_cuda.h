// CUDA backend of LayerNorm (kernels/layernorm.h). Validated by the dispatcher.
#pragma once

#include "core/tensor.h"

namespace foldcore::ops::cuda {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, int64_t rows,
                        int64_t c);

}  // namespace foldcore::ops::cuda
