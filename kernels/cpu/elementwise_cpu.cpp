// CPU reference for the elementwise family: plain loops over contiguous storage, fp32 math,
// 16-bit types converted on load/store. OpenMP splits the flat index range.
#include "kernels/cpu/elementwise_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/dropout_keep_cpu.h"

namespace foldcore::ops::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this OpenMP overhead dominates

template <typename T> inline float ld(const T* p, int64_t i) { return static_cast<float>(p[i]); }
template <typename T> inline void st(T* p, int64_t i, float v) { p[i] = T(v); }

// out[i] = f(i) for a contiguous `out` of the float dtype T (f returns float).
template <typename T, typename F> void fill_map(const Tensor& out, F&& f) {
  T* o = static_cast<T*>(out.data_ptr());
  const int64_t n = out.numel();
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) st(o, i, f(i));
}

// Element offset of flat row-major index i in a strided tensor of the same shape.
inline int64_t strided_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int a = t.dim() - 1; a >= 0; --a) {
    off += (i % t.size(a)) * t.stride(a);
    i /= t.size(a);
  }
  return off;
}

inline float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
// gelu'(x) = Φ(x) + x·φ(x)
inline float gelu_grad(float x) {
  const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * std::exp(-0.5f * x * x);
  return cdf + x * pdf;
}
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

namespace {

// binary with a, b and out of the float dtypes TA, TB, TO (one dtype, or mul's mixed ones): fp32
// math on the loaded values, out rounded once as stored.
template <typename TA, typename TB, typename TO>
void binary_typed(float alpha, const Tensor& a, float beta, const Tensor& b, float gamma, const Tensor& out) {
  const TA* pa = static_cast<const TA*>(a.data_ptr());
  const TB* pb = static_cast<const TB*>(b.data_ptr());
  auto f = [=](float x, float y) { return alpha * x + beta * y + gamma * x * y; };
  if (b.is_contiguous() || out.dim() == 0) {
    fill_map<TO>(out, [&](int64_t i) { return f(ld(pa, i), ld(pb, i)); });
    return;
  }
  // Strided / broadcast b (a mask [S, N, 1] over [S, N, c], a row vector over a matrix): one
  // offset computation per row of the last dim, then a plain strided inner loop.
  TO* po = static_cast<TO*>(out.data_ptr());
  const int64_t c = out.size(-1), rows = c > 0 ? out.numel() / c : 0, sb = b.stride(-1);
#pragma omp parallel for schedule(static) if (out.numel() > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const TB* br = pb + strided_offset(b, r * c);
    const int64_t o = r * c;
    for (int64_t j = 0; j < c; ++j) st(po, o + j, f(ld(pa, o + j), ld(br, j * sb)));
  }
}

}  // namespace

void binary(float alpha, const Tensor& a, float beta, const Tensor& b, float gamma, const Tensor& out) {
  if (a.dtype() == b.dtype() && a.dtype() == out.dtype()) {
    dispatch_float(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      binary_typed<T, T, T>(alpha, a, beta, b, gamma, out);
    });
    return;
  }
  // mul's mixed dtypes (kernels/elementwise.h): b is f32, and a or out.
  dispatch_float(a.dtype(), [&](auto ta) {
    dispatch_float(out.dtype(), [&](auto to) {
      binary_typed<decltype(ta), float, decltype(to)>(alpha, a, beta, b, gamma, out);
    });
  });
}

void scale(const Tensor& x, float s, const Tensor& out) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    fill_map<T>(out, [&](int64_t i) { return s * ld(px, i); });
  });
}

void reciprocal_shift(const Tensor& x, float eps, const Tensor& out) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    fill_map<T>(out, [&](int64_t i) { return 1.f / (ld(px, i) + eps); });
  });
}

// Unary/binary activation bodies: each reads its inputs (same dtype T) at i and writes out[i].
#define FC_EW_UNARY(NAME, IN, OUT, EXPR)                                  \
  void NAME(const Tensor& IN, const Tensor& OUT) {                        \
    dispatch_float(IN.dtype(), [&](auto tag) {                            \
      using T = decltype(tag);                                            \
      const T* p0 = static_cast<const T*>(IN.data_ptr());                 \
      fill_map<T>(OUT, [&](int64_t i) {                                   \
        const float v = ld(p0, i);                                        \
        return EXPR;                                                      \
      });                                                                 \
    });                                                                   \
  }
#define FC_EW_BINARY(NAME, IN0, IN1, OUT, EXPR)                           \
  void NAME(const Tensor& IN0, const Tensor& IN1, const Tensor& OUT) {    \
    dispatch_float(IN0.dtype(), [&](auto tag) {                           \
      using T = decltype(tag);                                            \
      const T* p0 = static_cast<const T*>(IN0.data_ptr());                \
      const T* p1 = static_cast<const T*>(IN1.data_ptr());                \
      fill_map<T>(OUT, [&](int64_t i) {                                   \
        const float v = ld(p0, i), w = ld(p1, i);                         \
        return EXPR;                                                      \
      });                                                                 \
    });                                                                   \
  }

FC_EW_UNARY(relu_forward, x, y, v > 0.f ? v : 0.f)
FC_EW_BINARY(relu_backward, x, dy, dx, v > 0.f ? w : 0.f)
FC_EW_UNARY(gelu_forward, x, y, gelu(v))
FC_EW_BINARY(gelu_backward, x, dy, dx, w * gelu_grad(v))
FC_EW_UNARY(sigmoid_forward, x, y, sigmoid(v))
FC_EW_BINARY(sigmoid_backward, y, dy, dx, w * v * (1.f - v))
FC_EW_BINARY(sigmoid_gate_forward, g, x, out, sigmoid(v) * w)

#undef FC_EW_UNARY
#undef FC_EW_BINARY

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dout, const Tensor& dg,
                           const Tensor& dx) {
  dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(g.data_ptr());
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pd = static_cast<const T*>(dout.data_ptr());
    T* pdg = static_cast<T*>(dg.data_ptr());
    T* pdx = static_cast<T*>(dx.data_ptr());
    const int64_t n = g.numel();
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float s = sigmoid(ld(pg, i)), d = ld(pd, i), xv = ld(px, i);
      st(pdg, i, d * xv * s * (1.f - s));
      st(pdx, i, d * s);
    }
  });
}

// The masked gated edge, channel-major: blocks of kEdgeRows rows (i, k) in parallel, and within a
// block channel by channel, so the channel-major side is written (or read) in runs of the block's
// rows while the block's [rows, C] inputs stay in cache. The expressions are sigmoid_gate's and
// mul's, in their order, so the values are the composition's.
constexpr int64_t kEdgeRows = 64;

template <typename F> void for_edge_blocks(int64_t rows, int64_t c, F f) {
#pragma omp parallel for if (rows * c > kParallelMin)
  for (int64_t r0 = 0; r0 < rows; r0 += kEdgeRows) {
    const int64_t r1 = std::min(rows, r0 + kEdgeRows);
    for (int64_t q = 0; q < c; ++q)
      for (int64_t r = r0; r < r1; ++r) f(r, q);
  }
}

void masked_gate_channel_major_forward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& out) {
  dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(g.data_ptr());
    const T* pp = static_cast<const T*>(p.data_ptr());
    const T* pm = static_cast<const T*>(m.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    const int64_t rows = g.size(0) * g.size(1), c = g.size(2);
    for_edge_blocks(rows, c, [&](int64_t r, int64_t q) {
      const T ga = T(sigmoid(ld(pg, r * c + q)) * ld(pp, r * c + q));
      st(po, q * rows + r, static_cast<float>(ga) * ld(pm, r));
    });
  });
}

void masked_gate_channel_major_backward(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                        const Tensor& dg, const Tensor& dp) {
  dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(g.data_ptr());
    const T* pp = static_cast<const T*>(p.data_ptr());
    const T* pm = static_cast<const T*>(m.data_ptr());
    const T* pd = static_cast<const T*>(dout.data_ptr());
    T* pdg = static_cast<T*>(dg.data_ptr());
    T* pdp = static_cast<T*>(dp.data_ptr());
    const int64_t rows = g.size(0) * g.size(1), c = g.size(2);
    for_edge_blocks(rows, c, [&](int64_t r, int64_t q) {
      const int64_t i = r * c + q;
      const float d = static_cast<float>(T(ld(pd, q * rows + r) * ld(pm, r)));  // mul's backward
      const float sg = sigmoid(ld(pg, i)), xv = ld(pp, i);
      st(pdg, i, d * xv * sg * (1.f - sg));
      st(pdp, i, d * sg);
    });
  });
}

// Dropout by rows of the last dim: each row's keep decisions at once (DropoutKeep: one Philox
// block per four decisions, a shared mask computed once), then the row's elements.
template <typename T, typename F>
void map_rows_with_keep(const Tensor& out, float p, uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                        F&& f) {
  T* o = static_cast<T*>(out.data_ptr());
  const int64_t c = out.size(-1), rows = c > 0 ? out.numel() / c : 0;
  if (p <= 0.f) {
    fill_map<T>(out, [&](int64_t i) { return f(i, true); });
    return;
  }
  const DropoutKeep keeps(seed, offset, p, mask, c);
#pragma omp parallel if (out.numel() > kParallelMin)
  {
    std::vector<unsigned char> keep(static_cast<size_t>(c));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      keeps.row(r, keep.data());
      const int64_t i0 = r * c;
      for (int64_t j = 0; j < c; ++j) st(o, i0 + j, f(i0 + j, keep[static_cast<size_t>(j)] != 0));
    }
  }
}

void bias_dropout_residual_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, float p,
                                   uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                                   const Tensor& out) {
  const int64_t c = x.size(-1);
  const float keep_scale = dropout_scale(p);
  // x and bias in x's dtype; residual and out in out's (the same, or fp32 for a 16-bit x).
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(out.dtype(), [&](auto otag) {
      using O = decltype(otag);
      const T* px = static_cast<const T*>(x.data_ptr());
      const T* pb = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
      // out may alias residual: each element reads residual[i] before writing out[i].
      const O* pr = residual.defined() ? static_cast<const O*>(residual.data_ptr()) : nullptr;
      // p = 0: every element kept and keep_scale = 1, so v · 1 is v exactly.
      map_rows_with_keep<O>(out, p, seed, offset, mask, [&](int64_t i, bool kept) {
        const float v = ld(px, i) + (pb ? ld(pb, i % c) : 0.f);
        return (pr ? ld(pr, i) : 0.f) + (kept ? v * keep_scale : 0.f);
      });
    });
  });
}

void dropout_backward(const Tensor& dout, float p, uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                      const Tensor& dx) {
  const float keep_scale = dropout_scale(p);
  dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dx.dtype(), [&](auto xtag) {  // dx: dout's dtype, or 16-bit from an fp32 dout
      using X = decltype(xtag);
      const T* pd = static_cast<const T*>(dout.data_ptr());
      map_rows_with_keep<X>(dx, p, seed, offset, mask, [&](int64_t i, bool kept) {
        return kept ? ld(pd, i) * keep_scale : 0.f;  // p = 0: kept, keep_scale = 1
      });
    });
  });
}

}  // namespace foldcore::ops::cpu
