#include "models/alphafold/structure/structure_module_ops.h"

#include <algorithm>
#include <cmath>

#include "models/alphafold/structure/rigid.h"

namespace foldcore::af2 {
namespace {

using autograd::BackwardCtx;
using autograd::Function;

// The result of a host computation, in the dtype and on the device of `like`.
Tensor back_to(const Tensor& host, const Tensor& like) { return host.to(like.dtype()).to(like.device()); }

struct SoftplusFn final : Function {
  Tensor x;  // host f32
  void backward(BackwardCtx& ctx) override {
    const Tensor g = host_f32(ctx.grad_output(0));
    Tensor dx = Tensor::empty(x.shape(), DType::f32);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = x.data<float>()[i];
      dx.data<float>()[i] = g.data<float>()[i] / (1.f + std::exp(-v));
    }
    ctx.put_grad(0, back_to(dx, ctx.grad_output(0)));
  }
};

struct NormLastFn final : Function {
  Tensor x, y;  // host f32
  void backward(BackwardCtx& ctx) override {
    const Tensor g = host_f32(ctx.grad_output(0));
    const int64_t c = x.size(-1);
    Tensor dx = Tensor::empty(x.shape(), DType::f32);
    for (int64_t r = 0; r < y.numel(); ++r) {
      const float s = g.data<float>()[r] / y.data<float>()[r];
      for (int64_t k = 0; k < c; ++k) dx.data<float>()[r * c + k] = s * x.data<float>()[r * c + k];
    }
    ctx.put_grad(0, back_to(dx, ctx.grad_output(0)));
  }
};

struct L2NormalizeFn final : Function {
  Tensor y, n;  // host f32: output and the clamped norm per row
  float eps = 0.f;
  void backward(BackwardCtx& ctx) override {
    const Tensor g = host_f32(ctx.grad_output(0));
    const int64_t c = y.size(-1);
    Tensor dx = Tensor::empty(y.shape(), DType::f32);
    for (int64_t r = 0; r < n.numel(); ++r) {
      const float* yr = y.data<float>() + r * c;
      const float* gr = g.data<float>() + r * c;
      float* d = dx.data<float>() + r * c;
      const float nr = n.data<float>()[r];
      if (nr * nr <= eps) {  // clamp active: y = x/√eps, a linear map
        for (int64_t k = 0; k < c; ++k) d[k] = gr[k] / nr;
        continue;
      }
      float gy = 0.f;
      for (int64_t k = 0; k < c; ++k) gy += gr[k] * yr[k];
      for (int64_t k = 0; k < c; ++k) d[k] = (gr[k] - gy * yr[k]) / nr;
    }
    ctx.put_grad(0, back_to(dx, ctx.grad_output(0)));
  }
};

}  // namespace

Variable softplus(const Variable& x) {
  FC_CHECK(x.defined(), "softplus: undefined input");
  auto fn = std::make_unique<SoftplusFn>();
  fn->x = host_f32(x.value());
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const float v = fn->x.data<float>()[i];
    y.data<float>()[i] = std::max(v, 0.f) + std::log1p(std::exp(-std::fabs(v)));
  }
  const Tensor out = back_to(y, x.value());
  return autograd::record1("softplus", std::move(fn), {x}, out);
}

Variable norm_last(const Variable& x, float eps) {
  FC_CHECK(x.defined() && x.dim() >= 1, "norm_last: input must have at least one axis");
  auto fn = std::make_unique<NormLastFn>();
  fn->x = host_f32(x.value());
  Shape s;
  for (int i = 0; i < x.dim() - 1; ++i) s.push_back(x.size(i));
  const int64_t c = x.size(-1);
  Tensor y = Tensor::empty(s, DType::f32);
  for (int64_t r = 0; r < y.numel(); ++r) {
    float acc = eps;
    for (int64_t k = 0; k < c; ++k) {
      const float v = fn->x.data<float>()[r * c + k];
      acc += v * v;
    }
    y.data<float>()[r] = std::sqrt(acc);
  }
  fn->y = y;
  const Tensor out = back_to(y, x.value());
  return autograd::record1("norm_last", std::move(fn), {x}, out);
}

Variable l2_normalize_last(const Variable& x, float eps) {
  FC_CHECK(x.defined() && x.dim() >= 1, "l2_normalize_last: input must have at least one axis");
  auto fn = std::make_unique<L2NormalizeFn>();
  const Tensor xh = host_f32(x.value());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Tensor y = Tensor::empty(x.shape(), DType::f32), n = Tensor::empty({rows}, DType::f32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xh.data<float>() + r * c;
    float ss = 0.f;
    for (int64_t k = 0; k < c; ++k) ss += xr[k] * xr[k];
    const float nr = std::sqrt(std::max(ss, eps));
    n.data<float>()[r] = nr;
    for (int64_t k = 0; k < c; ++k) y.data<float>()[r * c + k] = xr[k] / nr;
  }
  fn->y = y;
  fn->n = n;
  fn->eps = eps;
  const Tensor out = back_to(y, x.value());
  return autograd::record1("l2_normalize_last", std::move(fn), {x}, out);
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
