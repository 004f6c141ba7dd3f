// Gather / embedding, its scatter-add backward, and one-hot.
//   out[r,:] = table[idx[r], :]                       (idx i32/i64 [rows...], table [V, C])
//   dtable[idx[r], :] += dout[r,:]                    (dtable f32, ACCUMULATED; atomic on CUDA)
//   onehot[r, c] = [idx[r] == c]                      (out [rows..., C] float; idx outside [0,C) → zeros)
// An index outside [0, V) is an Error on CPU and is clamped-then-reported via a device flag on CUDA.
#pragma once

#include "core/tensor.h"

namespace foldcore::ops {

void embedding_forward(const Tensor& table, const Tensor& idx, const Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& idx, const Tensor& dtable);
void one_hot(const Tensor& idx, int64_t num_classes, const Tensor& out);

}  // namespace foldcore::ops
