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

#include "autograd/variable.h"

namespace foldcore::autograd {

class ParamCastScope {
 public:
  ParamCastScope();
  ~ParamCastScope();
  ParamCastScope(const ParamCastScope&) = delete;
  ParamCastScope& operator=(const ParamCastScope&) = delete;
};

// v's value in dtype `to`: v's own tensor when it is already `to`; inside a ParamCastScope, for a
// parameter, the scope's cast (made on first use); otherwise a fresh cast.
Tensor cast_param(const Variable& v, DType to);

// This thread's casts since its outermost ParamCastScope began: made, and handed out again.
struct ParamCastStats {
  int64_t made = 0, reused = 0;
};
ParamCastStats param_cast_stats();

}  // namespace foldcore::autograd
