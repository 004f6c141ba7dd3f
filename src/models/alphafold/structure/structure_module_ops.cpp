#include "models/alphafold/structure/structure_module_ops.h"

#include "kernels/rigid.h"

namespace foldcore::af2 {
namespace {

using autograd::BackwardCtx;
using autograd::Function;

Tensor f32c(const Tensor& t) { return t.to(DType::f32).contiguous(); }

// A result computed in fp32, handed on in the input's dtype (under bf16 autocast the angle ResNet's
// and IPA's bf16 values come back as bf16, as the ops they feed expect; fp32 stays fp32).
Tensor in_dtype_of(const Tensor& y, const Variable& x) { return y.to(x.dtype()); }

struct SoftplusFn final : Function {
  Tensor x;  // fp32
  void backward(BackwardCtx& ctx) override {
    const Tensor dx = ctx.new_grad(0, DType::f32);
    ops::softplus_backward(x, f32c(ctx.grad_output(0)), dx);
  }
};

struct NormLastFn final : Function {
  Tensor x, y;  // fp32
  void backward(BackwardCtx& ctx) override {
    const Tensor dx = ctx.new_grad(0, DType::f32);
    ops::norm_rows_backward(x, y, f32c(ctx.grad_output(0)), dx);
  }
};

struct L2NormalizeFn final : Function {
  Tensor y, n;  // fp32: output and the clamped norm per row
  float eps = 0.f;
  void backward(BackwardCtx& ctx) override {
    const Tensor dx = ctx.new_grad(0, DType::f32);
    ops::l2_normalize_rows_backward(y, n, eps, f32c(ctx.grad_output(0)), dx);
  }
};

}  // namespace

Variable softplus(const Variable& x) {
  FC_CHECK(x.defined(), "softplus: undefined input");
  auto fn = std::make_unique<SoftplusFn>();
  fn->x = f32c(x.value());
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  ops::softplus_forward(fn->x, y);
  return autograd::record1("softplus", std::move(fn), {x}, in_dtype_of(y, x));
}

Variable norm_last(const Variable& x, float eps) {
  FC_CHECK(x.defined() && x.dim() >= 1, "norm_last: input must have at least one axis");
  auto fn = std::make_unique<NormLastFn>();
  fn->x = f32c(x.value());
  Shape s;
  for (int i = 0; i < x.dim() - 1; ++i) s.push_back(x.size(i));
  Tensor y = Tensor::empty(s, DType::f32, x.device());
  ops::norm_rows(fn->x, eps, y);
  fn->y = y;
  return autograd::record1("norm_last", std::move(fn), {x}, in_dtype_of(y, x));
}

Variable l2_normalize_last(const Variable& x, float eps) {
  FC_CHECK(x.defined() && x.dim() >= 1, "l2_normalize_last: input must have at least one axis");
  auto fn = std::make_unique<L2NormalizeFn>();
  const Tensor xf = f32c(x.value());
  const int64_t rows = x.numel() / x.size(-1);
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device()), n = Tensor::empty({rows}, DType::f32, x.device());
  ops::l2_normalize_rows(xf, eps, y, n);
  fn->y = y;
  fn->n = n;
  fn->eps = eps;
  return autograd::record1("l2_normalize_last", std::move(fn), {x}, in_dtype_of(y, x));
}

void add_linear_params(Af2ParamTable& table, const std::string& key, const nn::Linear& linear, int64_t stack_index) {
  table.add(key + "//weights", linear.weight().value(), stack_index);
  if (linear.bias().defined()) table.add(key + "//bias", linear.bias().value(), stack_index);
}

void add_layer_norm_params(Af2ParamTable& table, const std::string& key, const nn::LayerNorm& ln, int64_t stack_index) {
  table.add(key + "//scale", ln.scale().value(), stack_index);
  table.add(key + "//offset", ln.offset().value(), stack_index);
}

}  // namespace foldcore::af2
