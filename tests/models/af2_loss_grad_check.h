// Central-difference gradient check for the AlphaFold2 losses (losses_*.h).
//
// The losses return double values computed in double from f32 inputs, so the check perturbs the
// f32 input by ±h and divides by the step the f32 input actually took, (x⁺ − x⁻), not 2h: the
// rounding of x ± h then costs nothing. Error budget per coordinate: truncation h²/6·|f'''|
// (≤ 1e-7 relative at h = 1e-3 on these O(1)-curvature inputs), double rounding ~1e-16·|L|/h,
// and the f32 storage of the analytic gradient (6e-8 relative). Hence
//   |fd − analytic| ≤ atol_frac·max|analytic| + rtol·|fd|,  atol_frac = rtol = 1e-5 by default,
// which a wrong sign, factor, mask or index misses by orders of magnitude. The losses have kinks
// (clamp, relu, |·|, min); test inputs are drawn so that no coordinate sits within h of one
// (a straddled kink would show up as one isolated O(1) mismatch).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace foldcore::af2 {

// Coordinates to check: all of them when max_points is 0 or ≥ numel; otherwise max_points/2 drawn
// (seeded) among the coordinates with a nonzero analytic gradient and the rest among all, so that
// sparse gradients (masked MSA, masked residues) are exercised and zeros are checked too.
inline std::vector<int64_t> fd_points(const std::vector<float>& grad, int64_t max_points, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(grad.size());
  std::vector<int64_t> points;
  if (max_points <= 0 || max_points >= n) {
    for (int64_t k = 0; k < n; ++k) points.push_back(k);
    return points;
  }
  std::vector<int64_t> nonzero;
  for (int64_t k = 0; k < n; ++k)
    if (grad[k] != 0) nonzero.push_back(k);
  std::mt19937_64 rng(seed);
  for (int64_t p = 0; p < max_points; ++p) {
    const bool from_nonzero = p < max_points / 2 && !nonzero.empty();
    points.push_back(from_nonzero ? nonzero[rng() % nonzero.size()] : static_cast<int64_t>(rng() % n));
  }
  return points;
}

// Tolerance |fd − analytic| ≤ atol_frac·max|analytic| + rtol·|fd| + 1e-15·|L|/h, the last term the
// double rounding of a large total L (e.g. 545 on the fixture) divided by the step.
inline void expect_fd_gradient(const std::function<double()>& loss, Tensor x, const Tensor& grad,
                               const std::string& what, double h = 1e-3, double rtol = 1e-5,
                               double atol_frac = 1e-5, int64_t max_points = 0, uint64_t seed = 7) {
  ASSERT_EQ(x.dtype(), DType::f32) << what;
  ASSERT_TRUE(x.is_contiguous()) << what;
  ASSERT_EQ(x.shape(), grad.shape()) << what;
  const std::vector<float> g = grad.to_vector();
  double gmax = 0;
  for (float v : g) gmax = std::max(gmax, static_cast<double>(std::abs(v)));
  const double noise = 1e-15 * std::abs(loss()) / h;
  float* p = x.data<float>();
  int failures = 0;
  int64_t checked = 0, nonzero = 0;
  double worst = 0;
  for (int64_t k : fd_points(g, max_points, seed)) {
    const float orig = p[k];
    const float up = orig + static_cast<float>(h), down = orig - static_cast<float>(h);
    p[k] = up;
    const double lp = loss();
    p[k] = down;
    const double lm = loss();
    p[k] = orig;
    const double fd = (lp - lm) / (static_cast<double>(up) - static_cast<double>(down));
    const double err = std::abs(fd - g[k]);
    worst = std::max(worst, err / std::max(gmax, 1e-30));
    ++checked;
    nonzero += g[k] != 0;
    if (err > atol_frac * gmax + rtol * std::abs(fd) + noise && ++failures <= 5)
      ADD_FAILURE() << what << ": index " << k << " finite difference " << fd << ", analytic " << g[k]
                    << " (max |grad| " << gmax << ")";
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << checked << " coordinates out of tolerance";
  EXPECT_GT(nonzero, 0) << what << ": no coordinate with a nonzero gradient was tested";
  std::printf("  %-40s %5lld coords (%lld nonzero), max |fd - grad| / max|grad| = %.2e\n", what.c_str(),
              static_cast<long long>(checked), static_cast<long long>(nonzero), worst);
}

}  // namespace foldcore::af2
