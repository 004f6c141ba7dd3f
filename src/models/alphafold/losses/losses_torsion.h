// Supervised χ loss with the angle-norm auxiliary term (AlphaFold2 suppl. 1.9.1, Alg. 27), as
// OpenFold's supervised_chi_loss defines it, with its analytic gradient. Conventions of
// losses_common.h.
//
// Over structure-module layers l, residues i and χ_k (k = 1..4, torsion slots 3..6):
//   e_lik = min(|α*_ik − α_lik|², |(1 − 2π_ik)·α*_ik − α_lik|²)   (π_ik: χ_k π-periodic for aatype_i)
//   L_χ    = Σ_lik m_ik e_lik / (ε_m + L·Σ_ik m_ik)                 (m = chi_mask, ε_m = 1e-4)
//   L_norm = Σ_lit s_i |sqrt(|ũ_lit|² + ε) − 1| / (ε_m + 7L·Σ_i s_i)  (ũ unnormalised, s = seq_mask)
//   loss   = chi_weight·L_χ + angle_norm_weight·L_norm,   chi_weight 0.5, angle_norm_weight 0.01
// (OpenFold's values; ε = 1e-8 its config eps). α are the normalised (sin, cos) pairs.
#pragma once

#include "core/tensor.h"

namespace foldcore::af2 {

struct SupervisedChiLossConfig {
  double chi_weight = 0.5;
  double angle_norm_weight = 0.01;
  double eps = 1e-8;
};

struct SupervisedChiLoss {
  double value = 0;
  Tensor grad_angles;               // [L, N, 7, 2]
  Tensor grad_unnormalized_angles;  // [L, N, 7, 2]
};

// angles / unnormalized_angles [L, N, 7, 2] (every structure-module layer), aatype [N] (0..20),
// seq_mask [N], chi_mask [N, 4], chi_angles_sin_cos [N, 4, 2].
SupervisedChiLoss supervised_chi_loss(const Tensor& angles, const Tensor& unnormalized_angles, const Tensor& aatype,
                                      const Tensor& seq_mask, const Tensor& chi_mask,
                                      const Tensor& chi_angles_sin_cos, const SupervisedChiLossConfig& config = {});

}  // namespace foldcore::af2
