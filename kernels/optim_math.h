// Per-element optimizer math shared by the CPU reference and the CUDA kernels, so both backends
// evaluate the same fp32 expressions in the same order (they differ only by FMA contraction).
#pragma once

#include <cmath>

#include "core/macros.h"

namespace foldcore::ops::detail {

// Step-dependent scalars, computed once on the host (powers in double, then rounded to fp32).
struct MomentCoeffs {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  float bias1 = 1.f, bias2 = 1.f;  // 1 − βᵗ, or 1 without bias correction
  float eps = 1e-8f;
  float grad_scale = 1.f;
};

inline MomentCoeffs make_moment_coeffs(float beta1, float beta2, float eps, float grad_scale, long long step,
                                       bool bias_correction) {
  MomentCoeffs c;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.one_minus_beta1 = 1.f - beta1;
  c.one_minus_beta2 = 1.f - beta2;
  if (bias_correction) {
    c.bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step)));
    c.bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step)));
  }
  c.eps = eps;
  c.grad_scale = grad_scale;
  return c;
}

// Updates the moments with gradient g and returns the Adam direction m̂ / (√v̂ + eps).
FOLDCORE_HD float update_moments(float g, float& m, float& v, const MomentCoeffs& c) {
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
  const float m_hat = m / c.bias1;
  const float v_hat = v / c.bias2;
  return m_hat / (sqrtf(v_hat) + c.eps);
}

// The Adam direction from already-updated moments (LAMB's second pass recomputes it: bit-identical
// to update_moments' return value since the same operations run on the same inputs).
FOLDCORE_HD float moment_direction(float m, float v, const MomentCoeffs& c) {
  const float m_hat = m / c.bias1;
  const float v_hat = v / c.bias2;
  return m_hat / (sqrtf(v_hat) + c.eps);
}

// One Adam/AdamW element; wd is 0 for segments without weight decay.
FOLDCORE_HD void adam_element(float& p, float grad, float& m, float& v, const MomentCoeffs& c, float lr, float wd,
                              bool decoupled) {
  float g = grad * c.grad_scale;
  if (!decoupled) g = g + wd * p;  // L2: the decay goes through the moments
  float d = update_moments(g, m, v, c);
  if (decoupled) d = d + wd * p;   // AdamW: p −= lr·wd·p with the old p
  p = p - lr * d;
}

// LAMB trust ratio r = ‖p‖/‖u‖, 1 when either norm is 0 (a fresh zero-initialised bias, or u = 0).
FOLDCORE_HD float lamb_trust_ratio(double p_norm_sq, double u_norm_sq) {
  if (p_norm_sq > 0.0 && u_norm_sq > 0.0) return static_cast<float>(sqrt(p_norm_sq) / sqrt(u_norm_sq));
  return 1.f;
}

}  // namespace foldcore::ops::detail
