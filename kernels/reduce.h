// Reductions (fp32 accumulation).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace foldcore::ops {

// out = Σ over `axes` of x, keeping the other axes in order (out has x.dim() − |axes| dims, or
// [1]... when all are reduced use shape {}), out dtype any float. accumulate: out += instead of =.
void sum(const Tensor& x, const std::vector<int>& axes, const Tensor& out, bool accumulate = false);
// Σ over all but the last dim: x [rows..., C] → out [C] (bias gradients). out f32 accumulated.
void sum_rows_accumulate(const Tensor& x, const Tensor& out);
// Mean over `axes` (AlphaFold's mean-pooled query, outer-product-mean normalisation).
void mean(const Tensor& x, const std::vector<int>& axes, const Tensor& out);
// Σ x² over all elements, returned as double on the host (synchronising): gradient norms.
double sum_squares(const Tensor& x);
// Max |x| over all elements (host).
double max_abs(const Tensor& x);

}  // namespace foldcore::ops
