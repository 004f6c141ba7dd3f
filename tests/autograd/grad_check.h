// Finite-difference checks of autograd Functions: backpropagate a random weighting w of the
// output through the engine, then compare each input's grad with central differences of
// weighted_sum(f(inputs), w) (tests/test_util.h check_gradient).
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/autograd.h"
#include "core/random.h"
#include "test_util.h"

namespace foldcore::autograd::testing {

using Fn = std::function<Variable(const std::vector<Variable>&)>;

// `inputs`: f32 CPU tensors; `needs`: which of them get a gradient (default all).
// Tolerance rationale (defaults): f32 forward, eps = 1e-2 ⇒ rounding error of the difference
// quotient ≈ 1e-7·|loss|/eps ≈ 1e-4 for O(10) losses, truncation O(eps²) ≈ 1e-4; so
// atol 3e-3 + rtol 3e-2 leaves an order of magnitude of margin while any wrong term fails.
inline void expect_grads_match_fd(const Fn& f, std::vector<Tensor> inputs, std::vector<bool> needs = {},
                                  double eps = 1e-2, double atol = 3e-3, double rtol = 3e-2) {
  if (needs.empty()) needs.assign(inputs.size(), true);
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) vars.emplace_back(inputs[i], static_cast<bool>(needs[i]));
  Variable out = f(vars);
  Generator gen(99);
  const Tensor w = randn(out.shape(), gen);
  backward({out}, {w});
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!needs[i]) continue;
    ASSERT_TRUE(vars[i].grad().defined()) << "input " << i << " got no gradient";
    SCOPED_TRACE("input " + std::to_string(i));
    ::foldcore::testing::check_gradient(
        [&] {
          NoGradGuard ng;
          std::vector<Variable> plain;
          for (const Tensor& t : inputs) plain.emplace_back(t);
          return ::foldcore::testing::weighted_sum(f(plain).value(), w);
        },
        inputs[i], vars[i].grad(), eps, atol, rtol);
  }
}

// randn with every |value| >= margin (kinks of relu / ignore thresholds stay out of FD reach).
inline Tensor randn_away(const Shape& s, Generator& g, float margin = 0.05f) {
  std::vector<float> v = randn(s, g).to_vector();
  for (float& x : v)
    if (std::abs(x) < margin) x = x < 0 ? -margin - 0.1f : margin + 0.1f;
  return Tensor::from_vector(v, s);
}

}  // namespace foldcore::autograd::testing
