// CUDA backend of softmax / softmax cross-entropy (kernels/softmax.h). Validated by the dispatcher.
#pragma once

#include "kernels/softmax.h"

namespace foldcore::ops::cuda {

void softmax_forward(const Tensor& x, const Tensor& y, int64_t rows, int64_t c);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t rows, int64_t c);
void softmax_cross_entropy(const Tensor& logits, const CrossEntropyArgs& args, const Tensor& loss,
                           const Tensor& dlogits, int64_t rows, int64_t c);

}  // namespace foldcore::ops::cuda
