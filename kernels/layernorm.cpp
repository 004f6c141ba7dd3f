// LayerNorm dispatcher: shape/dtype/device validation, then the CPU or CUDA backend. Plain
// LayerNorm's backward is the fused op's backward with h = x, dh = dx and no dropout gradient.
#include "kernels/layernorm.h"

#include <atomic>

#include "kernels/cpu/layernorm_cpu.h"
#include "kernels/env_choice.h"
#include "kernels/gemm.h"
#include "kernels/dropout_mask.h"
#include "kernels/pointwise_checks.h"
#ifdef FOLDCORE_HAVE_CUDA
#include "kernels/cuda/layernorm_cuda.h"
#endif

namespace foldcore::ops {
namespace {

struct RowsC {
  int64_t rows, c;
};

std::atomic<bool>& one_pass_choice() {
  static std::atomic<bool> choice{detail::choice_from_env("FOLDCORE_LN_BACKWARD", {"one_pass", "two_pass"}) == 0};
  return choice;
}

std::string str_of(const Tensor& t) { return t.defined() ? t.str() : std::string("undefined"); }

// x's layout aside, the checks every LayerNorm makes: x floating and contiguous with c > 0 channels
// in `rows` rows; gamma f32 [c]; mean, rstd f32 with `rows` elements; all on x's device.
void check_stats(const char* op, const Tensor& x, int64_t c, int64_t rows, const Tensor& gamma, const Tensor& mean,
                 const Tensor& rstd) {
  FC_CHECK(c > 0, op, ": x ", x.str(), " has no channels");
  FC_CHECK(gamma.dim() == 1 && gamma.size(0) == c && gamma.dtype() == DType::f32 && gamma.is_contiguous(), op,
           ": gamma ", gamma.str(), " must be contiguous f32 [", c, "] for x ", x.str());
  for (const Tensor* s : {&mean, &rstd})
    FC_CHECK(s->numel() == rows && s->dtype() == DType::f32 && s->is_contiguous(), op, ": mean/rstd ", s->str(),
             " must be contiguous f32 with ", rows, " elements for x ", x.str());
  for (const Tensor* t : {&gamma, &mean, &rstd})
    FC_CHECK(t->device() == x.device(), op, ": ", t->str(), " is not on x's device ", x.device().str());
}

// x, gamma, mean and rstd defined; x floating, contiguous, of at least min_dim dims.
void check_defined(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                   int min_dim) {
  FC_CHECK(x.defined() && gamma.defined() && mean.defined() && rstd.defined(), op, ": x, gamma, mean, rstd must be defined");
  FC_CHECK(x.dim() >= min_dim && is_floating(x.dtype()) && x.is_contiguous(), op, ": x ", x.str(),
           " must be a contiguous floating tensor of at least ", min_dim, " dims");
}

// x [rows..., C] (channels last).
RowsC check_common(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd) {
  check_defined(op, x, gamma, mean, rstd, 1);
  const int64_t c = x.size(-1);
  const int64_t rows = c == 0 ? 0 : x.numel() / c;
  check_stats(op, x, c, rows, gamma, mean, rstd);
  return {rows, c};
}

// y (or dy) of a LayerNorm: shaped `shape` (a plain LayerNorm's: x's), on x's device, contiguous,
// x's dtype or, for an f32 x, a 16-bit float dtype.
void check_output(const char* op, const char* name, const Tensor& t, const Tensor& x, const Shape& shape) {
  FC_CHECK(t.defined() && t.shape() == shape && t.device() == x.device() && t.is_contiguous() &&
               (t.dtype() == x.dtype() || (x.dtype() == DType::f32 && is_16bit_float(t.dtype()))),
           op, ": ", name, " ", str_of(t), " must be contiguous ", shape.str(), " (x ", x.str(),
           ") and of x's dtype (or 16-bit for an f32 x)");
}
void check_output(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  check_output(op, name, t, x, x.shape());
}

// check_output's rule, or f32 beside a 16-bit x: a LayerNorm backward's dy (the GEMMs' fp32
// gradient) and the fused forward's update x (an fp32 update of a bf16 stream).
void check_output_or_f32(const char* op, const char* name, const Tensor& t, const Tensor& x, const Shape& shape) {
  if (t.defined() && t.dtype() == DType::f32 && is_16bit_float(x.dtype())) {
    FC_CHECK(t.shape() == shape && t.device() == x.device() && t.is_contiguous(), op, ": ", name, " ", t.str(),
             " must be contiguous ", shape.str(), " (x ", x.str(), ")");
    return;
  }
  check_output(op, name, t, x, shape);
}
void check_output_or_f32(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  check_output_or_f32(op, name, t, x, x.shape());
}

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  FC_CHECK(t.defined() && t.shape() == x.shape() && t.dtype() == x.dtype() && t.device() == x.device() &&
               t.is_contiguous(),
           op, ": ", name, " ", str_of(t), " must be contiguous and match x ", x.str());
}

// A per-channel f32 vector like gamma (beta, dgamma, dbeta, dbias).
void check_param(const char* op, const char* name, const Tensor& t, const Tensor& gamma) {
  FC_CHECK(t.defined() && t.shape() == gamma.shape() && t.dtype() == DType::f32 && t.is_contiguous() &&
               t.device() == gamma.device(),
           op, ": ", name, " ", str_of(t), " must be contiguous f32 like gamma ", gamma.str());
}

void check_dropout(const char* op, const DropoutArgs& d) {
  FC_CHECK(d.p >= 0.f && d.p < 1.f, op, ": dropout rate p=", d.p, " must be in [0, 1)");
}

// The channel-major ops' x [C, rows...]: its channel count and rows, after the common checks.
struct ChannelMajor {
  int64_t rows, c;
};
ChannelMajor check_channel_major(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd) {
  check_defined(op, x, gamma, mean, rstd, 2);
  const int64_t c = x.size(0);
  const int64_t rows = c == 0 ? 0 : x.numel() / c;
  check_stats(op, x, c, rows, gamma, mean, rstd);
  return {rows, c};
}

// x [C, rows] as a contiguous [rows, C] copy: the CPU's form (and CUDA's for C > 128).
Tensor rows_major_copy(const Tensor& x, const ChannelMajor& cm) {
  Tensor xt = Tensor::empty({cm.rows, cm.c}, x.dtype(), x.device());
  xt.copy_(x.view({cm.c, cm.rows}).permute({1, 0}));
  return xt;
}

// The head-major projection's shapes: x [rows..., C], w [C, H]; out and dout [H, rows...].
struct ProjectHeads {
  int64_t rows, c, heads;
  Shape heads_first;
};
ProjectHeads check_project_heads(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& mean, const Tensor& rstd, const Tensor& w) {
  const auto [rows, c] = check_common(op, x, gamma, mean, rstd);
  check_param(op, "beta", beta, gamma);
  FC_CHECK(w.defined() && w.dim() == 2 && w.size(0) == c && w.size(1) > 0 && is_floating(w.dtype()) &&
               w.is_contiguous() && w.device() == x.device(),
           op, ": w ", str_of(w), " must be contiguous floating [", c, ", H] on the device of x ", x.str());
  return {rows, c, w.size(1), layernorm_project_heads_out_shape(x.shape(), w.size(1))};
}

// out or dout of the head-major projection: [H, rows...] contiguous on x's device, of w's dtype
// (or, with f32_ok, f32).
void check_heads_first(const char* op, const char* name, const Tensor& t, const Tensor& w, const ProjectHeads& p,
                       bool f32_ok) {
  FC_CHECK(t.defined() && t.shape() == p.heads_first && t.device() == w.device() && t.is_contiguous() &&
               (t.dtype() == w.dtype() || (f32_ok && t.dtype() == DType::f32)),
           op, ": ", name, " ", str_of(t), " must be contiguous ", p.heads_first.str(), " of w's dtype ",
           dtype_name(w.dtype()), f32_ok ? " (or f32)" : "");
}

// x as the composition's LayerNorm reads it beside y in w's dtype: x itself, or (a 16-bit x of
// another dtype than w's) its fp32 copy.
Tensor ln_input_for(const Tensor& x, const Tensor& w) {
  return x.dtype() == w.dtype() || x.dtype() == DType::f32 ? x : x.to(DType::f32);
}

// y = LN(x) in w's dtype, [rows, C] (the composition's stored LayerNorm output).
Tensor project_heads_y(const Tensor& xs, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& w,
                       const Tensor& mean, const Tensor& rstd, const ProjectHeads& p) {
  Tensor y = Tensor::empty({p.rows, p.c}, w.dtype(), xs.device());
  layernorm_forward(xs.view({p.rows, p.c}), gamma, beta, eps, y, mean.view({p.rows}), rstd.view({p.rows}));
  return y;
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  const auto [rows, c] = check_common(op, x, gamma, mean, rstd);
  check_param(op, "beta", beta, gamma);
  check_output(op, "y", y, x);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), layernorm_forward(x, gamma, beta, eps, y, mean, rstd, rows, c));
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        bool accumulate_dx) {
  constexpr const char* op = "layernorm_backward";
  const auto [rows, c] = check_common(op, x, gamma, mean, rstd);
  check_output_or_f32(op, "dy", dy, x);
  check_like(op, "dx", dx, x);
  check_param(op, "dgamma", dgamma, gamma);
  check_param(op, "dbeta", dbeta, gamma);
  if (rows == 0) return;
  const DropoutArgs none;
  const DropoutMaskDesc mask{};
  FC_POINTWISE_DISPATCH(x.device(),
                 layernorm_backward(dy, x, gamma, mean, rstd, dx, Tensor(), Tensor(), none, mask, dgamma, dbeta, rows, c,
                                    accumulate_dx));
}

Shape layernorm_channel_major_y_shape(const Shape& x) {
  Shape y;
  for (int d = 1; d < x.size(); ++d) y.push_back(x[d]);
  if (x.size() > 0) y.push_back(x[0]);
  return y;
}

Shape layernorm_project_heads_out_shape(const Shape& x, int64_t heads) {
  Shape out{heads};
  for (int d = 0; d + 1 < x.size(); ++d) out.push_back(x[d]);
  return out;
}

void layernorm_channel_major_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  constexpr const char* op = "layernorm_channel_major_forward";
  const ChannelMajor cm = check_channel_major(op, x, gamma, mean, rstd);
  check_param(op, "beta", beta, gamma);
  check_output(op, "y", y, x, layernorm_channel_major_y_shape(x.shape()));
  if (cm.rows == 0) return;
#ifdef FOLDCORE_HAVE_CUDA
  if (x.device().is_cuda() && cuda::layernorm_channel_major_tiled(cm.c)) {
    set_device(x.device());
    cuda::layernorm_channel_major_forward(x, gamma, beta, eps, y, mean, rstd, cm.rows, cm.c);
    return;
  }
#endif
  layernorm_forward(rows_major_copy(x, cm), gamma, beta, eps, y.view({cm.rows, cm.c}), mean.view({cm.rows}),
                    rstd.view({cm.rows}));
}

void layernorm_channel_major_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      bool accumulate_dx) {
  constexpr const char* op = "layernorm_channel_major_backward";
  const ChannelMajor cm = check_channel_major(op, x, gamma, mean, rstd);
  check_output_or_f32(op, "dy", dy, x, layernorm_channel_major_y_shape(x.shape()));
  check_like(op, "dx", dx, x);
  check_param(op, "dgamma", dgamma, gamma);
  check_param(op, "dbeta", dbeta, gamma);
  if (cm.rows == 0) return;
#ifdef FOLDCORE_HAVE_CUDA
  if (x.device().is_cuda() && cuda::layernorm_channel_major_tiled(cm.c)) {
    set_device(x.device());
    cuda::layernorm_channel_major_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, cm.rows, cm.c, accumulate_dx);
    return;
  }
#endif
  // The row-major backward into a [rows, C] gradient (x's dtype: rounded as the tiled form rounds
  // it), then laid out (or added) into dx.
  const Tensor dxt = Tensor::empty({cm.rows, cm.c}, x.dtype(), x.device());
  layernorm_backward(dy.view({cm.rows, cm.c}), rows_major_copy(x, cm), gamma, mean.view({cm.rows}),
                     rstd.view({cm.rows}), dxt, dgamma, dbeta);
  Tensor dxc = dx.view({cm.c, cm.rows});
  if (accumulate_dx) add(dxc, dxt.permute({1, 0}), dxc);
  else dxc.copy_(dxt.permute({1, 0}));
}

void layernorm_project_heads_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& w, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  constexpr const char* op = "layernorm_project_heads_forward";
  const ProjectHeads p = check_project_heads(op, x, gamma, beta, mean, rstd, w);
  check_heads_first(op, "out", out, w, p, false);
  if (p.rows == 0) return;
#ifdef FOLDCORE_HAVE_CUDA
  if (x.device().is_cuda() && cuda::layernorm_project_heads_fused(p.c, p.heads)) {
    set_device(x.device());
    cuda::layernorm_project_heads_forward(x, gamma, beta, eps, w, out, mean, rstd, p.rows, p.c, p.heads);
    return;
  }
#endif
  const Tensor y = project_heads_y(ln_input_for(x, w), gamma, beta, eps, w, mean, rstd, p);
  const Tensor o = Tensor::empty({p.rows, p.heads}, w.dtype(), x.device());
  gemm(y, w, o);
  Tensor oh = out.view({p.heads, p.rows});
  oh.copy_(o.permute({1, 0}));
}

void layernorm_project_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      float eps, const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                      const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& dw,
                                      bool accumulate_dx) {
  constexpr const char* op = "layernorm_project_heads_backward";
  const ProjectHeads p = check_project_heads(op, x, gamma, beta, mean, rstd, w);
  check_heads_first(op, "dout", dout, w, p, true);
  check_like(op, "dx", dx, x);
  check_param(op, "dgamma", dgamma, gamma);
  check_param(op, "dbeta", dbeta, gamma);
  FC_CHECK(dw.defined() && dw.shape() == w.shape() && dw.dtype() == DType::f32 && dw.is_contiguous() &&
               dw.device() == w.device(),
           op, ": dw ", str_of(dw), " must be contiguous f32 shaped like w ", w.str());
  if (p.rows == 0) return;
#ifdef FOLDCORE_HAVE_CUDA
  if (x.device().is_cuda() && cuda::layernorm_project_heads_fused(p.c, p.heads)) {
    set_device(x.device());
    cuda::layernorm_project_heads_backward(dout, x, gamma, beta, mean, rstd, w, dx, dgamma, dbeta, dw, p.rows, p.c,
                                           p.heads, accumulate_dx);
    return;
  }
#endif
  // The composition's backward: dout laid out [rows, H], the GEMM's fp32 dy and its weight
  // gradient (from y made again: the forward's values), then LayerNorm's backward. An fp32 dout
  // beside a 16-bit w is read as it is: the products in fp32 of w's and y's values (exact
  // conversions), as the fused kernel forms them.
  const Tensor xs = ln_input_for(x, w);
  const Tensor m2 = Tensor::empty({p.rows}, DType::f32, x.device()), r2 = Tensor::empty({p.rows}, DType::f32, x.device());
  Tensor y = project_heads_y(xs, gamma, beta, eps, w, m2, r2, p);
  Tensor wg = w;
  if (dout.dtype() != w.dtype()) {
    y = y.to(DType::f32);
    wg = w.to(DType::f32);
  }
  Tensor drows = Tensor::empty({p.rows, p.heads}, dout.dtype(), x.device());
  drows.copy_(dout.view({p.heads, p.rows}).permute({1, 0}));
  const Tensor dy = Tensor::empty({p.rows, p.c}, DType::f32, x.device());
  GemmArgs gx;
  gx.trans_b = true;
  gemm(drows, wg, dy, gx);
  GemmArgs gw;
  gw.trans_a = true;
  gw.beta = 1.f;
  gemm(y, drows, dw, gw);
  if (xs.dtype() == x.dtype()) {
    layernorm_backward(dy, x.view({p.rows, p.c}), gamma, mean.view({p.rows}), rstd.view({p.rows}),
                       dx.view({p.rows, p.c}), dgamma, dbeta, accumulate_dx);
    return;
  }
  const Tensor d32 = Tensor::empty({p.rows, p.c}, DType::f32, x.device());
  layernorm_backward(dy, xs.view({p.rows, p.c}), gamma, mean.view({p.rows}), rstd.view({p.rows}), d32, dgamma, dbeta);
  Tensor dxv = dx.view({p.rows, p.c});
  if (accumulate_dx) add(dxv, d32.to(dx.dtype()), dxv);
  else dxv.copy_(d32);
}

void bias_dropout_residual_layernorm_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                             const DropoutArgs& d, const Tensor& gamma, const Tensor& beta,
                                             float eps, const Tensor& h, const Tensor& y, const Tensor& mean,
                                             const Tensor& rstd) {
  constexpr const char* op = "bias_dropout_residual_layernorm_forward";
  const auto [rows, c] = check_common(op, x, gamma, mean, rstd);
  check_param(op, "beta", beta, gamma);
  // residual and h set T; x and y are T or, for an f32 T, 16-bit (check_output's rule); x may also be
  // f32 for a 16-bit T (an fp32 update of a bf16 stream: the sum in fp32, h rounded once).
  FC_CHECK(residual.defined(), op, ": residual must be defined");
  check_output_or_f32(op, "x", x, residual);
  check_output(op, "y", y, residual);
  if (h.defined()) check_like(op, "h", h, residual);
  if (bias.defined())
    FC_CHECK(bias.dim() == 1 && bias.size(0) == c && bias.dtype() == x.dtype() && bias.device() == x.device() &&
                 bias.is_contiguous(),
             op, ": bias ", bias.str(), " must be contiguous [", c, "] with the dtype/device of x ", x.str());
  check_dropout(op, d);
  const DropoutMaskDesc mask = make_dropout_mask_desc(x.shape(), d.shared_dims, d.index_base);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(x.device(),
                 bias_dropout_residual_layernorm_forward(x, bias, residual, d, mask, gamma, beta, eps, h, y, mean,
                                                         rstd, rows, c));
}

void bias_dropout_residual_layernorm_backward(const Tensor& dy, const Tensor& h, const Tensor& gamma,
                                              const Tensor& mean, const Tensor& rstd, const DropoutArgs& d,
                                              const Tensor& dx, const Tensor& dbias, const Tensor& dresidual,
                                              const Tensor& dgamma, const Tensor& dbeta) {
  constexpr const char* op = "bias_dropout_residual_layernorm_backward";
  const auto [rows, c] = check_common(op, h, gamma, mean, rstd);
  check_like(op, "dy", dy, h);
  if (dx.defined()) check_like(op, "dx", dx, h);
  if (dresidual.defined()) check_like(op, "dresidual", dresidual, h);
  if (dbias.defined()) {
    check_param(op, "dbias", dbias, gamma);
    FC_CHECK(dx.defined(), op, ": dbias needs dx (dbias = Σ_rows dx)");
  }
  check_param(op, "dgamma", dgamma, gamma);
  check_param(op, "dbeta", dbeta, gamma);
  check_dropout(op, d);
  const DropoutMaskDesc mask = make_dropout_mask_desc(h.shape(), d.shared_dims, d.index_base);
  if (rows == 0) return;
  FC_POINTWISE_DISPATCH(h.device(),
                 layernorm_backward(dy, h, gamma, mean, rstd, dresidual, dx, dbias, d, mask, dgamma, dbeta, rows, c));
}

void set_layernorm_backward_one_pass(bool on) { one_pass_choice().store(on); }
bool layernorm_backward_one_pass() { return one_pass_choice().load(); }

}  // namespace foldcore::ops
