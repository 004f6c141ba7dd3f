#include "models/alphafold/training/structure_metrics.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace foldcore::af2 {
namespace {

double dist(const Vec3d& a, const Vec3d& b) {
  const double dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  return std::sqrt(dx * dx + dy * dy + dz * dz);
}

void check_sizes(const char* what, const std::vector<Vec3d>& p, const std::vector<Vec3d>& r,
                 const std::vector<float>& m) {
  FC_CHECK(p.size() == r.size() && p.size() == m.size(), what, ": ", p.size(), " predicted, ", r.size(),
           " reference positions and ", m.size(), " mask entries must agree");
}

// Eigenvector of the largest eigenvalue of a symmetric 4×4 matrix (cyclic Jacobi rotations).
std::array<double, 4> top_eigenvector(std::array<std::array<double, 4>, 4> a) {
  std::array<std::array<double, 4>, 4> v{};
  for (int i = 0; i < 4; ++i) v[i][i] = 1;
  for (int sweep = 0; sweep < 50; ++sweep) {
    double off = 0;
    for (int p = 0; p < 4; ++p)
      for (int q = p + 1; q < 4; ++q) off += a[p][q] * a[p][q];
    if (off < 1e-30) break;
    for (int p = 0; p < 4; ++p)
      for (int q = p + 1; q < 4; ++q) {
        if (std::abs(a[p][q]) < 1e-300) continue;
        const double theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < 4; ++k) {  // a ← a·J
          const double akp = a[k][p], akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (int k = 0; k < 4; ++k) {  // a ← Jᵀ·a
          const double apk = a[p][k], aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (int k = 0; k < 4; ++k) {
          const double vkp = v[k][p], vkq = v[k][q];
          v[k][p] = c * vkp - s * vkq;
          v[k][q] = s * vkp + c * vkq;
        }
      }
  }
  int best = 0;
  for (int i = 1; i < 4; ++i)
    if (a[i][i] > a[best][best]) best = i;
  return {v[0][best], v[1][best], v[2][best], v[3][best]};
}

// Superposition on the residues of `set` (indices).
Superposition kabsch_on(const std::vector<Vec3d>& x, const std::vector<Vec3d>& y, const std::vector<int64_t>& set) {
  Vec3d cx{0, 0, 0}, cy{0, 0, 0};
  for (int64_t i : set)
    for (int k = 0; k < 3; ++k) {
      cx[k] += x[i][k];
      cy[k] += y[i][k];
    }
  const double n = static_cast<double>(set.size());
  for (int k = 0; k < 3; ++k) {
    cx[k] /= n;
    cy[k] /= n;
  }
  double s[3][3] = {};
  for (int64_t i : set)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) s[a][b] += (x[i][a] - cx[a]) * (y[i][b] - cy[b]);
  // Horn (1987): the unit quaternion maximising Σ y·(R x) is the top eigenvector of N.
  const double sxx = s[0][0], sxy = s[0][1], sxz = s[0][2], syx = s[1][0], syy = s[1][1], syz = s[1][2],
               szx = s[2][0], szy = s[2][1], szz = s[2][2];
  const std::array<std::array<double, 4>, 4> nmat = {{
      {sxx + syy + szz, syz - szy, szx - sxz, sxy - syx},
      {syz - szy, sxx - syy - szz, sxy + syx, szx + sxz},
      {szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy},
      {sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz},
  }};
  std::array<double, 4> q = top_eigenvector(nmat);
  const double norm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  for (double& c : q) c /= norm;
  const double w = q[0], a = q[1], b = q[2], c = q[3];
  Superposition out;
  out.rotation = {w * w + a * a - b * b - c * c, 2 * (a * b - w * c),         2 * (a * c + w * b),
                  2 * (a * b + w * c),         w * w - a * a + b * b - c * c, 2 * (b * c - w * a),
                  2 * (a * c - w * b),         2 * (b * c + w * a),         w * w - a * a - b * b + c * c};
  const Vec3d rcx = out.apply(cx);  // translation still zero here
  for (int k = 0; k < 3; ++k) out.translation[k] = cy[k] - rcx[k];
  return out;
}

std::vector<int64_t> observed(const std::vector<float>& mask) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] > 0) out.push_back(static_cast<int64_t>(i));
  return out;
}

}  // namespace

Vec3d Superposition::apply(const Vec3d& x) const {
  const auto& r = rotation;
  return {r[0] * x[0] + r[1] * x[1] + r[2] * x[2] + translation[0],
          r[3] * x[0] + r[4] * x[1] + r[5] * x[2] + translation[1],
          r[6] * x[0] + r[7] * x[1] + r[8] * x[2] + translation[2]};
}

LddtResult lddt_ca(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
                   const std::vector<float>& mask, const LddtOptions& options) {
  check_sizes("lddt_ca", predicted, reference, mask);
  const size_t n = predicted.size();
  constexpr double eps = 1e-10;
  LddtResult out;
  out.per_residue.assign(n, 0.0);
  double total_score = 0, total_pairs = 0;
  for (size_t i = 0; i < n; ++i) {
    double row_score = 0, row_pairs = 0;
    if (mask[i] > 0) {
      for (size_t j = 0; j < n; ++j) {
        if (j == i || !(mask[j] > 0)) continue;
        const double d_ref = dist(reference[i], reference[j]);
        if (!(d_ref < options.inclusion_radius)) continue;
        const double l1 = std::abs(d_ref - dist(predicted[i], predicted[j]));
        double score = 0;
        for (double t : options.thresholds) score += l1 < t ? 0.25 : 0.0;
        row_score += score;
        row_pairs += 1;
      }
    }
    out.per_residue[i] = (eps + row_score) / (eps + row_pairs);
    total_score += row_score;
    total_pairs += row_pairs;
  }
  out.global = (eps + total_score) / (eps + total_pairs);
  out.scored_pairs = static_cast<int64_t>(total_pairs);
  return out;
}

Superposition kabsch(const std::vector<Vec3d>& moving, const std::vector<Vec3d>& target,
                     const std::vector<float>& weights) {
  check_sizes("kabsch", moving, target, weights);
  const std::vector<int64_t> set = observed(weights);
  FC_CHECK(!set.empty(), "kabsch: no residue with a positive weight to superpose on");
  return kabsch_on(moving, target, set);
}

double rmsd_ca(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
               const std::vector<float>& mask) {
  check_sizes("rmsd_ca", predicted, reference, mask);
  const std::vector<int64_t> set = observed(mask);
  FC_CHECK(!set.empty(), "rmsd_ca: no observed residue");
  const Superposition sup = kabsch_on(predicted, reference, set);
  double sum = 0;
  for (int64_t i : set) {
    const double d = dist(sup.apply(predicted[i]), reference[i]);
    sum += d * d;
  }
  return std::sqrt(sum / static_cast<double>(set.size()));
}

GdtResult gdt_ts(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
                 const std::vector<float>& mask) {
  check_sizes("gdt_ts", predicted, reference, mask);
  const std::vector<int64_t> obs = observed(mask);
  FC_CHECK(!obs.empty(), "gdt_ts: no observed residue");
  const int64_t n = static_cast<int64_t>(obs.size());
  static constexpr std::array<double, 4> cutoffs = {1.0, 2.0, 4.0, 8.0};
  GdtResult out;
  if (n < 3) {  // one or two points superpose exactly
    out.fractions = {1, 1, 1, 1};
    out.gdt_ts = 1;
    return out;
  }
  // Seed windows over the observed residues: lengths 4, 8, 16, … below n, and n itself.
  std::vector<std::vector<int64_t>> seeds;
  for (int64_t len = 4; len < n; len *= 2) {
    const int64_t stride = len <= 8 ? 1 : len / 4;
    for (int64_t start = 0; start + len <= n; start += stride)
      seeds.emplace_back(obs.begin() + start, obs.begin() + start + len);
  }
  seeds.push_back(obs);
  for (size_t c = 0; c < cutoffs.size(); ++c) {
    const double d = cutoffs[c];
    int64_t best = 0;
    for (const std::vector<int64_t>& seed : seeds) {
      std::vector<int64_t> set = seed;
      for (int iter = 0; iter < 20; ++iter) {
        const Superposition sup = kabsch_on(predicted, reference, set);
        std::vector<int64_t> within;
        for (int64_t i : obs)
          if (dist(sup.apply(predicted[i]), reference[i]) <= d) within.push_back(i);
        best = std::max<int64_t>(best, static_cast<int64_t>(within.size()));
        if (within == set || within.size() < 3) break;
        set = std::move(within);
      }
      if (best == n) break;
    }
    out.fractions[c] = static_cast<double>(best) / static_cast<double>(n);
  }
  out.gdt_ts = (out.fractions[0] + out.fractions[1] + out.fractions[2] + out.fractions[3]) / 4;
  return out;
}

StructureMetrics structure_metrics(const std::vector<Vec3d>& predicted, const std::vector<Vec3d>& reference,
                                   const std::vector<float>& mask) {
  StructureMetrics m;
  m.lddt_ca = lddt_ca(predicted, reference, mask).global;
  m.gdt_ts = gdt_ts(predicted, reference, mask).gdt_ts;
  m.rmsd_ca = rmsd_ca(predicted, reference, mask);
  m.residues = static_cast<int64_t>(observed(mask).size());
  return m;
}

}  // namespace foldcore::af2
