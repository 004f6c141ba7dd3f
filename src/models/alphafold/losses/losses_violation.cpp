#include "models/alphafold/losses/losses_violation.h"

#include <array>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/structure/stereo_chemistry.h"
#include "models/alphafold/losses/losses_common.h"

namespace foldcore::af2 {
namespace {

namespace rc = data::rc;
using Vec = std::array<double, 3>;

Vec at(const std::vector<double>& x, int64_t atom) { return {x[3 * atom], x[3 * atom + 1], x[3 * atom + 2]}; }
void add(std::vector<double>& g, int64_t atom, const Vec& v, double s) {
  for (int k = 0; k < 3; ++k) g[3 * atom + k] += s * v[k];
}
Vec sub(const Vec& a, const Vec& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
double dot(const Vec& a, const Vec& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

// u = v / sqrt(ε + |v|²) and its backward: ∂u/∂v = I/ℓ − v vᵀ/ℓ³.
struct Unit {
  Vec v, u;
  double len;
  Unit(const Vec& vec, double eps) : v(vec), len(std::sqrt(eps + dot(vec, vec))) {
    for (int k = 0; k < 3; ++k) u[k] = v[k] / len;
  }
  Vec backward(const Vec& gu) const {
    const double vg = dot(v, gu) / (len * len * len);
    return {gu[0] / len - v[0] * vg, gu[1] / len - v[1] * vg, gu[2] / len - v[2] * vg};
  }
};

// relu(sqrt(ε + (y − y0)²) − tol): value and ∂/∂y.
std::pair<double, double> flat_bottom(double y, double y0, double tol, double eps) {
  const double e = std::sqrt(eps + (y - y0) * (y - y0));
  if (e <= tol) return {0.0, 0.0};
  return {e - tol, (y - y0) / e};
}

// The three bond vectors around the peptide bond between rows i and i+1: C_i→N_{i+1},
// C_i→CA_i, N_{i+1}→CA_{i+1}.
struct Peptide {
  int64_t ca, c, n1, ca1;  // atom indices (atom14 slots 1, 2 of i; 0, 1 of i+1)
  Unit c_n, c_ca, n_ca;
};
Peptide peptide(const std::vector<double>& x, int64_t i, double eps) {
  const int64_t ca = 14 * i + 1, c = 14 * i + 2, n1 = 14 * (i + 1), ca1 = 14 * (i + 1) + 1;
  return {ca, c, n1, ca1, Unit(sub(at(x, n1), at(x, c)), eps), Unit(sub(at(x, ca), at(x, c)), eps),
          Unit(sub(at(x, ca1), at(x, n1)), eps)};
}

// Peptide bond length and the two peptide angles (eqs. 44–45).
void between_residue_terms(const std::vector<double>& x, const std::vector<double>& exists,
                           const std::vector<int64_t>& residue_index, const std::vector<int64_t>& aatype, double tol,
                           ViolationLoss& out, std::vector<double>& grad) {
  constexpr double kEps = 1e-6;
  const int64_t n = static_cast<int64_t>(aatype.size());
  const int pro = rc::resname_to_idx("PRO");
  const double cos_cacn = rc::kBetweenResCosAnglesCaCN[0], cos_cnca = rc::kBetweenResCosAnglesCNCa[0];
  const double sd_cacn = rc::kBetweenResBondLengthStddevCN[0];  // AlphaFold's choice, see header
  const double sd_cnca = rc::kBetweenResCosAnglesCNCa[1];
  // Per-gap-pair values and derivatives; the means need the mask sums first.
  double m_bond = 0, m_a1 = 0, m_a2 = 0;
  struct Pair {
    double bond, dbond, a1, da1, a2, da2, mb, ma1, ma2;
  };
  std::vector<Pair> pairs(n > 0 ? n - 1 : 0);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const Peptide g = peptide(x, i, kEps);
    const double no_gap = residue_index[i + 1] - residue_index[i] == 1 ? 1.0 : 0.0;
    Pair& p = pairs[i];
    p.mb = exists[g.c] * exists[g.n1] * no_gap;
    p.ma1 = exists[g.ca] * exists[g.c] * exists[g.n1] * no_gap;
    p.ma2 = exists[g.c] * exists[g.n1] * exists[g.ca1] * no_gap;
    m_bond += p.mb;
    m_a1 += p.ma1;
    m_a2 += p.ma2;
    const bool next_pro = aatype[i + 1] == pro;
    std::tie(p.bond, p.dbond) = flat_bottom(g.c_n.len, rc::kBetweenResBondLengthCN[next_pro],
                                            tol * rc::kBetweenResBondLengthStddevCN[next_pro], kEps);
    std::tie(p.a1, p.da1) = flat_bottom(dot(g.c_ca.u, g.c_n.u), cos_cacn, tol * sd_cacn, kEps);
    std::tie(p.a2, p.da2) = flat_bottom(-dot(g.c_n.u, g.n_ca.u), cos_cnca, tol * sd_cnca, kEps);
  }
  const double db = m_bond + kEps, d1 = m_a1 + kEps, d2 = m_a2 + kEps;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const Pair& p = pairs[i];
    out.bonds_c_n += p.mb * p.bond / db;
    out.angles_ca_c_n += p.ma1 * p.a1 / d1;
    out.angles_c_n_ca += p.ma2 * p.a2 / d2;
    const double gb = p.mb * p.dbond / db, g1 = p.ma1 * p.da1 / d1, g2 = p.ma2 * p.da2 / d2;
    if (gb == 0 && g1 == 0 && g2 == 0) continue;
    const auto [ca, c, n1, ca1, c_n, c_ca, n_ca] = peptide(x, i, kEps);
    // ∂ℓ_CN/∂(N − C) = (N − C)/ℓ.
    Vec g_cn = {gb * c_n.v[0] / c_n.len, gb * c_n.v[1] / c_n.len, gb * c_n.v[2] / c_n.len};
    // cos1 = û_CA·û_N (both from C), cos2 = −û_N·û_NCA.
    Vec gu_cn{}, gu_cca{}, gu_nca{};
    for (int k = 0; k < 3; ++k) {
      gu_cn[k] = g1 * c_ca.u[k] - g2 * n_ca.u[k];
      gu_cca[k] = g1 * c_n.u[k];
      gu_nca[k] = -g2 * c_n.u[k];
    }
    const Vec v_cn = c_n.backward(gu_cn), v_cca = c_ca.backward(gu_cca), v_nca = n_ca.backward(gu_nca);
    for (int k = 0; k < 3; ++k) g_cn[k] += v_cn[k];
    add(grad, n1, g_cn, 1);
    add(grad, c, g_cn, -1);
    add(grad, ca, v_cca, 1);
    add(grad, c, v_cca, -1);
    add(grad, ca1, v_nca, 1);
    add(grad, n1, v_nca, -1);
  }
}

// d = sqrt(ε + |x_a − x_b|²) between two atoms, and ∂d/∂x_a (= −∂d/∂x_b).
double pair_distance(const std::vector<double>& x, int64_t a, int64_t b, Vec* unit) {
  const Vec v = sub(at(x, a), at(x, b));
  const double d = std::sqrt(1e-10 + dot(v, v));
  for (int k = 0; k < 3; ++k) (*unit)[k] = v[k] / d;
  return d;
}

}  // namespace

ViolationLoss violation_loss(const Tensor& atom14_pred_positions, const Tensor& atom14_atom_exists,
                             const Tensor& residue_index, const Tensor& aatype, const ViolationLossConfig& config) {
  loss_detail::check_shape(atom14_pred_positions, "atom14 predicted positions", {-1, 14, 3});
  const int64_t n = atom14_pred_positions.size(0);
  const auto x = loss_detail::host_doubles(atom14_pred_positions, "atom14 predicted positions", {n, 14, 3});
  const auto exists = loss_detail::host_doubles(atom14_atom_exists, "atom14_atom_exists", {n, 14});
  const auto ridx = loss_detail::host_ints(residue_index, "residue_index", {n});
  const auto aa = loss_detail::host_ints(aatype, "aatype", {n});
  for (int64_t i = 0; i < n; ++i)
    FC_CHECK(aa[i] >= 0 && aa[i] < rc::kRestypeNumWithX, "aatype ", aa[i], " outside 0..20");

  ViolationLoss out;
  std::vector<double> grad(x.size(), 0.0);
  between_residue_terms(x, exists, ridx, aa, config.violation_tolerance_factor, out, grad);

  // van der Waals radius of every atom14 slot (0 where the slot is absent).
  std::vector<double> radius(14 * n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 14; ++a) {
      const std::string_view name = rc::kRestypeAtom14Names[aa[i]][a];
      if (!name.empty()) radius[14 * i + a] = exists[14 * i + a] * rc::van_der_waals_radius(name.substr(0, 1));
    }
  double exists_sum = 0;
  for (double e : exists) exists_sum += e;
  const double clash_denom = config.eps + exists_sum;
  // Every per-atom sum counts an error for both of its atoms: factor 2 on each pair.
  const double pair_scale = 2.0 / clash_denom;
  double clash_sum = 0;
  Vec u{};
  constexpr int kCysSgSlot = 5;  // atom14 slot of Cys SG
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (!(ridx[i] < ridx[j])) continue;
      const bool neighbour = ridx[i] + 1 == ridx[j];
      for (int a = 0; a < 14; ++a) {
        const int64_t ia = 14 * i + a;
        if (exists[ia] == 0) continue;
        for (int b = 0; b < 14; ++b) {
          const int64_t jb = 14 * j + b;
          if (exists[jb] == 0) continue;
          if (neighbour && a == 2 && b == 0) continue;  // peptide bond C_i–N_{i+1}
          if (a == kCysSgSlot && b == kCysSgSlot) continue;
          const double lower = radius[ia] + radius[jb] - config.clash_overlap_tolerance;
          const double d = pair_distance(x, ia, jb, &u);
          if (lower - d <= 0) continue;
          clash_sum += exists[ia] * exists[jb] * (lower - d);
          const double g = -pair_scale * exists[ia] * exists[jb];
          add(grad, ia, u, g);
          add(grad, jb, u, -g);
        }
      }
    }
  static const data::stereo::Atom14DistBounds bounds = data::stereo::make_atom14_dists_bounds(1.5, 12.0);
  const bool default_bounds = config.clash_overlap_tolerance == 1.5 && config.violation_tolerance_factor == 12.0;
  const data::stereo::Atom14DistBounds custom =
      default_bounds ? data::stereo::Atom14DistBounds{}
                     : data::stereo::make_atom14_dists_bounds(config.clash_overlap_tolerance,
                                                              config.violation_tolerance_factor);
  const auto& b = default_bounds ? bounds : custom;
  double within_sum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 14; ++a) {
      const int64_t ia = 14 * i + a;
      if (exists[ia] == 0) continue;
      for (int c = 0; c < 14; ++c) {
        const int64_t ic = 14 * i + c;
        if (c == a || exists[ic] == 0) continue;
        const double d = pair_distance(x, ia, ic, &u);
        const double lo = b.lower_bound[aa[i]][a][c], hi = b.upper_bound[aa[i]][a][c];
        const double m = exists[ia] * exists[ic];
        double dd = 0;  // ∂W/∂d
        if (lo - d > 0) {
          within_sum += m * (lo - d);
          dd -= 1;
        }
        if (d - hi > 0) {
          within_sum += m * (d - hi);
          dd += 1;
        }
        if (dd != 0) {
          add(grad, ia, u, pair_scale * m * dd);
          add(grad, ic, u, -pair_scale * m * dd);
        }
      }
    }
  out.clash = pair_scale * (clash_sum + within_sum);
  out.value = out.bonds_c_n + out.angles_ca_c_n + out.angles_c_n_ca + out.clash;
  out.grad_positions = loss_detail::to_tensor(grad, {n, 14, 3});
  return out;
}

}  // namespace foldcore::af2
