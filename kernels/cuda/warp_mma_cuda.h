// CUDA implementation of kernels/warp_mma.h (inputs validated by the dispatcher).
#pragma once

#include "core/tensor.h"

namespace foldcore::ops::cuda {

void warp_mma_m16n8k16(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d);

}  // namespace foldcore::ops::cuda
