// Validation, reduction planning and backend dispatch for kernels/reduce.h.
#include "kernels/reduce.h"

#include <atomic>
#include <string>

#include "kernels/cpu/reduce_cpu.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/elementwise.h"
#include "kernels/pointwise_checks.h"
#include "kernels/reduce_plan.h"

namespace foldcore::ops {

ReducePlan make_reduce_plan(const Tensor& x, const std::vector<bool>& is_reduced) {
  ReducePlan p;
  for (int a = 0; a < x.dim(); ++a) {
    ReduceGroup& g = is_reduced[a] ? p.reduced : p.kept;
    push_merged_dim(g.ndim, g.shape, g.strides, x.size(a), x.stride(a));
  }
  const int64_t k = p.kept.numel(), r = p.reduced.numel();
  const bool kept_unit = p.kept.ndim == 0 || (p.kept.ndim == 1 && p.kept.strides[0] == 1);
  const bool red_unit = p.reduced.ndim == 0 || (p.reduced.ndim == 1 && p.reduced.strides[0] == 1);
  if (red_unit && (p.kept.ndim == 0 || (p.kept.ndim == 1 && p.kept.strides[0] == r))) {
    p.layout = ReducePlan::kReducedInner;
  } else if (kept_unit && p.reduced.ndim == 1 && p.reduced.strides[0] == k) {
    p.layout = ReducePlan::kReducedOuter;
  }
  return p;
}

namespace {

// Validates x/axes/out for sum and mean and returns the plan.
ReducePlan plan_for(std::string_view op, const Tensor& x, const std::vector<int>& axes, const Tensor& out) {
  detail::check_float(op, "x", x);
  detail::check_float(op, "out", out);
  detail::check_contiguous(op, "out", out);
  detail::check_same_device(op, "x", x, "out", out);
  std::vector<bool> is_reduced(x.dim(), false);
  for (int a : axes) {
    FC_CHECK(a >= -x.dim() && a < x.dim(), op, ": axis ", a, " out of range for x ", x.str());
    const int n = a < 0 ? a + x.dim() : a;
    FC_CHECK(!is_reduced[n], op, ": axis ", a, " repeated for x ", x.str());
    is_reduced[n] = true;
  }
  Shape kept, keepdim;
  for (int a = 0; a < x.dim(); ++a) {
    if (!is_reduced[a]) kept.push_back(x.size(a));
    keepdim.push_back(is_reduced[a] ? 1 : x.size(a));
  }
  const bool all = kept.empty();
  FC_CHECK(out.shape() == kept || out.shape() == keepdim || (all && out.numel() == 1), op, ": out ", out.str(),
           " must have shape ", kept.str(), " or ", keepdim.str(), " for x ", x.str(), " reduced over ",
           axes.size(), " axes");
  return make_reduce_plan(x, is_reduced);
}

}  // namespace

void sum(const Tensor& x, const std::vector<int>& axes, const Tensor& out, bool accumulate) {
  const ReducePlan plan = plan_for("sum", x, axes, out);
  if (out.numel() == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), reduce_sum(x, plan, 1.f, accumulate, out));
}

void mean(const Tensor& x, const std::vector<int>& axes, const Tensor& out) {
  const ReducePlan plan = plan_for("mean", x, axes, out);
  if (out.numel() == 0) return;
  const int64_t r = plan.reduced.numel();
  FC_CHECK(r > 0, "mean: reducing an empty set of elements of x ", x.str());
  FC_POINTWISE_DISPATCH(x.device(), reduce_sum(x, plan, static_cast<float>(1.0 / static_cast<double>(r)), false, out));
}

void sum_rows_accumulate(const Tensor& x, const Tensor& out) {
  constexpr std::string_view op = "sum_rows_accumulate";
  detail::check_float(op, "x", x);
  detail::check_contiguous(op, "x", x);
  detail::check_bias_grad(op, "out", out, "x", x);
  if (out.numel() == 0) return;
  std::vector<bool> is_reduced(x.dim(), true);
  is_reduced.back() = false;
  const ReducePlan plan = make_reduce_plan(x, is_reduced);
  FC_POINTWISE_DISPATCH(x.device(), reduce_sum(x, plan, 1.f, true, out));
}

void sum_rows_accumulate_batched(const Tensor& x, const Tensor& out) {
  constexpr std::string_view op = "sum_rows_accumulate_batched";
  detail::check_float(op, "x", x);
  detail::check_contiguous(op, "x", x);
  FC_CHECK(x.dim() == 3, op, ": x must be [B, R, C], got ", x.str());
  detail::check_defined(op, "out", out);
  FC_CHECK(out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == x.size(2) && out.dtype() == DType::f32 &&
               out.is_contiguous(),
           op, ": out ", out.str(), " must be contiguous f32 [", x.size(0), ", ", x.size(2), "] for x ", x.str());
  detail::check_same_device(op, "x", x, "out", out);
  if (out.numel() == 0 || x.size(1) == 0) return;
  const ReducePlan plan = make_reduce_plan(x.select(0, 0), {true, false});  // one batch: [R, C]
  if (plan.layout != ReducePlan::kReducedOuter) {  // C = 1 or R = 1 merge away: one batch at a time
    for (int64_t b = 0; b < x.size(0); ++b) sum_rows_accumulate(x.select(0, b), out.select(0, b));
    return;
  }
  FC_POINTWISE_DISPATCH(x.device(), reduce_sum_batched(x, plan, x.size(0), out));
}

void activation_backward_sum_rows(Activation act, const Tensor& in, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dbias) {
  constexpr std::string_view op = "activation_backward_sum_rows";
  FC_CHECK(act == Activation::relu || act == Activation::gelu, op, ": the activation must be relu or gelu");
  detail::check_grad3(op, "in", in, "dy", dy, "dx", dx);
  detail::check_bias_grad(op, "dbias", dbias, "dx", dx);
  if (dx.numel() == 0) return;
#ifdef FOLDCORE_HAVE_CUDA
  if (dx.device().is_cuda()) {
    set_device(dx.device());
    if (cuda::activation_backward_sum_rows(act, in, dy, dx, dbias)) return;
  }
#endif
  if (act == Activation::relu) {
    relu_backward(in, dy, dx);
  } else {
    gelu_backward(in, dy, dx);
  }
  sum_rows_accumulate(dx, dbias);
}

double sum_squares(const Tensor& x) {
  detail::check_float("sum_squares", "x", x);
  if (x.numel() == 0) return 0;
  if (x.device().is_cuda()) {
#ifdef FOLDCORE_HAVE_CUDA
    set_device(x.device());
    return cuda::sum_squares(x);
#else
    FC_THROW("sum_squares: this build has no CUDA backend; x is ", x.str());
#endif
  }
  return cpu::sum_squares(x);
}

double max_abs(const Tensor& x) {
  detail::check_float("max_abs", "x", x);
  if (x.numel() == 0) return 0;
  if (x.device().is_cuda()) {
#ifdef FOLDCORE_HAVE_CUDA
    set_device(x.device());
    return cuda::max_abs(x);
#else
    FC_THROW("max_abs: this build has no CUDA backend; x is ", x.str());
#endif
  }
  return cpu::max_abs(x);
}

namespace {
std::atomic<bool>& col_sum_vec_choice() {
  static std::atomic<bool> choice{true};
  return choice;
}
}  // namespace

void set_col_sum_vec(bool on) { col_sum_vec_choice().store(on); }
bool col_sum_vec() { return col_sum_vec_choice().load(); }

}  // namespace foldcore::ops
