#include "test_util.h"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/philox.h"
#include "kernels/elementwise.h"

namespace foldcore::testing {

CloseResult all_close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  CloseResult r;
  if (!(a.shape() == b.shape())) {
    r.ok = false;
    r.message = "shape mismatch: " + a.shape().str() + " vs " + b.shape().str();
    return r;
  }
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  double worst_excess = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double x = va[i], y = vb[i];
    const double d = std::fabs(x - y);
    if (std::isnan(x) != std::isnan(y) || (std::isnan(d) && !std::isnan(x))) {
      r.ok = false;
      r.worst = static_cast<int64_t>(i);
      worst_excess = INFINITY;
      continue;
    }
    if (std::isnan(x)) continue;
    r.max_abs = std::max(r.max_abs, d);
    r.max_rel = std::max(r.max_rel, d / std::max(std::fabs(y), 1e-30));
    const double excess = d - (atol + rtol * std::fabs(y));
    if (excess > 0) {
      r.ok = false;
      if (excess > worst_excess) {
        worst_excess = excess;
        r.worst = static_cast<int64_t>(i);
      }
    }
  }
  std::ostringstream os;
  os << "max_abs=" << r.max_abs << " max_rel=" << r.max_rel << " (atol=" << atol << ", rtol=" << rtol << ")";
  if (r.worst >= 0) os << "; worst at flat index " << r.worst << ": " << va[r.worst] << " vs " << vb[r.worst];
  r.message = os.str();
  return r;
}

void check_gradient(const std::function<double()>& loss, Tensor x, const Tensor& grad, double eps, double atol,
                    double rtol, int max_points, uint64_t seed) {
  ASSERT_EQ(x.dtype(), DType::f32);
  ASSERT_TRUE(x.device().is_cpu());
  ASSERT_TRUE(x.shape() == grad.shape()) << x.shape().str() << " vs " << grad.shape().str();
  const std::vector<float> g = grad.to_vector();
  const int64_t n = x.numel();
  Tensor xc = x;  // element access through strides
  std::vector<int64_t> points;
  if (n <= max_points) {
    for (int64_t i = 0; i < n; ++i) points.push_back(i);
  } else {
    for (int k = 0; k < max_points; ++k) points.push_back(static_cast<int64_t>(philox_bits(seed, 7, k) % n));
  }
  int failures = 0;
  for (int64_t flat : points) {
    // Locate the element through the strides.
    int64_t off = 0, rem = flat;
    for (int a = x.dim() - 1; a >= 0; --a) {
      off += (rem % x.size(a)) * x.stride(a);
      rem /= x.size(a);
    }
    float* p = static_cast<float*>(xc.data_ptr()) + off;
    const float orig = *p;
    *p = orig + static_cast<float>(eps);
    const double lp = loss();
    *p = orig - static_cast<float>(eps);
    const double lm = loss();
    *p = orig;
    const double fd = (lp - lm) / (2 * eps);
    const double an = g[flat];
    if (std::fabs(fd - an) > atol + rtol * std::fabs(fd)) {
      if (++failures <= 5)
        ADD_FAILURE() << "gradient mismatch at flat index " << flat << ": finite difference " << fd
                      << ", analytic " << an;
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << points.size() << " gradient points out of tolerance";
}

double weighted_sum(const Tensor& out, const Tensor& w) {
  const std::vector<float> a = out.to_vector(), b = w.to_vector();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

std::string shared_dir() {
  if (const char* e = std::getenv("FOLDCORE_SHARED_DIR")) return e;
#ifdef FOLDCORE_SOURCE_DIR
  return std::string(FOLDCORE_SOURCE_DIR) + "/../shared";
#else
  return "../shared";
#endif
}

MaskedGateResult masked_gate_channel_major(const Tensor& g, const Tensor& p, const Tensor& m, const Tensor& dout,
                                           bool fused) {
  auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); };
  MaskedGateResult r{like(dout), like(g), like(g)};
  if (fused) {
    ops::masked_gate_channel_major_forward(g, p, m, r.out);
    ops::masked_gate_channel_major_backward(g, p, m, dout, r.dg, r.dp);
    return r;
  }
  const Tensor m3 = m.unsqueeze(-1).expand(g.shape());
  Tensor ga = like(g), a = like(g);
  ops::sigmoid_gate_forward(g, p, ga);
  ops::mul(ga, m3, a);
  r.out.copy_(a.permute({2, 0, 1}));
  Tensor da = like(g), dga = like(g);
  da.copy_(dout.permute({1, 2, 0}));
  ops::mul(da, m3, dga);
  ops::sigmoid_gate_backward(g, p, dga, r.dg, r.dp);
  return r;
}

}  // namespace foldcore::testing
