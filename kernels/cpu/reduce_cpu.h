// CPU reference implementations of kernels/reduce.h (arguments validated by the dispatcher).
#pragma once

#include "core/tensor.h"
#include "kernels/reduce_plan.h"

namespace foldcore::ops::cpu {

// out[o] = (accumulate ? out[o] : 0) + scale · Σ_r x[kept(o), reduced(r)]
void reduce_sum(const Tensor& x, const ReducePlan& plan, float scale, bool accumulate, const Tensor& out);
// out[b, o] += Σ_r x[b, r, o]: reduce_sum of each batch x[b] (plan: one of them) into out[b].
void reduce_sum_batched(const Tensor& x, const ReducePlan& plan, int64_t batches, const Tensor& out);
double sum_squares(const Tensor& x);
double max_abs(const Tensor& x);

}  // namespace foldcore::ops::cpu
