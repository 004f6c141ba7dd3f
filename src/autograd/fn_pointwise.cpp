// Pointwise Functions: cast, add, mul, scale, activations, gating, dropout/bias+dropout+residual.
#include "autograd/function_util.h"
#include "autograd/functions.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace foldcore::autograd {

namespace detail {
Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int lead = g.dim() - shape.size();
  FC_CHECK(lead >= 0, "sum_to_shape: ", g.shape().str(), " cannot reduce to ", shape.str());
  std::vector<int> axes;
  Shape kept;
  for (int i = 0; i < g.dim(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && g.size(i) != 1)) {
      axes.push_back(i);
    } else {
      kept.push_back(g.size(i));
    }
  }
  Tensor out = Tensor::empty(kept, g.dtype(), g.device());
  ops::sum(g, axes, out);
  return out.view(shape);
}

ops::DropoutArgs dropout_args(const DropoutSpec& d) {
  ops::DropoutArgs args;
  if (d.gen != nullptr && d.p > 0.f) {
    args.p = d.p;
    args.seed = d.gen->seed();
    args.offset = d.gen->reserve();  // recompute replays this by rewinding the generator
    args.shared_dims = d.shared_dims;
    args.index_base = d.index_base;
  }
  return args;
}

bool can_overwrite(const Variable& v) {
  // Safe when this Tensor is the only reference to the storage: no saved tensor of any backward
  // (and no other view) can observe the overwrite.
  const Tensor& r = v.value();
  const bool sole_owner =
      r.storage().use_count() == 1 && r.is_contiguous() && r.offset() == 0 && r.nbytes() == r.storage()->bytes();
  return sole_owner && !(v.is_leaf() && v.requires_grad());
}

Tensor residual_sum_target(const Variable& residual, bool in_place) {
  if (in_place && can_overwrite(residual)) return residual.value();
  return Tensor::empty(residual.shape(), residual.dtype(), residual.value().device());
}
}  // namespace detail

using detail::empty_like;

namespace {

// Mixed float dtypes promote to f32 (e.g. a bf16 autocast GEMM output added to an f32 residual).
DType promoted(DType a, DType b) { return a == b ? a : DType::f32; }

struct CastFn final : Function {
  DType in_dtype = DType::f32;
  void backward(BackwardCtx& ctx) override { ctx.put_grad(0, ctx.grad_output(0).to(in_dtype)); }
};

struct AddFn final : Function {
  Shape b_shape;
  void backward(BackwardCtx& ctx) override {
    const Tensor& g = ctx.grad_output(0);
    if (ctx.needs_grad(1)) {
      const Tensor gb = detail::sum_to_shape(g, b_shape);
      // gb may be g itself: hand distinct storage to the two inputs.
      ctx.put_grad(1, ctx.needs_grad(0) && gb.storage() == g.storage() ? gb.clone() : gb);
    }
    if (ctx.needs_grad(0)) ctx.put_grad(0, g);
  }
};

struct MulFn final : Function {
  Tensor a, b;  // saved only where the other input needs a gradient; b unexpanded
  Shape b_shape;
  void backward(BackwardCtx& ctx) override {
    const Tensor& g = ctx.grad_output(0);
    // A 16-bit a times an fp32 b (mul's mixed form): a's gradient g·b rounded once into a's dtype
    // (mixed too), b's the fp32 product a·g.
    if (ctx.needs_grad(0)) ops::mul(g, b.expand(g.shape()), ctx.new_grad(0));
    if (ctx.needs_grad(1)) {
      Tensor t = empty_like(g);
      ops::mul(a, g, t);
      ctx.put_grad(1, detail::sum_to_shape(t, b_shape));
    }
  }
};

struct ScaleFn final : Function {
  float s = 1.f;
  void backward(BackwardCtx& ctx) override { ops::scale(ctx.grad_output(0), s, ctx.new_grad(0)); }
};

enum class Act { relu, gelu, sigmoid };
struct ActFn final : Function {
  Act act = Act::relu;
  Tensor saved;  // x for relu/gelu, y for sigmoid
  void backward(BackwardCtx& ctx) override {
    const Tensor& g = ctx.grad_output(0);
    const Tensor dx = ctx.new_grad(0);
    switch (act) {
      case Act::relu: ops::relu_backward(saved, g, dx); break;
      case Act::gelu: ops::gelu_backward(saved, g, dx); break;
      case Act::sigmoid: ops::sigmoid_backward(saved, g, dx); break;
    }
  }
};

struct SigmoidGateFn final : Function {
  Tensor g, x;
  void backward(BackwardCtx& ctx) override {
    const Tensor dg = detail::new_grad_or_scratch(ctx, 0, g, g.dtype());
    const Tensor dx = detail::new_grad_or_scratch(ctx, 1, x, x.dtype());
    ops::sigmoid_gate_backward(g, x, ctx.grad_output(0), dg, dx);
  }
};

struct MaskedGateChannelMajorFn final : Function {
  Tensor g, x, mask;
  void backward(BackwardCtx& ctx) override {
    const Tensor dg = detail::new_grad_or_scratch(ctx, 0, g, g.dtype());
    const Tensor dx = detail::new_grad_or_scratch(ctx, 1, x, x.dtype());
    ops::masked_gate_channel_major_backward(g, x, mask, ctx.grad_output(0), dg, dx);
  }
};

struct BiasDropoutResidualFn final : Function {
  ops::DropoutArgs args;
  Shape x_shape, bias_shape;
  DType x_dtype = DType::f32;
  bool has_bias = false;
  void backward(BackwardCtx& ctx) override {
    const Tensor& g = ctx.grad_output(0);
    if (ctx.needs_grad(0) || ctx.needs_grad(1)) {
      const Tensor dx = ctx.needs_grad(0) ? ctx.new_grad(0) : Tensor::empty(x_shape, x_dtype, g.device());
      Tensor db;
      if (has_bias) db = ctx.needs_grad(1) ? ctx.accumulate_grad(1, DType::f32)
                                            : Tensor::zeros(bias_shape, DType::f32, g.device());
      ops::bias_dropout_residual_backward(g, args, dx, db);
    }
    if (ctx.needs_grad(2)) ctx.put_grad(2, g);  // dresidual = dout
  }
};

Variable activation(const Variable& x, Act act, const char* name) {
  const Tensor xv = x.value().contiguous();
  Tensor y = empty_like(xv);
  switch (act) {
    case Act::relu: ops::relu_forward(xv, y); break;
    case Act::gelu: ops::gelu_forward(xv, y); break;
    case Act::sigmoid: ops::sigmoid_forward(xv, y); break;
  }
  if (!any_requires_grad({x})) return Variable(y);
  auto fn = std::make_unique<ActFn>();
  fn->act = act;
  fn->saved = act == Act::sigmoid ? y : xv;
  return record1(name, std::move(fn), {x}, y);
}

}  // namespace

Variable cast(const Variable& x, DType dtype) {
  FC_CHECK(is_floating(dtype) && is_floating(x.dtype()), "cast: ", dtype_name(x.dtype()), " -> ", dtype_name(dtype),
           " (only float dtypes)");
  if (x.dtype() == dtype) return x;
  auto fn = std::make_unique<CastFn>();
  fn->in_dtype = x.dtype();
  return record1("cast", std::move(fn), {x}, x.value().to(dtype));
}

Variable add(const Variable& a0, const Variable& b0) {
  const DType dt = promoted(a0.dtype(), b0.dtype());
  const Variable a = cast(a0, dt), b = cast(b0, dt);
  FC_CHECK(broadcast_shapes(a.shape(), b.shape()) == a.shape(), "add: b ", b.shape().str(),
           " does not broadcast to a ", a.shape().str());
  const Tensor av = a.value().contiguous();
  Tensor out = empty_like(av);
  ops::add(av, b.value().expand(a.shape()), out);
  auto fn = std::make_unique<AddFn>();
  fn->b_shape = b.shape();
  return record1("add", std::move(fn), {a, b}, out);
}

Variable mul(const Variable& a0, const Variable& b0) {
  const DType dt = promoted(a0.dtype(), b0.dtype());
  // A 16-bit a times an fp32 b (a bf16 GEMM output times an fp32 normaliser): one mixed multiply
  // (kernels/elementwise.h), the values of casting a first, without the cast's pass.
  const bool mixed = b0.dtype() == DType::f32 && is_16bit_float(a0.dtype());
  const Variable a = mixed ? a0 : cast(a0, dt), b = cast(b0, dt);
  FC_CHECK(broadcast_shapes(a.shape(), b.shape()) == a.shape(), "mul: b ", b.shape().str(),
           " does not broadcast to a ", a.shape().str());
  const Tensor av = a.value().contiguous();
  Tensor out = Tensor::empty(av.shape(), dt, av.device());
  ops::mul(av, b.value().expand(a.shape()), out);
  if (!any_requires_grad({a, b})) return Variable(out);
  auto fn = std::make_unique<MulFn>();
  if (b.requires_grad()) fn->a = av;
  if (a.requires_grad()) fn->b = b.value();
  fn->b_shape = b.shape();
  return record1("mul", std::move(fn), {a, b}, out);
}

Variable scale(const Variable& x, float s) {
  const Tensor xv = x.value().contiguous();
  Tensor out = empty_like(xv);
  ops::scale(xv, s, out);
  auto fn = std::make_unique<ScaleFn>();
  fn->s = s;
  return record1("scale", std::move(fn), {x}, out);
}

Variable relu(const Variable& x) { return activation(x, Act::relu, "relu"); }
Variable gelu(const Variable& x) { return activation(x, Act::gelu, "gelu"); }
Variable sigmoid(const Variable& x) { return activation(x, Act::sigmoid, "sigmoid"); }

Variable sigmoid_gate(const Variable& g0, const Variable& x0) {
  const DType dt = promoted(g0.dtype(), x0.dtype());
  const Variable g = cast(g0, dt), x = cast(x0, dt);
  FC_CHECK(g.shape() == x.shape(), "sigmoid_gate: gate ", g.shape().str(), " vs x ", x.shape().str());
  const Tensor gv = g.value().contiguous(), xv = x.value().contiguous();
  Tensor out = empty_like(xv);
  ops::sigmoid_gate_forward(gv, xv, out);
  if (!any_requires_grad({g, x})) return Variable(out);
  auto fn = std::make_unique<SigmoidGateFn>();
  fn->g = gv;
  fn->x = xv;
  return record1("sigmoid_gate", std::move(fn), {g, x}, out);
}

Variable masked_gate_channel_major(const Variable& g0, const Variable& x0, const Tensor& mask) {
  const DType dt = promoted(g0.dtype(), x0.dtype());
  const Variable g = cast(g0, dt), x = cast(x0, dt);
  FC_CHECK(g.dim() == 3 && g.shape() == x.shape() && mask.defined() && mask.shape() == Shape({g.size(0), g.size(1)}),
           "masked_gate_channel_major: gate ", g.shape().str(), ", x ", x.shape().str(), ", mask ",
           mask.defined() ? mask.shape().str() : "undefined", " (expected [N1, N2, C] twice and [N1, N2])");
  const Tensor gv = g.value().contiguous(), xv = x.value().contiguous();
  const Tensor mv = (mask.dtype() == dt ? mask : mask.to(dt)).contiguous();
  Tensor out = Tensor::empty({g.size(2), g.size(0), g.size(1)}, dt, gv.device());
  ops::masked_gate_channel_major_forward(gv, xv, mv, out);
  if (!any_requires_grad({g, x})) return Variable(out);
  auto fn = std::make_unique<MaskedGateChannelMajorFn>();
  fn->g = gv;
  fn->x = xv;
  fn->mask = mv;
  return record1("masked_gate_channel_major", std::move(fn), {g, x}, out);
}

Variable dropout(const Variable& x, const DropoutSpec& d) { return bias_dropout_residual(x, {}, {}, d); }

Variable bias_dropout_residual(const Variable& x0, const Variable& bias0, const Variable& residual0,
                               const DropoutSpec& d, bool in_place) {
  const bool has_res = residual0.defined();
  // An fp32 update of a 16-bit stream without bias (the outer product mean's fp32 update of a bf16
  // pair stream) keeps the stream's dtype: the sum in fp32, rounded once (add_into's values).
  const bool into16 = has_res && !bias0.defined() && x0.dtype() == DType::f32 && is_16bit_float(residual0.dtype());
  const DType dt = into16 ? residual0.dtype() : has_res ? promoted(x0.dtype(), residual0.dtype()) : x0.dtype();
  // A 16-bit update of an fp32 stream without bias (an Evoformer module's output under bf16
  // autocast into its fp32 residual stream), or into16: one mixed kernel each way, the values of
  // casting x to fp32 first (exact) and of rounding the fp32 dx once (a 16-bit dx), or of rounding
  // the sum once (into16; its dx is the 16-bit gradient in fp32, exact), without the casts.
  const bool mixed = into16 || (has_res && !bias0.defined() && dt == DType::f32 && x0.dtype() != DType::f32);
  const Variable x = mixed ? x0 : cast(x0, dt);
  const Variable residual = has_res ? cast(residual0, dt) : Variable();
  const Variable bias = bias0.defined() ? cast(bias0, dt) : Variable();
  FC_CHECK(!has_res || residual.shape() == x.shape(), "bias_dropout_residual: residual ", residual.shape().str(),
           " vs x ", x.shape().str());
  FC_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == x.size(-1)), "bias_dropout_residual: bias ",
           bias.defined() ? bias.shape().str() : "", " for x ", x.shape().str());
  FC_CHECK(d.p >= 0.f && d.p < 1.f, "dropout: rate ", d.p, " outside [0, 1)");
  const ops::DropoutArgs args = detail::dropout_args(d);
  const Tensor xv = x.value().contiguous();
  const Tensor out = has_res ? detail::residual_sum_target(residual, in_place) : Tensor::empty(xv.shape(), dt, xv.device());
  ops::bias_dropout_residual_forward(xv, bias.defined() ? bias.value() : Tensor(),
                                     has_res ? residual.value().contiguous() : Tensor(), args, out);
  return detail::record_bias_dropout_residual(x, bias, residual, args, out);
}

namespace detail {

Variable record_bias_dropout_residual(const Variable& x, const Variable& bias, const Variable& residual,
                                      const ops::DropoutArgs& args, const Tensor& out) {
  auto fn = std::make_unique<BiasDropoutResidualFn>();
  fn->args = args;
  fn->x_shape = x.shape();
  fn->x_dtype = x.dtype();
  fn->has_bias = bias.defined();
  if (bias.defined()) fn->bias_shape = bias.shape();
  return record1("bias_dropout_residual", std::move(fn), {x, bias, residual}, out);
}

}  // namespace detail

}  // namespace foldcore::autograd
