// CUDA implementations of kernels/reduce.h (validated by the dispatcher). Deterministic: fixed
// grid shapes and tree orders that depend only on the sizes. Host-returning ones synchronise.
#pragma once

#include "core/tensor.h"
#include "kernels/reduce_plan.h"

namespace foldcore::ops::cuda {

// out[o] = (accumulate ? out[o] : 0) + scale · Σ_r x[kept(o), reduced(r)]
void reduce_sum(const Tensor& x, const ReducePlan& plan, float scale, bool accumulate, const Tensor& out);
// out[b, o] += Σ_r x[b, r, o] over `batches` row-major [R, K] problems one after another in x
// (plan: one of them, kReducedOuter); out f32 [batches, K]. One launch; each batch the bits of its own.
void reduce_sum_batched(const Tensor& x, const ReducePlan& plan, int64_t batches, const Tensor& out);
double sum_squares(const Tensor& x);
double max_abs(const Tensor& x);

}  // namespace foldcore::ops::cuda
