// Casts of parameters under autocast, made once per scope. Under bf16 autocast every linear casts
// its fp32 master weight and bias to bf16 before its GEMM. In a training step that is the same cast
// of the same weights in the forward, again in every recomputed segment and in every recycling
// iteration, and in a prediction once per iteration: two tiny kernels per linear per pass, which
// on a GPU cost launch time, not bandwidth (the tiny preset's Evoformer forward issued 1,792 casts
// to bf16 against 736 GEMMs; tests/models/test_af2_host_waits_cuda prints the launches).
//
// While a ParamCastScope lives on this thread, cast_param keeps the cast of each parameter (a leaf
// Variable that requires a gradient) and hands the same tensor out again: the same bits, one cast
// per parameter and dtype per scope. The cache holds the source tensor too, so its memory cannot be
// reused by another tensor while the entry exists. Inside a scope the parameters must not change:
// it spans a training step's forward and backward (the optimizer runs after it) or a prediction.
// Scopes nest; the outermost one's end frees the casts.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace foldcore::autograd {

class ParamCastScope {
 public:
  ParamCastScope();
  // With the parameters' flat buffer (ParamStore::values()) and the autocast dtype: the whole buffer
  // is cast once, in one kernel, and every parameter's cast is a view of it (a stack of parameters
  // lying back to back too): no cast per parameter at all. An undefined `flat`, or `to` its own
  // dtype, is the plain scope. Inside an outer scope that has one already, the outer's stays.
  ParamCastScope(const Tensor& flat, DType to);
  ~ParamCastScope();
  ParamCastScope(const ParamCastScope&) = delete;
  ParamCastScope& operator=(const ParamCastScope&) = delete;
};

// v's value in dtype `to`: v's own tensor when it is already `to`; inside a ParamCastScope, for a
// parameter, the scope's cast (made on first use); otherwise a fresh cast.
Tensor cast_param(const Variable& v, DType to);

// The values of `vs` stacked along a new first axis in dtype `to`: [n, shape…] on `device`. An
// undefined vs[i] stands for zeros of `shape` (a projection without a bias among ones with). Inside
// a ParamCastScope, when every defined v is a parameter, made once per scope and handed out again
// (the stacked weights and biases of autograd::linears' strided batch); otherwise made at each call.
// Counted in ParamCastStats as one cast. A scope's stacks with zero entries (an attention's q, k
// and v without bias beside its gated one) go to a pool when the outermost scope ends, if nothing
// else holds them, and the next scope's stack of the same shape, dtype, device and missing entries
// takes one: its zero rows are still zeros, so only the present entries are copied (no zero fill
// per stack and step; ParamCastStats::zero_rows_reused counts them).
Tensor stack_params(const std::vector<Variable>& vs, const Shape& shape, DType to, Device device);

// This thread's casts since its outermost ParamCastScope began: made, and handed out again.
struct ParamCastStats {
  int64_t made = 0, reused = 0, zero_rows_reused = 0;
};
ParamCastStats param_cast_stats();

}  // namespace foldcore::autograd
