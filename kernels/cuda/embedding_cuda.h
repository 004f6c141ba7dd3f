// CUDA implementations of kernels/embedding.h (shapes validated by the dispatcher; index ranges
// are checked through a device flag, synchronising).
#pragma once

#include "core/tensor.h"

namespace foldcore::ops::cuda {

void embedding_forward(const Tensor& table, const Tensor& idx, const Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& idx, const Tensor& dtable);
void one_hot(const Tensor& idx, int64_t num_classes, const Tensor& out);

}  // namespace foldcore::ops::cuda
