// LayerNorm (plain and fused with bias + dropout + residual), softmax and softmax cross-entropy
// Functions (fp32 statistics).
#include <vector>

#include "autograd/function_util.h"
#include "autograd/functions.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace foldcore::autograd {
namespace {

// kChannelMajor: the channel-major LayerNorm (x [C, rows...], y [rows..., C]; dx in x's layout).
template <bool kChannelMajor> struct LayerNormFnT final : Function {
  Tensor x, gamma, mean, rstd;
  void backward(BackwardCtx& ctx) override {
    // Into x's gradient so far where there is one (the stream's gradient from the residual path):
    // one pass instead of a temporary and an add.
    bool add = false;
    const Tensor dx = detail::grad_to_add_or_scratch(ctx, 0, x, x.dtype(), add);
    const Tensor dgamma = detail::acc_grad_or_scratch(ctx, 1, gamma, DType::f32);
    const Tensor dbeta = detail::acc_grad_or_scratch(ctx, 2, gamma, DType::f32);
    const auto op = kChannelMajor ? &ops::layernorm_channel_major_backward : &ops::layernorm_backward;
    op(ctx.grad_output(0), x, gamma, mean, rstd, dx, dgamma, dbeta, add);
  }
};
using LayerNormFn = LayerNormFnT<false>;
using LayerNormChannelMajorFn = LayerNormFnT<true>;

// Inputs: 0 x, 1 bias, 2 residual, 3 gamma, 4 beta. Saves h = residual + dropout(x + bias), the
// statistics, and the dropout args (the mask is regenerated, not stored).
struct BiasDropoutResidualLayerNormFn final : Function {
  ops::DropoutArgs args;
  Tensor h, gamma, mean, rstd;
  bool has_bias = false;
  void backward(BackwardCtx& ctx) override {
    const bool want_bias = has_bias && ctx.needs_grad(1);
    const Tensor dx = ctx.needs_grad(0) || want_bias ? detail::new_grad_or_scratch(ctx, 0, h, h.dtype()) : Tensor();
    const Tensor dbias = want_bias ? ctx.accumulate_grad(1, DType::f32) : Tensor();
    const Tensor dres = ctx.needs_grad(2) ? ctx.new_grad(2, h.dtype()) : Tensor();
    const Tensor dgamma = detail::acc_grad_or_scratch(ctx, 3, gamma, DType::f32);
    const Tensor dbeta = detail::acc_grad_or_scratch(ctx, 4, gamma, DType::f32);
    ops::bias_dropout_residual_layernorm_backward(ctx.grad_output(0), h, gamma, mean, rstd, args, dx, dbias, dres,
                                                  dgamma, dbeta);
  }
};

struct SoftmaxFn final : Function {
  Tensor y;
  void backward(BackwardCtx& ctx) override { ops::softmax_backward(y, ctx.grad_output(0), ctx.new_grad(0)); }
};

struct CrossEntropyFn final : Function {
  Tensor dlogits;  // already scaled by 1/denominator in the fused forward
  void backward(BackwardCtx& ctx) override {
    const Tensor& dl = ctx.grad_output(0);  // scalar
    const Tensor dx = ctx.new_grad(0);
    const Tensor dlc = dl.dtype() == dlogits.dtype() ? dl : dl.to(dlogits.dtype());
    ops::mul(dlogits.view(dx.shape()), dlc.expand(dx.shape()), dx);
  }
};

// Σ_r w[r] over the rows that count (hard labels: label >= 0), on the host.
double default_denominator(const CrossEntropyOptions& opt, int64_t rows) {
  std::vector<float> w;
  if (opt.weights.defined()) w = opt.weights.to_vector();
  double d = 0;
  if (opt.labels.defined()) {
    const std::vector<int64_t> lab = opt.labels.to_vector_i64();
    for (size_t r = 0; r < lab.size(); ++r)
      if (lab[r] >= 0) d += w.empty() ? 1.0 : w[r];
  } else {
    for (int64_t r = 0; r < rows; ++r) d += w.empty() ? 1.0 : w[static_cast<size_t>(r)];
  }
  return d;
}

// y = layer_norm(x) as a Variable: its node (x's value xv, the f32 gamma gv and the statistics
// saved) where a gradient is needed.
// Fn: LayerNormFn, or LayerNormChannelMajorFn (named `name`).
template <typename Fn = LayerNormFn>
Variable record_layer_norm(const Variable& x, const Tensor& xv, const Variable& gamma, const Variable& beta,
                           const Tensor& gv, const Tensor& mean, const Tensor& rstd, const Tensor& y,
                           const char* name = "layer_norm") {
  if (!any_requires_grad({x, gamma, beta})) return Variable(y);
  auto fn = std::make_unique<Fn>();
  fn->x = xv;
  fn->gamma = gv;
  fn->mean = mean;
  fn->rstd = rstd;
  Variable result = record1(name, std::move(fn), {x, gamma, beta}, y);
  // A 16-bit output: its backward reads an fp32 dy as well (the GEMMs that read the output give
  // their dx in fp32, which then reaches it without a rounding pass), whatever x's dtype. Of a
  // 16-bit x it computes in fp32 either way and writes dx in x's dtype, so a lone consumer's
  // gradient may come in y's dtype (half the bytes; several consumers' sum stays fp32).
  if (result.node() && y.dtype() != DType::f32) {
    result.node()->f32_output_grads = true;
    result.node()->narrow_output_grads = xv.dtype() != DType::f32;
  }
  return result;
}

// The fused residual + LayerNorm ops' common part: their checks, contiguous x and residual, the
// fp32 gamma and beta, the dropout draw (bias_dropout_residual's), and y (in y_dtype), mean and
// rstd to write.
struct FusedNormArgs {
  ops::DropoutArgs args;
  Tensor xv, rv, gv, bv, y, mean, rstd;
};
FusedNormArgs fused_norm_args(const char* op, const Variable& x, const Variable& bias, const Variable& residual,
                              const DropoutSpec& d, const Variable& gamma, const Variable& beta, DType y_dtype) {
  const int64_t c = x.size(-1);
  FC_CHECK(residual.shape() == x.shape(), op, ": residual ", residual.shape().str(), " vs x ", x.shape().str());
  FC_CHECK(!bias.defined() || bias.shape() == Shape({c}), op, ": bias ", bias.defined() ? bias.shape().str() : "",
           " for x ", x.shape().str());
  FC_CHECK(gamma.shape() == Shape({c}) && beta.shape() == Shape({c}), op, ": gamma ", gamma.shape().str(), ", beta ",
           beta.shape().str(), " for x ", x.shape().str());
  FC_CHECK(d.p >= 0.f && d.p < 1.f, op, ": dropout rate ", d.p, " outside [0, 1)");
  FusedNormArgs f;
  f.args = detail::dropout_args(d);
  f.xv = x.value().contiguous();
  f.rv = residual.value().contiguous();
  f.gv = gamma.value().to(DType::f32);
  f.bv = beta.value().to(DType::f32);
  f.y = detail::empty_like(f.xv, y_dtype);
  f.mean = Tensor::empty({f.xv.numel() / c}, DType::f32, f.xv.device());
  f.rstd = Tensor::empty({f.xv.numel() / c}, DType::f32, f.xv.device());
  return f;
}

}  // namespace

Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps,
                    std::optional<DType> out) {
  const int64_t c = x.size(-1);
  FC_CHECK(gamma.shape() == Shape({c}) && beta.shape() == Shape({c}), "layer_norm: gamma ", gamma.shape().str(),
           ", beta ", beta.shape().str(), " for x ", x.shape().str());
  const Tensor xv = x.value().contiguous();
  const Tensor gv = gamma.value().to(DType::f32), bv = beta.value().to(DType::f32);
  Tensor y = detail::empty_like(xv, out.value_or(xv.dtype()));
  const Tensor mean = Tensor::empty({xv.numel() / c}, DType::f32, xv.device());
  const Tensor rstd = Tensor::empty({xv.numel() / c}, DType::f32, xv.device());
  ops::layernorm_forward(xv, gv, bv, eps, y, mean, rstd);
  return record_layer_norm(x, xv, gamma, beta, gv, mean, rstd, y);
}

Variable layer_norm_channel_major(const Variable& x, const Variable& gamma, const Variable& beta, float eps,
                                  std::optional<DType> out) {
  FC_CHECK(x.dim() >= 2, "layer_norm_channel_major: x ", x.shape().str(), " must be [C, rows...]");
  const int64_t c = x.size(0);
  FC_CHECK(gamma.shape() == Shape({c}) && beta.shape() == Shape({c}), "layer_norm_channel_major: gamma ",
           gamma.shape().str(), ", beta ", beta.shape().str(), " for x ", x.shape().str());
  const Tensor xv = x.value().contiguous();
  const Tensor gv = gamma.value().to(DType::f32), bv = beta.value().to(DType::f32);
  const Tensor y = Tensor::empty(ops::layernorm_channel_major_y_shape(xv.shape()), out.value_or(xv.dtype()), xv.device());
  const Tensor mean = Tensor::empty({xv.numel() / c}, DType::f32, xv.device());
  const Tensor rstd = Tensor::empty({xv.numel() / c}, DType::f32, xv.device());
  ops::layernorm_channel_major_forward(xv, gv, bv, eps, y, mean, rstd);
  return record_layer_norm<LayerNormChannelMajorFn>(x, xv, gamma, beta, gv, mean, rstd, y, "layer_norm_channel_major");
}

std::pair<Variable, Variable> residual_layer_norm(const Variable& x, const Variable& residual, const DropoutSpec& d,
                                                  const Variable& gamma, const Variable& beta, float eps,
                                                  std::optional<DType> out, bool in_place) {
  constexpr const char* op = "residual_layer_norm";
  FC_CHECK(x.defined() && residual.defined(), op, ": x and residual are required");
  const DType dt = residual.dtype(), yt = out.value_or(dt);
  // The fused kernel's dtypes (x and y each h's, or 16-bit beside an fp32 h; x also fp32 beside a
  // 16-bit h, bias_dropout_residual's rule); else the two ops.
  auto fits = [&](DType t) { return t == dt || (dt == DType::f32 && is_16bit_float(t)); };
  if (!is_floating(dt) || !(fits(x.dtype()) || (x.dtype() == DType::f32 && is_16bit_float(dt))) || !fits(yt)) {
    const Variable h = bias_dropout_residual(x, Variable(), residual, d, in_place);
    return {h, layer_norm(h, gamma, beta, eps, out)};
  }
  const Tensor h = detail::residual_sum_target(residual, in_place);  // before fused_norm_args's view of it
  const FusedNormArgs f = fused_norm_args(op, x, Variable(), residual, d, gamma, beta, yt);
  ops::bias_dropout_residual_layernorm_forward(f.xv, Tensor(), f.rv, f.args, f.gv, f.bv, eps, h, f.y, f.mean, f.rstd);
  const Variable hv = detail::record_bias_dropout_residual(x, Variable(), residual, f.args, h);
  return {hv, record_layer_norm(hv, h, gamma, beta, f.gv, f.mean, f.rstd, f.y)};  // layer_norm's node on h
}

Variable bias_dropout_residual_layer_norm(const Variable& x0, const Variable& bias0, const Variable& residual0,
                                          const DropoutSpec& d, const Variable& gamma, const Variable& beta, float eps,
                                          bool in_place) {
  constexpr const char* op = "bias_dropout_residual_layer_norm";
  FC_CHECK(x0.defined() && residual0.defined(), op, ": x and residual are required");
  // Mixed float dtypes (a bf16 autocast GEMM output and an f32 residual stream) promote to f32,
  // as in bias_dropout_residual.
  const DType dt = x0.dtype() == residual0.dtype() ? x0.dtype() : DType::f32;
  const Variable x = cast(x0, dt), residual = cast(residual0, dt);
  const Variable bias = bias0.defined() ? cast(bias0, dt) : Variable();
  const bool rg = any_requires_grad({x, bias, residual, gamma, beta});
  // h (the pre-LN sum) is stored only for a backward; `in_place` puts it in residual's storage.
  const Tensor h = rg ? detail::residual_sum_target(residual, in_place) : Tensor();
  const FusedNormArgs f = fused_norm_args(op, x, bias, residual, d, gamma, beta, x.dtype());
  ops::bias_dropout_residual_layernorm_forward(f.xv, bias.defined() ? bias.value() : Tensor(), f.rv, f.args, f.gv, f.bv,
                                               eps, h, f.y, f.mean, f.rstd);
  if (!rg) return Variable(f.y);
  auto fn = std::make_unique<BiasDropoutResidualLayerNormFn>();
  fn->args = f.args;
  fn->h = h;
  fn->gamma = f.gv;
  fn->mean = f.mean;
  fn->rstd = f.rstd;
  fn->has_bias = bias.defined();
  return record1(op, std::move(fn), {x, bias, residual, gamma, beta}, f.y);
}

Variable softmax(const Variable& x) {
  const Tensor xv = x.value().contiguous();
  Tensor y = detail::empty_like(xv);
  ops::softmax_forward(xv, y);
  if (!any_requires_grad({x})) return Variable(y);
  auto fn = std::make_unique<SoftmaxFn>();
  fn->y = y;
  return record1("softmax", std::move(fn), {x}, y);
}

Variable softmax_cross_entropy(const Variable& logits, const CrossEntropyOptions& opt) {
  FC_CHECK(opt.labels.defined() != opt.targets.defined(),
           "softmax_cross_entropy: give exactly one of labels and targets");
  const int64_t c = logits.size(-1), rows = logits.numel() / c;
  const Tensor x = logits.value().contiguous().view({rows, c});
  ops::CrossEntropyArgs a;
  if (opt.labels.defined()) {
    FC_CHECK(opt.labels.numel() == rows, "softmax_cross_entropy: ", opt.labels.numel(), " labels for logits ",
             logits.shape().str());
    a.labels = opt.labels.reshape({rows});
  } else {
    FC_CHECK(opt.targets.numel() == rows * c, "softmax_cross_entropy: targets ", opt.targets.shape().str(),
             " for logits ", logits.shape().str());
    a.targets = opt.targets.reshape({rows, c});
  }
  if (opt.weights.defined()) a.weights = opt.weights.reshape({rows});
  const double denom = opt.denominator > 0 ? opt.denominator : default_denominator(opt, rows);
  // An empty batch (everything ignored) gives loss 0 with zero gradient, not NaN.
  const float inv = denom > 0 ? static_cast<float>(1.0 / denom) : 0.f;
  a.dscale = inv;
  const bool rg = any_requires_grad({logits});
  const Tensor loss_rows = Tensor::empty({rows}, DType::f32, x.device());
  Tensor dlogits = rg ? detail::empty_like(x) : Tensor();
  ops::softmax_cross_entropy(x, a, loss_rows, dlogits);
  Tensor loss = Tensor::empty({}, DType::f32, x.device());
  ops::sum(loss_rows, {0}, loss);
  ops::scale(loss, inv, loss);
  if (!rg) return Variable(loss);
  auto fn = std::make_unique<CrossEntropyFn>();
  fn->dlogits = dlogits;
  return record1("softmax_cross_entropy", std::move(fn), {logits}, loss);
}

}  // namespace foldcore::autograd
