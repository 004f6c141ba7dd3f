// GEMM Functions: linear (bias + activation epilogue) and batched matmul, with bf16 autocast.
//
// linear: y = act(p), p = x·W + b, x [R, in], W [in, out].
//   dp = act'(p) ⊙ dy;  dx = dp·Wᵀ;  dW += xᵀ·dp;  db += Σ_r dp.
// Under autocast x, W, b are cast to bf16 on the fly (W is the fp32 master in the ParamStore);
// dW is accumulated straight into the fp32 master gradient by a mixed GEMM (bf16 operands, fp32
// out), db is reduced in fp32 directly.
// A parameter's cast is made once per ParamCastScope (param_cast_cache.h), not at every use.
#include "autograd/function_util.h"
#include "autograd/functions.h"
#include "autograd/param_cast_cache.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace foldcore::autograd {
namespace {

struct LinearFn final : Function {
  Tensor x2;    // [R, in] in the compute dtype; saved only when W needs a gradient
  int64_t rows = 0, n_in = 0;
  Tensor w;     // [in, out] in the compute dtype
  Tensor act_in;  // relu: the output y; gelu: the pre-activation p
  ops::Activation act = ops::Activation::none;
  DType cd = DType::f32;

  void backward(BackwardCtx& ctx) override {
    const int64_t n_out = w.size(1);
    Tensor dp = ctx.grad_output(0).view({rows, n_out});
    if (act != ops::Activation::none) {
      Tensor t = Tensor::empty({rows, n_out}, cd, dp.device());
      if (act == ops::Activation::relu) {
        ops::relu_backward(act_in, dp, t);  // relu'(p) = [y > 0]
      } else {
        ops::gelu_backward(act_in, dp, t);
      }
      dp = t;
    }
    if (ctx.needs_grad(0)) {
      Tensor dx = ctx.new_grad(0, cd).view({rows, n_in});
      ops::GemmArgs g;
      g.trans_b = true;
      ops::gemm(dp, w, dx, g);
    }
    if (ctx.needs_grad(1)) {
      // Into the weight's own gradient (the fp32 master's, in place): under bf16 autocast a mixed
      // product, bf16 operands with fp32 accumulation and an fp32 out, so dW is not rounded to bf16
      // and needs no temporary, zero fill, conversion or separate add.
      ops::GemmArgs g;
      g.trans_a = true;
      g.beta = 1.f;
      ops::gemm(x2, dp, ctx.accumulate_grad(1), g);
    }
    if (ctx.needs_grad(2)) ops::sum_rows_accumulate(dp, ctx.accumulate_grad(2, DType::f32));
  }
};

// Σ of a batched gradient [batch…, r, c] over its batch dims when the operand was 2-D.
Tensor reduce_batch(const Tensor& g, int target_dim) {
  if (g.dim() == target_dim) return g;
  std::vector<int> axes;
  for (int i = 0; i < g.dim() - target_dim; ++i) axes.push_back(i);
  Tensor out = Tensor::empty({g.size(-2), g.size(-1)}, g.dtype(), g.device());
  ops::sum(g, axes, out);
  return out;
}

struct MatmulFn final : Function {
  Tensor a, b;  // compute dtype, contiguous
  bool ta = false, tb = false;
  DType cd = DType::f32;

  void backward(BackwardCtx& ctx) override {
    const Tensor& dc = ctx.grad_output(0);
    // C = op(A)·op(B):  d op(A) = dC·op(B)ᵀ,  d op(B) = op(A)ᵀ·dC.
    if (ctx.needs_grad(0)) {
      ops::GemmArgs g;
      Tensor da;
      Shape s = dc.shape();
      s[s.size() - 2] = a.size(-2);
      s[s.size() - 1] = a.size(-1);
      da = Tensor::empty(s, cd, dc.device());
      if (!ta) {
        g.trans_b = !tb;
        ops::gemm(dc, b, da, g);  // dA = dC·op(B)ᵀ
      } else {
        g.trans_a = tb;
        g.trans_b = true;
        ops::gemm(b, dc, da, g);  // dA = op(B)·dCᵀ
      }
      ctx.put_grad(0, reduce_batch(da, a.dim()));
    }
    if (ctx.needs_grad(1)) {
      ops::GemmArgs g;
      Shape s = dc.shape();
      s[s.size() - 2] = b.size(-2);
      s[s.size() - 1] = b.size(-1);
      Tensor db = Tensor::empty(s, cd, dc.device());
      if (!tb) {
        g.trans_a = !ta;
        ops::gemm(a, dc, db, g);  // dB = op(A)ᵀ·dC
      } else {
        g.trans_a = true;
        g.trans_b = ta;
        ops::gemm(dc, a, db, g);  // dB = dCᵀ·op(A)
      }
      ctx.put_grad(1, reduce_batch(db, b.dim()));
    }
  }
};

}  // namespace

Variable linear(const Variable& x, const Variable& w, const Variable& b, ops::Activation act) {
  FC_CHECK(w.dim() == 2 && x.size(-1) == w.size(0), "linear: x ", x.shape().str(), " · w ", w.shape().str(),
           " (w must be [in, out])");
  FC_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(1)), "linear: bias ",
           b.defined() ? b.shape().str() : "", " for w ", w.shape().str());
  const DType cd = detail::gemm_dtype(x.dtype());
  const int64_t n_in = w.size(0), n_out = w.size(1), rows = x.numel() / n_in;
  const Tensor x2 = x.value().to(cd).reshape({rows, n_in});
  const Tensor wc = cast_param(w, cd);  // a parameter's cast made once per ParamCastScope
  const bool rg = any_requires_grad({x, w, b});
  Tensor y = Tensor::empty({rows, n_out}, cd, x.device());
  ops::GemmArgs g;
  if (b.defined()) g.bias = cast_param(b, cd);
  g.act = act;
  if (rg && act == ops::Activation::gelu) g.pre_act = Tensor::empty({rows, n_out}, cd, x.device());
  ops::gemm(x2, wc, y, g);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = n_out;
  if (!rg) return Variable(y.view(out_shape));
  auto fn = std::make_unique<LinearFn>();
  if (w.requires_grad()) fn->x2 = x2;
  fn->rows = rows;
  fn->n_in = n_in;
  fn->w = wc;
  fn->act = act;
  fn->act_in = act == ops::Activation::gelu ? g.pre_act : (act == ops::Activation::relu ? y : Tensor());
  fn->cd = cd;
  return record1("linear", std::move(fn), {x, w, b}, y.view(out_shape));
}

Variable matmul(const Variable& a, const Variable& b, bool trans_a, bool trans_b) {
  FC_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: operands ", a.shape().str(), " and ", b.shape().str(),
           " must be at least 2-D");
  FC_CHECK(a.dim() == b.dim() || a.dim() == 2 || b.dim() == 2, "matmul: batch dims of ", a.shape().str(), " and ",
           b.shape().str(), " differ");
  const DType cd = detail::gemm_dtype(a.dtype());
  const Tensor av = a.value().to(cd).contiguous(), bv = b.value().to(cd).contiguous();
  const int64_t m = trans_a ? av.size(-1) : av.size(-2);
  const int64_t ka = trans_a ? av.size(-2) : av.size(-1);
  const int64_t kb = trans_b ? bv.size(-1) : bv.size(-2);
  const int64_t n = trans_b ? bv.size(-2) : bv.size(-1);
  FC_CHECK(ka == kb, "matmul: inner dims differ: ", a.shape().str(), (trans_a ? "ᵀ" : ""), " · ", b.shape().str(),
           (trans_b ? "ᵀ" : ""));
  Shape s = a.dim() >= b.dim() ? av.shape() : bv.shape();
  s[s.size() - 2] = m;
  s[s.size() - 1] = n;
  Tensor c = Tensor::empty(s, cd, av.device());
  ops::GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  ops::gemm(av, bv, c, g);
  if (!any_requires_grad({a, b})) return Variable(c);
  auto fn = std::make_unique<MatmulFn>();
  fn->a = av;
  fn->b = bv;
  fn->ta = trans_a;
  fn->tb = trans_b;
  fn->cd = cd;
  return record1("matmul", std::move(fn), {a, b}, c);
}

}  // namespace foldcore::autograd
