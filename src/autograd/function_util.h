// Helpers shared by the Function implementations (internal to src/autograd).
#pragma once

#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "kernels/elementwise.h"

namespace foldcore::autograd::detail {

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
inline Tensor empty_like(const Tensor& t, DType dt) { return Tensor::empty(t.shape(), dt, t.device()); }

// The gradient destination for input i when it is needed, else a scratch buffer (kernels that
// write several gradients at once need every output).
inline Tensor new_grad_or_scratch(BackwardCtx& ctx, int i, const Tensor& like, DType dt) {
  return ctx.needs_grad(i) ? ctx.new_grad(i, dt) : Tensor::empty(like.shape(), dt, like.device());
}
// Input i's gradient so far in `dt` to add into (add = true; BackwardCtx::grad_to_add) where there
// is one, else a new one to overwrite (add = false). Only where needs_grad(i).
inline Tensor grad_to_add_or_new(BackwardCtx& ctx, int i, DType dt, bool& add) {
  Tensor g = ctx.grad_to_add(i, dt);
  add = g.defined();
  return add ? g : ctx.new_grad(i, dt);
}
// Input i's gradient in `dt` to write: its gradient so far to add into (add = true;
// BackwardCtx::grad_to_add) where there is one, else a new one, or scratch shaped like `like` where
// none is needed (the kernel writes it anyway).
inline Tensor grad_to_add_or_scratch(BackwardCtx& ctx, int i, const Tensor& like, DType dt, bool& add) {
  Tensor g = ctx.grad_to_add(i, dt);
  add = g.defined();
  return add ? g : new_grad_or_scratch(ctx, i, like, dt);
}
inline Tensor acc_grad_or_scratch(BackwardCtx& ctx, int i, const Tensor& like, DType dt) {
  return ctx.needs_grad(i) ? ctx.accumulate_grad(i, dt) : Tensor::zeros(like.shape(), dt, like.device());
}

// Σ of `g` (a gradient of a broadcast result) over the axes that `shape` broadcast along, so the
// result has `shape` (NumPy broadcasting: leading axes, and size-1 axes).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

// The kernel dropout args of a spec: p = 0 (identity) without a generator; else a fresh stream
// offset reserved from the generator (a recompute replays it by rewinding the generator).
ops::DropoutArgs dropout_args(const DropoutSpec& d);

// Whether an op may write its output into v's storage (in-place residual update): v's Tensor is
// the only reference to its whole storage and v is not a leaf that needs grad.
bool can_overwrite(const Variable& v);

// Where a residual add (residual + update) writes its sum: residual's own storage where `in_place`
// and can_overwrite allows it, else a new tensor of residual's shape and dtype. Ask before taking
// any other handle on residual's storage (a contiguous view is one): can_overwrite counts them.
Tensor residual_sum_target(const Variable& residual, bool in_place);

// The node bias_dropout_residual records for its output `out` (x, bias and residual as it passes
// them: x uncast in the mixed case), for an op whose kernel made that output itself (the fused
// LayerNorm of residual_layer_norm): the same backward.
Variable record_bias_dropout_residual(const Variable& x, const Variable& bias, const Variable& residual,
                                      const ops::DropoutArgs& args, const Tensor& out);

// The GEMM compute dtype: the autocast dtype when set, else `own`.
inline DType gemm_dtype(DType own) { return autocast_dtype().value_or(own); }

}  // namespace foldcore::autograd::detail
