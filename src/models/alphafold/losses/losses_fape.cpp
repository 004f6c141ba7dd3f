#include "models/alphafold/losses/losses_fape.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "models/alphafold/losses/losses_common.h"

namespace foldcore::af2 {
namespace {

using loss_detail::Frame;

// Alg. 28 over F frames and P points (see the header for the formula). `upstream` scales the
// gradient (d total / d FAPE); the gradients are added into grad_r [F][9], grad_t [F][3] and
// grad_x [P·3] when upstream ≠ 0. clamp ≤ 0 means no clamp. Returns FAPE.
struct FapeGrads {
  std::vector<std::array<double, 9>>* r = nullptr;
  std::vector<std::array<double, 3>>* t = nullptr;
  std::vector<double>* x = nullptr;
};
double fape(const std::vector<Frame>& pred, const std::vector<Frame>& truth, const std::vector<double>& frame_mask,
            const std::vector<double>& x, const std::vector<double>& x_true, const std::vector<double>& point_mask,
            double clamp, double length_scale, double eps, double upstream, const FapeGrads& grads) {
  const size_t nf = pred.size(), np = point_mask.size();
  double sum_fm = 0, sum_pm = 0;
  for (double m : frame_mask) sum_fm += m;
  for (double m : point_mask) sum_pm += m;
  const double fm_denom = eps + sum_fm, pm_denom = eps + sum_pm;
  const bool want_grad = upstream != 0;
  double total = 0;
  for (size_t f = 0; f < nf; ++f) {
    if (frame_mask[f] == 0) continue;
    const Frame& pf = pred[f];
    const Frame& tf = truth[f];
    double row = 0;  // Σ_p over this frame
    std::array<double, 9> gr{};
    std::array<double, 3> gt{};
    for (size_t p = 0; p < np; ++p) {
      if (point_mask[p] == 0) continue;
      const auto lp = loss_detail::to_local(pf, &x[3 * p]);
      const auto lt = loss_detail::to_local(tf, &x_true[3 * p]);
      const double e[3] = {lp[0] - lt[0], lp[1] - lt[1], lp[2] - lt[2]};
      const double d = std::sqrt(e[0] * e[0] + e[1] * e[1] + e[2] * e[2] + eps);
      const bool clamped = clamp > 0 && d > clamp;
      const double m = frame_mask[f] * point_mask[p];
      row += (clamped ? clamp : d) / length_scale * m;
      if (!want_grad || clamped) continue;
      // g = ∂L/∂x_local = upstream · m / (Z · fm_denom · pm_denom) · e / d
      const double s = upstream * m / (length_scale * fm_denom * pm_denom * d);
      const double g[3] = {s * e[0], s * e[1], s * e[2]};
      const double dx[3] = {x[3 * p] - pf.t[0], x[3 * p + 1] - pf.t[1], x[3 * p + 2] - pf.t[2]};
      for (int j = 0; j < 3; ++j) {
        // (R g)_j = Σ_i R_ji g_i
        const double rg = pf.r[3 * j] * g[0] + pf.r[3 * j + 1] * g[1] + pf.r[3 * j + 2] * g[2];
        (*grads.x)[3 * p + j] += rg;
        gt[j] -= rg;
        for (int i = 0; i < 3; ++i) gr[3 * j + i] += g[i] * dx[j];
      }
    }
    total += row / fm_denom;
    if (want_grad) {
      for (int k = 0; k < 9; ++k) (*grads.r)[f][k] += gr[k];
      for (int k = 0; k < 3; ++k) (*grads.t)[f][k] += gt[k];
    }
  }
  return total / pm_denom;
}

// ∂/∂(4x4 matrix) from ∂/∂R and ∂/∂t (the bottom row gets 0).
void write_4x4_grad(const std::array<double, 9>& gr, const std::array<double, 3>& gt, double* m) {
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[4 * i + j] = gr[3 * i + j];
    m[4 * i + 3] = gt[i];
  }
}

std::vector<Frame> frames_from_4x4(const std::vector<double>& m, size_t n) {
  std::vector<Frame> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = loss_detail::frame_from_4x4(&m[16 * i]);
  return out;
}

}  // namespace

BackboneFapeLoss backbone_fape_loss(const Tensor& frames, const Tensor& backbone_rigid_tensor,
                                    const Tensor& backbone_rigid_mask, double use_clamped_fape,
                                    const FapeLossConfig& config) {
  FC_CHECK(frames.defined(), "AlphaFold loss input 'sm frames' is missing");
  // [L, N, 7] (quaternion, translation) or [L, N, 4, 4].
  const bool quat = frames.dim() == 3;
  loss_detail::check_shape(frames, "sm frames", quat ? std::vector<int64_t>{-1, -1, 7} : std::vector<int64_t>{-1, -1, 4, 4});
  const int64_t nl = frames.size(0), n = frames.size(1), width = quat ? 7 : 16;
  FC_CHECK(nl > 0, "backbone FAPE needs at least one structure-module layer");
  FC_CHECK(use_clamped_fape >= 0 && use_clamped_fape <= 1, "use_clamped_fape must lie in [0, 1], got ",
           use_clamped_fape);
  const auto values = frames.to_vector();
  const std::vector<double> fr(values.begin(), values.end());
  const auto gt4 = loss_detail::host_doubles(backbone_rigid_tensor, "backbone_rigid_tensor", {n, 4, 4});
  const auto mask = loss_detail::host_doubles(backbone_rigid_mask, "backbone_rigid_mask", {n});
  const auto truth = frames_from_4x4(gt4, static_cast<size_t>(n));
  std::vector<double> x_true(3 * n);
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 3; ++k) x_true[3 * i + k] = truth[i].t[k];

  BackboneFapeLoss out;
  std::vector<double> grad(fr.size(), 0.0);
  for (int64_t l = 0; l < nl; ++l) {
    const double* layer = &fr[width * n * l];
    std::vector<Frame> pred(n);
    std::vector<double> x(3 * n);
    for (int64_t i = 0; i < n; ++i) {
      if (quat) {
        pred[i].r = loss_detail::quat_to_rot(&layer[7 * i]);
        for (int k = 0; k < 3; ++k) pred[i].t[k] = layer[7 * i + 4 + k];
      } else {
        pred[i] = loss_detail::frame_from_4x4(&layer[16 * i]);
      }
      for (int k = 0; k < 3; ++k) x[3 * i + k] = pred[i].t[k];
    }
    std::vector<std::array<double, 9>> gr(n);
    std::vector<std::array<double, 3>> gt(n);
    std::vector<double> gx(3 * n, 0.0);
    const FapeGrads g{&gr, &gt, &gx};
    const double w_clamped = use_clamped_fape / nl, w_free = (1 - use_clamped_fape) / nl;
    // OpenFold evaluates both and mixes them; a weight of 0 contributes nothing to value or grad.
    if (w_clamped != 0)
      out.value += w_clamped * fape(pred, truth, mask, x, x_true, mask, config.clamp_distance, config.length_scale,
                                    config.eps, w_clamped, g);
    if (w_free != 0)
      out.value += w_free * fape(pred, truth, mask, x, x_true, mask, -1, config.length_scale, config.eps, w_free, g);
    double* gl = &grad[width * n * l];
    for (int64_t i = 0; i < n; ++i) {
      // The translation is both the frame origin and the point (Cα).
      for (int k = 0; k < 3; ++k) gt[i][k] += gx[3 * i + k];
      if (quat) {
        const auto gq = loss_detail::quat_to_rot_backward(&layer[7 * i], gr[i]);
        for (int k = 0; k < 4; ++k) gl[7 * i + k] = gq[k];
        for (int k = 0; k < 3; ++k) gl[7 * i + 4 + k] = gt[i][k];
      } else {
        write_4x4_grad(gr[i], gt[i], &gl[16 * i]);
      }
    }
  }
  out.grad_frames = loss_detail::to_tensor(grad, frames.shape());
  return out;
}

RenamedGroundTruth compute_renamed_ground_truth(const Tensor& atom14_pred_positions, const Tensor& atom14_gt_positions,
                                                const Tensor& atom14_alt_gt_positions, const Tensor& atom14_gt_exists,
                                                const Tensor& atom14_alt_gt_exists,
                                                const Tensor& atom14_atom_is_ambiguous) {
  loss_detail::check_shape(atom14_pred_positions, "atom14 predicted positions", {-1, 14, 3});
  const int64_t n = atom14_pred_positions.size(0);
  const auto pred = loss_detail::host_doubles(atom14_pred_positions, "atom14 predicted positions", {n, 14, 3});
  const auto gt = loss_detail::host_doubles(atom14_gt_positions, "atom14_gt_positions", {n, 14, 3});
  const auto alt = loss_detail::host_doubles(atom14_alt_gt_positions, "atom14_alt_gt_positions", {n, 14, 3});
  const auto exists = loss_detail::host_doubles(atom14_gt_exists, "atom14_gt_exists", {n, 14});
  const auto alt_exists = loss_detail::host_doubles(atom14_alt_gt_exists, "atom14_alt_gt_exists", {n, 14});
  const auto amb = loss_detail::host_doubles(atom14_atom_is_ambiguous, "atom14_atom_is_ambiguous", {n, 14});
  constexpr double kEps = 1e-10;
  auto dist = [](const std::vector<double>& p, int64_t u, int64_t v) {
    const double dx = p[3 * u] - p[3 * v], dy = p[3 * u + 1] - p[3 * v + 1], dz = p[3 * u + 2] - p[3 * v + 2];
    return std::sqrt(kEps + dx * dx + dy * dy + dz * dz);
  };
  const int64_t na = 14 * n;
  std::vector<double> better(n, 0.0), pos(gt), ex(exists);
  for (int64_t i = 0; i < n; ++i) {
    double l_gt = 0, l_alt = 0;
    for (int64_t a = 14 * i; a < 14 * i + 14; ++a) {
      const double ma = exists[a] * amb[a];
      if (ma == 0) continue;
      for (int64_t b = 0; b < na; ++b) {
        const double m = ma * exists[b] * (1 - amb[b]);
        if (m == 0) continue;
        const double dp = dist(pred, a, b), dg = dist(gt, a, b), da = dist(alt, a, b);
        l_gt += m * std::sqrt(kEps + (dp - dg) * (dp - dg));
        l_alt += m * std::sqrt(kEps + (dp - da) * (dp - da));
      }
    }
    if (l_alt < l_gt) {
      better[i] = 1;
      for (int64_t a = 14 * i; a < 14 * i + 14; ++a) {
        for (int k = 0; k < 3; ++k) pos[3 * a + k] = alt[3 * a + k];
        ex[a] = alt_exists[a];
      }
    }
  }
  return {loss_detail::to_tensor(better, {n}), loss_detail::to_tensor(pos, {n, 14, 3}),
          loss_detail::to_tensor(ex, {n, 14})};
}

SidechainFapeLoss sidechain_fape_loss(const Tensor& sidechain_frames, const Tensor& atom14_pred_positions,
                                      const Tensor& rigidgroups_gt_frames, const Tensor& rigidgroups_alt_gt_frames,
                                      const Tensor& rigidgroups_gt_exists, const RenamedGroundTruth& renamed,
                                      const FapeLossConfig& config) {
  loss_detail::check_shape(sidechain_frames, "sidechain frames", {-1, 8, 4, 4});
  const int64_t n = sidechain_frames.size(0);
  const auto sc = loss_detail::host_doubles(sidechain_frames, "sidechain frames", {n, 8, 4, 4});
  const auto x = loss_detail::host_doubles(atom14_pred_positions, "atom14 predicted positions", {n, 14, 3});
  const auto gt4 = loss_detail::host_doubles(rigidgroups_gt_frames, "rigidgroups_gt_frames", {n, 8, 4, 4});
  const auto alt4 = loss_detail::host_doubles(rigidgroups_alt_gt_frames, "rigidgroups_alt_gt_frames", {n, 8, 4, 4});
  const auto fmask = loss_detail::host_doubles(rigidgroups_gt_exists, "rigidgroups_gt_exists", {n, 8});
  const auto better = loss_detail::host_doubles(renamed.alt_naming_is_better, "alt_naming_is_better", {n});
  const auto x_true = loss_detail::host_doubles(renamed.positions, "renamed_atom14_gt_positions", {n, 14, 3});
  const auto pmask = loss_detail::host_doubles(renamed.exists, "renamed_atom14_gt_exists", {n, 14});

  const size_t nf = static_cast<size_t>(8 * n);
  const auto pred = frames_from_4x4(sc, nf);
  std::vector<Frame> truth(nf);
  for (size_t f = 0; f < nf; ++f) {
    // (1 − b)·gt + b·alt, elementwise on the 4x4 matrices as OpenFold blends them (b ∈ {0, 1}).
    const double b = better[f / 8];
    double m[16];
    for (int k = 0; k < 16; ++k) m[k] = (1 - b) * gt4[16 * f + k] + b * alt4[16 * f + k];
    truth[f] = loss_detail::frame_from_4x4(m);
  }
  std::vector<std::array<double, 9>> gr(nf);
  std::vector<std::array<double, 3>> gt(nf);
  std::vector<double> gx(x.size(), 0.0);
  SidechainFapeLoss out;
  out.value = fape(pred, truth, fmask, x, x_true, pmask, config.clamp_distance, config.length_scale, config.eps, 1.0,
                   FapeGrads{&gr, &gt, &gx});
  std::vector<double> gf(16 * nf, 0.0);
  for (size_t f = 0; f < nf; ++f) write_4x4_grad(gr[f], gt[f], &gf[16 * f]);
  out.grad_frames = loss_detail::to_tensor(gf, {n, 8, 4, 4});
  out.grad_positions = loss_detail::to_tensor(gx, {n, 14, 3});
  return out;
}

}  // namespace foldcore::af2
