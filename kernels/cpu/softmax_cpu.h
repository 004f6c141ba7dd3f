// CPU backend of softmax / cross-entropy (kernels/softmax.h). Validated by the dispatcher; all
// row tensors are contiguous [rows, c].
#pragma once

#include "kernels/softmax.h"

namespace foldcore::ops::cpu {

void softmax_forward(const Tensor& x, const Tensor& y, int64_t rows, int64_t c);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t rows, int64_t c);
void softmax_cross_entropy(const Tensor& logits, const CrossEntropyArgs& args, const Tensor& loss,
                           const Tensor& dlogits, int64_t rows, int64_t c);

}  // namespace foldcore::ops::cpu
