// Thread-local autograd modes.
//  - Grad mode: when disabled (NoGradGuard) no graph is recorded, nothing is saved for backward,
//    and every activation dies with the last Tensor that refers to it (inference frees as it goes).
//  - Autocast: when set to bf16 (AutocastGuard), the GEMM-based ops (linear, matmul, attention)
//    cast their operands to bf16 on the fly — weights stay fp32 master copies in the ParamStore and
//    their gradients land in the fp32 flat gradient buffer. LayerNorm, softmax, cross-entropy and
//    reductions keep fp32 statistics.
#pragma once

#include <optional>

#include "core/dtype.h"

namespace foldcore::autograd {

bool grad_enabled();
void set_grad_enabled(bool on);

// Disables graph recording for its scope (restores the previous mode on exit).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Enables graph recording for its scope (used by recompute's backward).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// The compute dtype for GEMMs under autocast, or nullopt (run in the operands' dtype).
std::optional<DType> autocast_dtype();
void set_autocast_dtype(std::optional<DType> dtype);

class AutocastGuard {
 public:
  // dtype: bf16 or f16 (f32 switches autocast off for the scope).
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard() { set_autocast_dtype(prev_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
};

}  // namespace foldcore::autograd
