// Validation and backend dispatch for kernels/elementwise.h.
#include "kernels/elementwise.h"

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/dropout_mask.h"
#include "kernels/pointwise_checks.h"
#include "kernels/reduce.h"

namespace foldcore::ops {

using detail::check_bias_grad;
using detail::check_contiguous;
using detail::check_float;
using detail::check_grad3;
using detail::check_like;

DropoutMaskDesc make_dropout_mask_desc(const Shape& shape, const std::vector<int>& shared_dims,
                                       int64_t index_base) {
  FC_CHECK(index_base >= 0, "dropout: negative mask index base ", index_base);
  DropoutMaskDesc d;
  d.ndim = shape.size();
  d.index_base = index_base;
  d.shared = index_base != 0;
  bool shared[kMaxDims] = {};
  for (int a : shared_dims) {
    FC_CHECK(a >= -d.ndim && a < d.ndim, "dropout: shared axis ", a, " out of range for shape ", shape.str());
    shared[a < 0 ? a + d.ndim : a] = true;
  }
  int64_t stride = 1;
  for (int a = d.ndim - 1; a >= 0; --a) {
    d.shape[a] = shape[a];
    d.mstride[a] = shared[a] ? 0 : stride;
    d.shared = d.shared || shared[a];
    if (!shared[a]) stride *= shape[a];  // the mask's own row-major strides (shared axes size 1)
  }
  d.quads = d.shared && d.ndim > 0 && !shared[d.ndim - 1] && shape[d.ndim - 1] % 4 == 0 && index_base % 4 == 0;
  return d;
}

namespace {

// One of a and b fp32, the other 16-bit.
bool is_sixteen_and_f32(DType a, DType b) {
  return (is_16bit_float(a) && b == DType::f32) || (a == DType::f32 && is_16bit_float(b));
}

// mul's mixed dtypes (elementwise.h): a 16-bit, b and out f32; or a and b f32, out 16-bit.
bool mixed_mul_dtypes(const Tensor& a, const Tensor& b, const Tensor& out) {
  return b.dtype() == DType::f32 && is_sixteen_and_f32(a.dtype(), out.dtype());
}

// a, out: contiguous, same shape/device and, unless `mixed` allows mul's mixed dtypes, one dtype
// with b; b: broadcast to a's shape (any strides).
Tensor check_binary(std::string_view op, const Tensor& a, const Tensor& b, const Tensor& out, bool mixed = false) {
  check_float(op, "a", a);
  check_float(op, "b", b);
  check_contiguous(op, "a", a);
  if (mixed) {
    check_float(op, "out", out);
    FC_CHECK(out.shape() == a.shape() && out.device() == a.device(), op, ": out ", out.str(), " must have the shape and device of a ",
             a.str());
  } else {
    check_like(op, "a", a, "out", out);
  }
  check_contiguous(op, "out", out);
  if (!mixed)
    FC_CHECK(b.dtype() == a.dtype(), op, ": b ", b.str(), " must have the dtype of a ", a.str());
  detail::check_same_device(op, "a", a, "b", b);
  if (b.shape() == a.shape()) return b;
  return with_context(std::string(op) + ": b " + b.str() + " does not broadcast to a " + a.str(),
                      [&] { return b.expand(a.shape()); });
}

void check_unary(std::string_view op, const Tensor& x, const Tensor& y) {
  check_float(op, "x", x);
  check_contiguous(op, "x", x);
  check_like(op, "x", x, "out", y);
  check_contiguous(op, "out", y);
}

void check_dropout_p(std::string_view op, float p) {
  FC_CHECK(p >= 0.f && p < 1.f, op, ": dropout rate p=", p, " must be in [0, 1)");
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const Tensor bb = check_binary("add", a, b, out);
  if (a.numel() == 0) return;
  FC_POINTWISE_DISPATCH(a.device(), binary(1.f, a, 1.f, bb, 0.f, out));
}

void add_into(const Tensor& dst, const Tensor& src) {
  FC_CHECK(dst.defined() && src.defined() && dst.shape() == src.shape() && dst.device() == src.device(),
           "add_into: dst ", dst.defined() ? dst.str() : "undefined", " and src ", src.defined() ? src.str() : "undefined",
           " must have one shape and device");
  FC_CHECK(dst.is_contiguous() && src.is_contiguous(), "add_into: dst ", dst.str(), " and src ", src.str(),
           " must be contiguous");
  const bool mixed = dst.dtype() == DType::f32 && is_16bit_float(src.dtype());
  FC_CHECK(is_floating(dst.dtype()) && (src.dtype() == dst.dtype() || mixed), "add_into: src ", src.str(),
           " into dst ", dst.str(), " (src in dst's dtype, or 16-bit into f32)");
  if (dst.numel() == 0) return;
#ifdef FOLDCORE_HAVE_CUDA
  if (mixed && dst.device().is_cuda()) {
    cuda::add_into_f32(dst, src);
    return;
  }
#endif
  add(dst, mixed ? src.to(DType::f32) : src, dst);  // the reference: the exact conversion, then the add
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool mixed = a.defined() && b.defined() && out.defined() && (a.dtype() != out.dtype() || b.dtype() != a.dtype());
  FC_CHECK(!mixed || mixed_mul_dtypes(a, b, out), "mul: a ", a.str(), ", b ", b.str(), ", out ", out.str(),
           " (one dtype, or a 16-bit a with f32 b and out, or f32 a and b with a 16-bit out)");
  const Tensor bb = check_binary("mul", a, b, out, mixed);
  if (a.numel() == 0) return;
  FC_POINTWISE_DISPATCH(a.device(), binary(0.f, a, 0.f, bb, 1.f, out));
}

void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out) {
  const Tensor bb = check_binary("axpby", a, b, out);
  if (a.numel() == 0) return;
  FC_POINTWISE_DISPATCH(a.device(), binary(alpha, a, beta, bb, 0.f, out));
}

void scale(const Tensor& x, float s, const Tensor& out) {
  check_unary("scale", x, out);
  if (x.numel() == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), scale(x, s, out));
}

void reciprocal_shift(const Tensor& x, float eps, const Tensor& out) {
  check_unary("reciprocal_shift", x, out);
  if (x.numel() == 0) return;
  FC_POINTWISE_DISPATCH(x.device(), reciprocal_shift(x, eps, out));
}

#define FC_EW_FWD(NAME)                                 \
  void NAME(const Tensor& x, const Tensor& y) {         \
    check_unary(#NAME, x, y);                           \
    if (x.numel() == 0) return;                         \
    FC_POINTWISE_DISPATCH(x.device(), NAME(x, y));      \
  }
#define FC_EW_BWD(NAME, IN)                                        \
  void NAME(const Tensor& IN, const Tensor& dy, const Tensor& dx) { \
    check_grad3(#NAME, #IN, IN, "dy", dy, "dx", dx);                \
    if (IN.numel() == 0) return;                                    \
    FC_POINTWISE_DISPATCH(IN.device(), NAME(IN, dy, dx));           \
  }

FC_EW_FWD(relu_forward)
FC_EW_FWD(gelu_forward)
FC_EW_FWD(sigmoid_forward)
FC_EW_BWD(relu_backward, x)
FC_EW_BWD(gelu_backward, x)
FC_EW_BWD(sigmoid_backward, y)

#undef FC_EW_FWD
#undef FC_EW_BWD

void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& out) {
  check_grad3("sigmoid_gate_forward", "g", g, "x", x, "out", out);
  if (g.numel() == 0) return;
  FC_POINTWISE_DISPATCH(g.device(), sigmoid_gate_forward(g, x, out));
}

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dout, const Tensor& dg,
                           const Tensor& dx) {
  constexpr std::string_view op = "sigmoid_gate_backward";
  check_grad3(op, "g", g, "x", x, "dout", dout);
  check_like(op, "g", g, "dg", dg);
  check_contiguous(op, "dg", dg);
  check_like(op, "g", g, "dx", dx);
  check_contiguous(op, "dx", dx);
  if (g.numel() == 0) return;
  FC_POINTWISE_DISPATCH(g.device(), sigmoid_gate_backward(g, x, dout, dg, dx));
}

namespace {
// The masked gated edge's operands: g, p [N1, N2, C] (and dg, dp when given), m [N1, N2], the
// channel-major tensor [C, N1, N2]; all contiguous, one float dtype, one device.
void check_masked_gate(std::string_view op, const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& cm,
                       const Tensor& dg = Tensor(), const Tensor& dp = Tensor()) {
  FC_CHECK(g.defined() && g.dim() == 3 && is_floating(g.dtype()), op, ": g ", g.defined() ? g.str() : "undefined",
           " must be a float [N1, N2, C] tensor");
  const Shape& s = g.shape();
  for (const Tensor* t : {&g, &p, &m, &cm, &dg, &dp}) {
    if (t != &dg && t != &dp) FC_CHECK(t->defined(), op, ": an operand is undefined");
    if (!t->defined()) continue;
    FC_CHECK(t->dtype() == g.dtype() && t->device() == g.device() && t->is_contiguous(), op, ": ", t->str(),
             " must be contiguous, ", dtype_name(g.dtype()), " and on ", g.device().str());
  }
  FC_CHECK(p.shape() == s && (!dg.defined() || dg.shape() == s) && (!dp.defined() || dp.shape() == s), op, ": p ",
           p.shape().str(), " for g ", s.str());
  FC_CHECK(m.shape() == Shape({s[0], s[1]}), op, ": mask ", m.shape().str(), " for g ", s.str());
  FC_CHECK(cm.shape() == Shape({s[2], s[0], s[1]}), op, ": channel-major ", cm.shape().str(), " for g ", s.str());
}
}  // namespace

void masked_gate_channel_major_forward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& out) {
  check_masked_gate("masked_gate_channel_major_forward", g, p, m, out);
  if (g.numel() == 0) return;
  FC_POINTWISE_DISPATCH(g.device(), masked_gate_channel_major_forward(g, p, m, out));
}

void masked_gate_channel_major_backward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                        const Tensor& dg, const Tensor& dp) {
  constexpr std::string_view op = "masked_gate_channel_major_backward";
  check_masked_gate(op, g, p, m, dout, dg, dp);
  FC_CHECK(dg.defined() && dp.defined(), op, ": dg and dp are required");
  if (g.numel() == 0) return;
  FC_POINTWISE_DISPATCH(g.device(), masked_gate_channel_major_backward(g, p, m, dout, dg, dp));
}

void bias_dropout_residual_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                   const DropoutArgs& d, const Tensor& out) {
  constexpr std::string_view op = "bias_dropout_residual_forward";
  if (x.dtype() != out.dtype()) {  // a 16-bit update into an fp32 stream or the reverse, without bias
    FC_CHECK(is_sixteen_and_f32(x.dtype(), out.dtype()) && !bias.defined(), op, ": x ", x.str(), " into out ",
             out.str(), " (mixed dtypes: a 16-bit x into an f32 out or an f32 x into a 16-bit out, without bias)");
    FC_CHECK(x.shape() == out.shape() && x.device() == out.device() && x.is_contiguous() && out.is_contiguous(), op,
             ": x ", x.str(), " and out ", out.str(), " must be contiguous, of one shape and device");
  } else {
    check_unary(op, x, out);
  }
  FC_CHECK(x.dim() >= 1, op, ": x must have at least one dim, got ", x.str());
  check_dropout_p(op, d.p);
  if (bias.defined()) {
    FC_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1) && bias.dtype() == x.dtype() &&
                 bias.device() == x.device() && bias.is_contiguous(),
             op, ": bias ", bias.str(), " must be contiguous [", x.size(-1), "] with the dtype/device of x ",
             x.str());
  }
  if (residual.defined()) {
    check_like(op, "out", out, "residual", residual);
    check_contiguous(op, "residual", residual);
  }
  const DropoutMaskDesc mask = make_dropout_mask_desc(x.shape(), d.shared_dims, d.index_base);
  if (x.numel() == 0) return;
  FC_POINTWISE_DISPATCH(x.device(),
                        bias_dropout_residual_forward(x, bias, residual, d.p, d.seed, d.offset, mask, out));
}

void bias_dropout_residual_backward(const Tensor& dout, const DropoutArgs& d, const Tensor& dx,
                                    const Tensor& dbias) {
  constexpr std::string_view op = "bias_dropout_residual_backward";
  if (dout.dtype() != dx.dtype()) {  // the mixed forwards': an fp32 dout into a 16-bit dx or the reverse
    FC_CHECK(is_sixteen_and_f32(dout.dtype(), dx.dtype()) && !dbias.defined(), op, ": dout ", dout.str(), " into dx ",
             dx.str(), " (mixed dtypes: one of them f32, the other 16-bit, no dbias)");
    FC_CHECK(dout.shape() == dx.shape() && dout.device() == dx.device() && dout.is_contiguous() && dx.is_contiguous(),
             op, ": dout ", dout.str(), " and dx ", dx.str(), " must be contiguous, of one shape and device");
  } else {
    check_unary(op, dout, dx);
  }
  FC_CHECK(dout.dim() >= 1, op, ": dout must have at least one dim, got ", dout.str());
  check_dropout_p(op, d.p);
  if (dbias.defined()) check_bias_grad(op, "dbias", dbias, "dout", dout);
  const DropoutMaskDesc mask = make_dropout_mask_desc(dout.shape(), d.shared_dims, d.index_base);
  if (dout.numel() == 0) return;
  FC_POINTWISE_DISPATCH(dout.device(), dropout_backward(dout, d.p, d.seed, d.offset, mask, dx));
  if (dbias.defined()) sum_rows_accumulate(dx, dbias);
}

}  // namespace foldcore::ops
