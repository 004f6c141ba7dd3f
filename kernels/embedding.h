// Gather / embedding, its scatter-add backward, and one-hot.
//   out[r,:] = table[idx[r], :]                       (idx i32/i64 [rows...], table [V, C])
//   dtable[idx[r], :] += dout[r,:]                    (dtable f32, ACCUMULATED)
//   onehot[r, c] = [idx[r] == c]                      (out [rows..., C] float; idx outside [0,C) → zeros)
// table/out/dout: contiguous, out and dout of table's dtype (dout any float dtype).
// An index outside [0, V) is an Error naming the index and its position. On CUDA the kernel
// clamps it (no out-of-bounds access), records it in a device flag, and the op then synchronises
// to read the flag and throw: embedding_forward/backward are the only ops of this family that
// synchronise. The CUDA backward sorts the indices (stable radix sort) and sums each index's rows
// in row order, so dtable is deterministic (no atomics).
#pragma once

#include "core/tensor.h"

namespace foldcore::ops {

void embedding_forward(const Tensor& table, const Tensor& idx, const Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& idx, const Tensor& dtable);
void one_hot(const Tensor& idx, int64_t num_classes, const Tensor& out);

}  // namespace foldcore::ops
