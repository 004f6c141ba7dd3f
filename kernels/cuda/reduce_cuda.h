// CUDA implementations of kernels/reduce.h (validated by the dispatcher). Deterministic: fixed
// grid shapes and tree orders that depend only on the sizes. Host-returning ones synchronise.
#pragma once

#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/reduce_plan.h"

namespace foldcore::ops::cuda {

// out[o] = (accumulate ? out[o] : 0) + scale · Σ_r x[kept(o), reduced(r)]
void reduce_sum(const Tensor& x, const ReducePlan& plan, float scale, bool accumulate, const Tensor& out);
// out[b, o] += Σ_r x[b, r, o] over `batches` row-major [R, K] problems one after another in x
// (plan: one of them, kReducedOuter); out f32 [batches, K]. One launch; each batch the bits of its own.
void reduce_sum_batched(const Tensor& x, const ReducePlan& plan, int64_t batches, const Tensor& out);
// dx = act'(in) ⊙ dy and dbias += Σ_rows dx in one pass over [R, K] (act relu or gelu; in, dy, dx
// contiguous, of one dtype; dbias f32 [K]): the bits of relu_backward / gelu_backward followed by
// reduce_sum's column sums of dx. Returns false, having done nothing, where the 16-byte form does
// not apply (K not a multiple of a pack, a pointer off the 16-byte grid, the vector column sums
// switched off): the caller then runs the two ops.
bool activation_backward_sum_rows(Activation act, const Tensor& in, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dbias);
double sum_squares(const Tensor& x);
double max_abs(const Tensor& x);

}  // namespace foldcore::ops::cuda
