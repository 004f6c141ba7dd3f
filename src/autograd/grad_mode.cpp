#include "autograd/grad_mode.h"

#include "core/error.h"

namespace foldcore::autograd {
namespace {
thread_local bool t_grad_enabled = true;
thread_local std::optional<DType> t_autocast;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

std::optional<DType> autocast_dtype() { return t_autocast; }
void set_autocast_dtype(std::optional<DType> dtype) { t_autocast = dtype; }

AutocastGuard::AutocastGuard(DType dtype) : prev_(autocast_dtype()) {
  FC_CHECK(is_floating(dtype), "AutocastGuard: ", dtype_name(dtype), " is not a floating dtype");
  set_autocast_dtype(dtype == DType::f32 ? std::nullopt : std::optional<DType>(dtype));
}

}  // namespace foldcore::autograd
