// CPU reference reductions: double accumulation in a fixed order (outputs in parallel, each
// output summed serially), so results are deterministic and accurate enough to serve as the
// reference for the fp32 CUDA reductions.
#include "kernels/cpu/reduce_cpu.h"

#include <cmath>
#include <limits>

namespace foldcore::ops::cpu {
namespace {

inline int64_t group_offset(const ReduceGroup& g, int64_t i) {
  int64_t off = 0;
  for (int a = g.ndim - 1; a >= 0; --a) {
    off += (i % g.shape[a]) * g.strides[a];
    i /= g.shape[a];
  }
  return off;
}

// Calls f(offset) for every element of g (relative to 0) in row-major order, without divisions.
template <typename F> void for_each_offset(const ReduceGroup& g, F&& f) {
  if (g.ndim == 0) {
    f(int64_t{0});
    return;
  }
  if (g.ndim == 1) {
    for (int64_t i = 0; i < g.shape[0]; ++i) f(i * g.strides[0]);
    return;
  }
  int64_t idx[kMaxDims] = {};
  int64_t off = 0;
  const int64_t n = g.numel();
  for (int64_t k = 0; k < n; ++k) {
    f(off);
    for (int a = g.ndim - 1; a >= 0; --a) {  // odometer increment
      off += g.strides[a];
      if (++idx[a] < g.shape[a]) break;
      off -= g.strides[a] * g.shape[a];
      idx[a] = 0;
    }
  }
}

}  // namespace

void reduce_sum(const Tensor& x, const ReducePlan& plan, float scale, bool accumulate, const Tensor& out) {
  dispatch_float(x.dtype(), [&](auto xtag) {
    using TX = decltype(xtag);
    dispatch_float(out.dtype(), [&](auto otag) {
      using TO = decltype(otag);
      const TX* px = static_cast<const TX*>(x.data_ptr());
      TO* po = static_cast<TO*>(out.data_ptr());
      const int64_t k = plan.kept.numel();
      const int64_t r = plan.reduced.numel();
#pragma omp parallel for if (k * r > (1 << 16))
      for (int64_t o = 0; o < k; ++o) {
        const TX* base = px + group_offset(plan.kept, o);
        double acc = 0;
        for_each_offset(plan.reduced, [&](int64_t off) { acc += static_cast<double>(static_cast<float>(base[off])); });
        double v = static_cast<double>(scale) * acc;
        if (accumulate) v += static_cast<double>(static_cast<float>(po[o]));
        po[o] = TO(static_cast<float>(v));
      }
    });
  });
}

void reduce_sum_batched(const Tensor& x, const ReducePlan& plan, int64_t batches, const Tensor& out) {
  for (int64_t b = 0; b < batches; ++b) reduce_sum(x.select(0, b), plan, 1.f, true, out.select(0, b));
}

namespace {
// Visits every element of x (any strides) as float, serially in row-major order.
template <typename F> void for_each_value(const Tensor& x, F&& f) {
  ReduceGroup g;
  g.ndim = x.dim();
  for (int a = 0; a < x.dim(); ++a) {
    g.shape[a] = x.size(a);
    g.strides[a] = x.stride(a);
  }
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.data_ptr());
    for_each_offset(g, [&](int64_t off) { f(static_cast<float>(p[off])); });
  });
}
}  // namespace

double sum_squares(const Tensor& x) {
  double acc = 0;
  for_each_value(x, [&](float v) { acc += static_cast<double>(v) * v; });
  return acc;
}

double max_abs(const Tensor& x) {
  double m = 0;
  bool nan = false;
  for_each_value(x, [&](float v) {
    if (std::isnan(v)) nan = true;
    m = std::max(m, static_cast<double>(std::fabs(v)));
  });
  return nan ? std::numeric_limits<double>::quiet_NaN() : m;
}

}  // namespace foldcore::ops::cpu
