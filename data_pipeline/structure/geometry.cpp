#include "data_pipeline/structure/geometry.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data::geom {

double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }

double dihedral(const Vec3& a, const Vec3& b, const Vec3& c, const Vec3& d) {
  const Vec3 b1 = sub(b, a), b2 = sub(c, b), b3 = sub(d, c);
  const Vec3 n1 = cross(b1, b2), n2 = cross(b2, b3);
  return std::atan2(norm(b2) * dot(b1, n2), dot(n1, n2));
}

Vec3 Frame::to_local(const Vec3& p) const {
  const Vec3 d = sub(p, origin);
  return {dot(axes[0], d), dot(axes[1], d), dot(axes[2], d)};
}

Vec3 Frame::to_global(const Vec3& local) const {
  Vec3 out = origin;
  for (int k = 0; k < 3; ++k) out = add(out, scale(axes[static_cast<size_t>(k)], local[static_cast<size_t>(k)]));
  return out;
}

Frame frame_from_three_points(const Vec3& p_neg_x_axis, const Vec3& origin, const Vec3& p_xy_plane, double eps) {
  Vec3 e0 = sub(origin, p_neg_x_axis);
  e0 = scale(e0, 1.0 / std::sqrt(dot(e0, e0) + eps));
  Vec3 e1 = sub(p_xy_plane, origin);
  e1 = sub(e1, scale(e0, dot(e0, e1)));
  e1 = scale(e1, 1.0 / std::sqrt(dot(e1, e1) + eps));
  return Frame{{e0, e1, cross(e0, e1)}, origin};
}

std::array<double, 2> torsion_sin_cos(const Vec3& a, const Vec3& b, const Vec3& c, const Vec3& d, double eps) {
  const Vec3 local = frame_from_three_points(b, c, a, eps).to_local(d);
  const double denom = std::sqrt(local[2] * local[2] + local[1] * local[1] + eps);
  return {local[2] / denom, local[1] / denom};
}

PseudoBeta pseudo_beta(int restype, const float* positions37, const float* mask37) {
  static const int kCa = rc::atom_order("CA"), kCb = rc::atom_order("CB");
  const int atom = restype == rc::restype_order('G') ? kCa : kCb;
  const float* p = positions37 + 3 * atom;
  return PseudoBeta{{p[0], p[1], p[2]}, mask37[atom]};
}

std::array<std::array<int, 4>, 4> chi_atom_indices(int restype) {
  FC_CHECK(restype >= 0 && restype <= rc::kUnkRestypeIndex, "chi_atom_indices: restype ", restype,
           " outside 0..20");
  std::array<std::array<int, 4>, 4> out{};
  if (restype == rc::kUnkRestypeIndex) return out;
  for (int k = 0; k < rc::num_chi_angles(restype); ++k)
    for (int j = 0; j < 4; ++j) {
      const auto& name = rc::kChiAnglesAtoms[static_cast<size_t>(restype)][static_cast<size_t>(k)][static_cast<size_t>(j)];
      out[static_cast<size_t>(k)][static_cast<size_t>(j)] = rc::atom_order(name);
    }
  return out;
}

namespace {

// AlphaFold's torsion (sin, cos) in float32 with OpenFold's operation order (Rigid.from_3_points,
// Rigid.invert().apply, then the normalisation), so that the ill-conditioned angles of missing atoms
// (e.g. pre-ω after a template gap: the zero-padded predecessor makes the Gram-Schmidt residual pure
// rounding) come out as the reference pipeline computes them. The template features feed these
// values to the model unmasked, so they matter. Accurate angles agree with the double version to
// ~1e-6. (Assumes no FMA contraction, the default of x86-64 builds without -mfma.)
using F3 = std::array<float, 3>;

std::array<float, 2> torsion_sin_cos_f32(const F3& a, const F3& b, const F3& c, const F3& d) {
  constexpr float kEps = 1e-8f;
  // from_3_points(p_neg_x_axis = b, origin = c, p_xy_plane = a)
  F3 e0{c[0] - b[0], c[1] - b[1], c[2] - b[2]};
  F3 e1{a[0] - c[0], a[1] - c[1], a[2] - c[2]};
  float denom = std::sqrt(e0[0] * e0[0] + e0[1] * e0[1] + e0[2] * e0[2] + kEps);
  for (float& v : e0) v = v / denom;
  const float dp = e0[0] * e1[0] + e0[1] * e1[1] + e0[2] * e1[2];
  for (size_t k = 0; k < 3; ++k) e1[k] = e1[k] - e0[k] * dp;
  denom = std::sqrt(e1[0] * e1[0] + e1[1] * e1[1] + e1[2] * e1[2] + kEps);
  for (float& v : e1) v = v / denom;
  const F3 e2{e0[1] * e1[2] - e0[2] * e1[1], e0[2] * e1[0] - e0[0] * e1[2], e0[0] * e1[1] - e0[1] * e1[0]};
  // invert(): R^T and -(R^T t); apply(d) = R^T d + (-(R^T t)).
  auto rt = [](const F3& e, const F3& p) { return e[0] * p[0] + e[1] * p[1] + e[2] * p[2]; };
  const float y = rt(e1, d) + -1.0f * rt(e1, c);
  const float z = rt(e2, d) + -1.0f * rt(e2, c);
  const float norm = std::sqrt(z * z + y * y + kEps);
  return {z / norm, y / norm};
}

}  // namespace

TorsionAngles atom37_to_torsion_angles(const std::vector<int64_t>& aatype, const float* positions, const float* mask) {
  constexpr int kA = rc::kAtomTypeNum;
  const size_t n = aatype.size();
  TorsionAngles out;
  out.sin_cos.assign(n * 14, 0.0f);
  out.alt_sin_cos.assign(n * 14, 0.0f);
  out.mask.assign(n * 7, 0.0f);
  std::array<std::array<std::array<int, 4>, 4>, rc::kRestypeNumWithX> chi_idx;
  for (int r = 0; r < rc::kRestypeNumWithX; ++r) chi_idx[static_cast<size_t>(r)] = chi_atom_indices(r);
  // Backbone atom37 slots: N 0, CA 1, C 2, O 4.
  constexpr int kN = 0, kCa = 1, kC = 2, kO = 4;
  const F3 zero{0.0f, 0.0f, 0.0f};
  for (size_t i = 0; i < n; ++i) {
    FC_CHECK(aatype[i] >= 0, "atom37_to_torsion_angles: negative aatype ", aatype[i], " at residue ", i);
    const int restype = static_cast<int>(std::min<int64_t>(aatype[i], rc::kUnkRestypeIndex));
    const float* p = positions + i * kA * 3;
    const float* m = mask + i * kA;
    const float* pp = i > 0 ? positions + (i - 1) * kA * 3 : nullptr;
    const float* pm = i > 0 ? mask + (i - 1) * kA : nullptr;
    auto at = [&](int atom) { return F3{p[3 * atom], p[3 * atom + 1], p[3 * atom + 2]}; };
    auto prev = [&](int atom) { return pp ? F3{pp[3 * atom], pp[3 * atom + 1], pp[3 * atom + 2]} : zero; };
    auto prev_mask = [&](int atom) { return pm ? pm[atom] : 0.0f; };

    std::array<std::array<F3, 4>, 7> atoms;
    std::array<float, 7> tmask{};
    atoms[0] = {prev(kCa), prev(kC), at(kN), at(kCa)};
    tmask[0] = prev_mask(kCa) * prev_mask(kC) * m[kN] * m[kCa];
    atoms[1] = {prev(kC), at(kN), at(kCa), at(kC)};
    tmask[1] = prev_mask(kC) * m[kN] * m[kCa] * m[kC];
    atoms[2] = {at(kN), at(kCa), at(kC), at(kO)};
    tmask[2] = m[kN] * m[kCa] * m[kC] * m[kO];
    for (size_t k = 0; k < 4; ++k) {
      const auto& idx = chi_idx[static_cast<size_t>(restype)][k];
      float am = rc::kChiAnglesMask[static_cast<size_t>(restype)][k];
      for (size_t j = 0; j < 4; ++j) {
        atoms[3 + k][j] = at(idx[j]);
        am *= m[idx[j]];
      }
      tmask[3 + k] = am;
    }
    for (size_t t = 0; t < 7; ++t) {
      std::array<float, 2> sc = torsion_sin_cos_f32(atoms[t][0], atoms[t][1], atoms[t][2], atoms[t][3]);
      // ψ from O instead of N(i+1): the O-based angle is the N-based one shifted by π.
      if (t == 2) sc = {-sc[0], -sc[1]};
      const float mirror = t >= 3 ? 1.0f - 2.0f * rc::kChiPiPeriodic[static_cast<size_t>(restype)][t - 3] : 1.0f;
      for (size_t c = 0; c < 2; ++c) {
        out.sin_cos[(i * 7 + t) * 2 + c] = sc[c];
        out.alt_sin_cos[(i * 7 + t) * 2 + c] = sc[c] * mirror;
      }
      out.mask[i * 7 + t] = tmask[t];
    }
  }
  return out;
}

}  // namespace foldcore::data::geom
