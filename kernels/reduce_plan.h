// A reduction split into kept and reduced axes, shared by the CPU and CUDA reductions.
// Axes of each group keep x's order; adjacent axes that are contiguous with each other in x are
// merged, so the common cases collapse to 1-2 dims ([R, K] column sums, [K, R] row sums).
#pragma once

#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "core/tensor.h"

namespace foldcore::ops {

struct ReduceGroup {
  int ndim = 0;  // 0 means a single element
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

struct ReducePlan {
  ReduceGroup kept;     // indexes outputs (row-major over the kept axes)
  ReduceGroup reduced;  // summed over
  // The layout of x seen through (kept, reduced) with both groups contiguous in x:
  //   kReducedOuter: x ≅ [R, K] row-major (reduced axes lead, kept axes trail),
  //   kReducedInner: x ≅ [K, R] row-major, kGeneral: anything else.
  enum Layout { kGeneral, kReducedOuter, kReducedInner } layout = kGeneral;
};

// `axes` normalised, validated (range, repeats) by the caller.
ReducePlan make_reduce_plan(const Tensor& x, const std::vector<bool>& is_reduced);

}  // namespace foldcore::ops
