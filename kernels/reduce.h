// Reductions (fp32 accumulation on CUDA, double on the CPU reference; fixed summation order on
// both backends, so results are run-to-run deterministic).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/gemm.h"

namespace foldcore::ops {

// out = Σ over `axes` of x, keeping the other axes in order. x: any float dtype and strides.
// out: contiguous, any float dtype, shape = x's shape without `axes` (shape {} or [1] when all
// are reduced) or, keepdim-style, x's shape with `axes` set to 1. Negative axes allowed, repeats
// are an Error. accumulate: out += instead of =.
void sum(const Tensor& x, const std::vector<int>& axes, const Tensor& out, bool accumulate = false);
// Σ over all but the last dim: x [rows..., C] (contiguous) → out [C] (bias gradients).
// out f32 accumulated.
void sum_rows_accumulate(const Tensor& x, const Tensor& out);
// The same for B problems at once: x [B, R, C] (contiguous) → out [B, C] (f32 contiguous,
// accumulated); out[b] gets the bits sum_rows_accumulate(x[b], out[b]) would give (on CUDA one
// launch for all B: the bias gradients of projections whose gradients and biases lie back to back).
void sum_rows_accumulate_batched(const Tensor& x, const Tensor& out);
// An activation's backward and its bias gradient: dx = act'(in) ⊙ dy (relu: in is the output y;
// gelu: the pre-activation) and dbias += Σ over all but the last dim of dx. in, dy, dx contiguous,
// of one shape and float dtype; dbias contiguous f32 [C]. The values of relu_backward /
// gelu_backward followed by sum_rows_accumulate(dx, dbias) (the same bits); on CUDA one pass that
// reads in and dy once and writes dx as it sums it, where C is a multiple of 16 bytes' elements
// and the tensors are 16-byte aligned (else the two ops).
void activation_backward_sum_rows(Activation act, const Tensor& in, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dbias);
// Mean over `axes` (AlphaFold's mean-pooled query, outer-product-mean normalisation); out as in sum.
void mean(const Tensor& x, const std::vector<int>& axes, const Tensor& out);
// Σ x² over all elements, returned as double on the host (synchronising): gradient norms.
double sum_squares(const Tensor& x);
// Max |x| over all elements (host, synchronising). NaN anywhere gives NaN; 0 for an empty x.
double max_abs(const Tensor& x);

// CUDA: whether column sums of a row-major [R, K] (bias gradients) read 16 bytes per load where K
// and the pointer allow (the default) or one element per thread; the two sum in different fixed
// orders (the same to fp32 rounding). For tests and benchmarks; the CPU ignores it.
void set_col_sum_vec(bool on);
bool col_sum_vec();

}  // namespace foldcore::ops
