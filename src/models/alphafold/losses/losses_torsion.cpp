#include "models/alphafold/losses/losses_torsion.h"

#include <cmath>

#include "core/error.h"
#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/losses/losses_common.h"

namespace foldcore::af2 {

SupervisedChiLoss supervised_chi_loss(const Tensor& angles, const Tensor& unnormalized_angles, const Tensor& aatype,
                                      const Tensor& seq_mask, const Tensor& chi_mask,
                                      const Tensor& chi_angles_sin_cos, const SupervisedChiLossConfig& config) {
  loss_detail::check_shape(angles, "sm angles", {-1, -1, 7, 2});
  const int64_t nl = angles.size(0), n = angles.size(1);
  FC_CHECK(nl > 0, "supervised chi loss needs at least one structure-module layer");
  const auto a = loss_detail::host_doubles(angles, "sm angles", {nl, n, 7, 2});
  const auto u = loss_detail::host_doubles(unnormalized_angles, "sm unnormalized_angles", {nl, n, 7, 2});
  const auto aa = loss_detail::host_ints(aatype, "aatype", {n});
  const auto smask = loss_detail::host_doubles(seq_mask, "seq_mask", {n});
  const auto cmask = loss_detail::host_doubles(chi_mask, "chi_mask", {n, 4});
  const auto truth = loss_detail::host_doubles(chi_angles_sin_cos, "chi_angles_sin_cos", {n, 4, 2});
  constexpr double kMeanEps = 1e-4;  // OpenFold masked_mean's default

  double cm_sum = 0, sm_sum = 0;
  for (double m : cmask) cm_sum += m;
  for (double m : smask) sm_sum += m;
  const double chi_denom = kMeanEps + static_cast<double>(nl) * cm_sum;
  const double norm_denom = kMeanEps + 7.0 * static_cast<double>(nl) * sm_sum;

  std::vector<double> ga(a.size(), 0.0), gu(u.size(), 0.0);
  double chi_sum = 0, norm_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    FC_CHECK(aa[i] >= 0 && aa[i] < data::rc::kRestypeNumWithX, "aatype ", aa[i], " outside 0..20");
    for (int64_t l = 0; l < nl; ++l) {
      for (int k = 0; k < 4; ++k) {
        const double m = cmask[4 * i + k];
        if (m == 0) continue;
        const double shift = 1 - 2 * data::rc::kChiPiPeriodic[aa[i]][k];
        const double* p = &a[((l * n + i) * 7 + 3 + k) * 2];
        const double* t = &truth[(4 * i + k) * 2];
        const double d0[2] = {t[0] - p[0], t[1] - p[1]};
        const double d1[2] = {shift * t[0] - p[0], shift * t[1] - p[1]};
        const double e0 = d0[0] * d0[0] + d0[1] * d0[1], e1 = d1[0] * d1[0] + d1[1] * d1[1];
        // torch.minimum passes the gradient to the smaller one (the first on ties we never hit
        // exactly; either is a valid subgradient).
        const bool use_shifted = e1 < e0;
        chi_sum += m * (use_shifted ? e1 : e0);
        const double* d = use_shifted ? d1 : d0;
        const double s = config.chi_weight * m / chi_denom;
        double* g = &ga[((l * n + i) * 7 + 3 + k) * 2];
        g[0] += -2 * s * d[0];
        g[1] += -2 * s * d[1];
      }
      if (smask[i] == 0) continue;
      for (int k = 0; k < 7; ++k) {
        const double* v = &u[((l * n + i) * 7 + k) * 2];
        const double norm = std::sqrt(v[0] * v[0] + v[1] * v[1] + config.eps);
        norm_sum += smask[i] * std::abs(norm - 1);
        const double sign = norm > 1 ? 1.0 : (norm < 1 ? -1.0 : 0.0);
        const double s = config.angle_norm_weight * smask[i] * sign / (norm_denom * norm);
        double* g = &gu[((l * n + i) * 7 + k) * 2];
        g[0] += s * v[0];
        g[1] += s * v[1];
      }
    }
  }
  SupervisedChiLoss out;
  out.value = config.chi_weight * chi_sum / chi_denom + config.angle_norm_weight * norm_sum / norm_denom;
  out.grad_angles = loss_detail::to_tensor(ga, {nl, n, 7, 2});
  out.grad_unnormalized_angles = loss_detail::to_tensor(gu, {nl, n, 7, 2});
  return out;
}

}  // namespace foldcore::af2
