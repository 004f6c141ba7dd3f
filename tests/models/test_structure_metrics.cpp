// lDDT-Cα, GDT-TS and Cα-RMSD (structure_metrics.h) against hand-computed values: rigid-moved
// copies, perturbations whose scores follow from the definitions, masks and the inclusion radius.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "models/alphafold/training/structure_metrics.h"

namespace foldcore::af2 {
namespace {

// A random compact chain: steps of 3.8 Å in random directions (fixed seed).
std::vector<Vec3d> random_chain(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<Vec3d> x(static_cast<size_t>(n));
  for (int i = 1; i < n; ++i) {
    Vec3d d{g(rng), g(rng), g(rng)};
    const double l = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    for (int k = 0; k < 3; ++k) x[i][k] = x[i - 1][k] + 3.8 * d[k] / l;
  }
  return x;
}

// A proper rotation (from a random unit quaternion) and a translation applied to every point.
std::vector<Vec3d> rigid_move(const std::vector<Vec3d>& x, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  double q[4] = {g(rng), g(rng), g(rng), g(rng)};
  const double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  for (double& c : q) c /= n;
  const double w = q[0], a = q[1], b = q[2], c = q[3];
  Superposition s;
  s.rotation = {w * w + a * a - b * b - c * c, 2 * (a * b - w * c), 2 * (a * c + w * b),
                2 * (a * b + w * c), w * w - a * a + b * b - c * c, 2 * (b * c - w * a),
                2 * (a * c - w * b), 2 * (b * c + w * a), w * w - a * a - b * b + c * c};
  s.translation = {17.0 * g(rng), -9.0 * g(rng), 30.0};
  std::vector<Vec3d> out;
  for (const Vec3d& p : x) out.push_back(s.apply(p));
  return out;
}

std::vector<float> ones(size_t n) { return std::vector<float>(n, 1.f); }

TEST(StructureMetrics, RigidMovedCopyIsPerfect) {
  const std::vector<Vec3d> ref = random_chain(60, 1);
  const std::vector<Vec3d> pred = rigid_move(ref, 2);
  const LddtResult l = lddt_ca(pred, ref, ones(ref.size()));
  EXPECT_NEAR(l.global, 1.0, 1e-12);
  for (double r : l.per_residue) EXPECT_NEAR(r, 1.0, 1e-12);
  EXPECT_GT(l.scored_pairs, 60);
  const GdtResult g = gdt_ts(pred, ref, ones(ref.size()));
  EXPECT_DOUBLE_EQ(g.gdt_ts, 1.0);
  // Double-precision superposition of a 60-point chain: residuals ~1e-13 Å; 1e-9 leaves margin.
  EXPECT_LT(rmsd_ca(pred, ref, ones(ref.size())), 1e-9);
  // The superposition found maps the moved copy back onto the reference.
  const Superposition s = kabsch(pred, ref, ones(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i)
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(s.apply(pred[i])[k], ref[i][k], 1e-9);
}

TEST(StructureMetrics, LddtOfHandBuiltPerturbation) {
  // Reference on a line at x = 0, 3, 6; the prediction moves the last point by 1.5 Å along the line.
  // Pairs (0,1): |Δd| = 0 → 1; (0,2) and (1,2): |Δd| = 1.5 → below 2 and 4 only → 0.5.
  const std::vector<Vec3d> ref = {{0, 0, 0}, {3, 0, 0}, {6, 0, 0}};
  const std::vector<Vec3d> pred = {{0, 0, 0}, {3, 0, 0}, {7.5, 0, 0}};
  const LddtResult l = lddt_ca(pred, ref, ones(3));
  EXPECT_EQ(l.scored_pairs, 6);
  EXPECT_NEAR(l.global, (2 * 1.0 + 4 * 0.5) / 6, 1e-9);
  EXPECT_NEAR(l.per_residue[0], 0.75, 1e-9);
  EXPECT_NEAR(l.per_residue[1], 0.75, 1e-9);
  EXPECT_NEAR(l.per_residue[2], 0.5, 1e-9);
  // |Δd| = 0.7: below 1, 2, 4 but not 0.5 → 0.75 per pair.
  const LddtResult two = lddt_ca({{0, 0, 0}, {5.7, 0, 0}}, {{0, 0, 0}, {5, 0, 0}}, ones(2));
  EXPECT_NEAR(two.global, 0.75, 1e-9);
  // |Δd| = 4 exactly fails every threshold (strict <).
  EXPECT_NEAR(lddt_ca({{0, 0, 0}, {9, 0, 0}}, {{0, 0, 0}, {5, 0, 0}}, ones(2)).global, 0.0, 1e-9);
}

TEST(StructureMetrics, LddtInclusionRadiusIsOnTheReference) {
  // Reference distance 16 Å (outside 15): not scored however wrong the prediction; the only
  // scored pairs are (0,1) and (1,2) at 8 Å, both exact.
  const std::vector<Vec3d> ref = {{0, 0, 0}, {8, 0, 0}, {16, 0, 0}};
  const std::vector<Vec3d> pred = {{0, 0, 0}, {8, 0, 0}, {8, 8, 0}};  // d(0,2) = 11.3 instead of 16
  LddtResult l = lddt_ca(pred, ref, ones(3));
  EXPECT_EQ(l.scored_pairs, 4);
  EXPECT_NEAR(l.global, 1.0, 1e-9);
  // A prediction that brings two far residues close does not add a pair either (radius on the
  // reference, not the prediction): pred d(0,2) = 1 Å.
  l = lddt_ca({{0, 0, 0}, {8, 0, 0}, {1, 0, 0}}, ref, ones(3));
  EXPECT_EQ(l.scored_pairs, 4);
  // (1,2): |7 − 8| = 1 → thresholds 2 and 4 → 0.5; (0,1) exact → 1.
  EXPECT_NEAR(l.global, (2 * 1.0 + 2 * 0.5) / 4, 1e-9);
}

TEST(StructureMetrics, MaskedResiduesTakeNoPart) {
  const std::vector<Vec3d> ref = random_chain(30, 3);
  std::vector<Vec3d> pred = rigid_move(ref, 4);
  std::vector<float> mask = ones(ref.size());
  pred[7] = {500, -300, 80};  // garbage where the reference is unobserved
  pred[20] = {-1000, 0, 0};
  mask[7] = 0;
  mask[20] = 0;
  EXPECT_NEAR(lddt_ca(pred, ref, mask).global, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(gdt_ts(pred, ref, mask).gdt_ts, 1.0);
  EXPECT_LT(rmsd_ca(pred, ref, mask), 1e-9);
  const StructureMetrics m = structure_metrics(pred, ref, mask);
  EXPECT_EQ(m.residues, 28);
  // Unmasked, the garbage counts.
  EXPECT_LT(lddt_ca(pred, ref, ones(ref.size())).global, 0.95);
  EXPECT_GT(rmsd_ca(pred, ref, ones(ref.size())), 50.0);
  EXPECT_THROW(rmsd_ca(pred, ref, std::vector<float>(ref.size(), 0.f)), Error);
  EXPECT_THROW(lddt_ca(pred, ref, ones(3)), Error);
}

TEST(StructureMetrics, RmsdOfScaledCopy) {
  // pred = c + s·(ref − c) (then rigidly moved): the best superposition is the identity on the
  // centred clouds, so RMSD = |s − 1| · sqrt(mean |ref_i − c|²).
  const std::vector<Vec3d> ref = random_chain(25, 5);
  Vec3d c{0, 0, 0};
  for (const Vec3d& p : ref)
    for (int k = 0; k < 3; ++k) c[k] += p[k] / 25.0;
  const double s = 1.3;
  std::vector<Vec3d> scaled;
  double r2 = 0;
  for (const Vec3d& p : ref) {
    Vec3d q;
    for (int k = 0; k < 3; ++k) {
      q[k] = c[k] + s * (p[k] - c[k]);
      r2 += (p[k] - c[k]) * (p[k] - c[k]) / 25.0;
    }
    scaled.push_back(q);
  }
  const double expected = (s - 1) * std::sqrt(r2);
  EXPECT_NEAR(rmsd_ca(rigid_move(scaled, 6), ref, ones(25)), expected, 1e-9);
  // Two points 2 Å apart predicted 4 Å apart: centred, each end is 1 Å off.
  EXPECT_NEAR(rmsd_ca({{0, 0, 0}, {4, 0, 0}}, {{0, 0, 0}, {2, 0, 0}}, ones(2)), 1.0, 1e-12);
}

TEST(StructureMetrics, RmsdIsTheMinimumOverRotations) {
  // A noisy copy: no rotation near the optimum gives a lower RMSD (optimality of the superposition).
  const std::vector<Vec3d> ref = random_chain(40, 7);
  std::vector<Vec3d> pred = rigid_move(ref, 8);
  std::mt19937 rng(9);
  std::normal_distribution<double> g(0, 1.0);
  for (Vec3d& p : pred)
    for (double& v : p) v += g(rng);
  const std::vector<float> m = ones(ref.size());
  const double best = rmsd_ca(pred, ref, m);
  const Superposition s = kabsch(pred, ref, m);
  double direct = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const Vec3d q = s.apply(pred[i]);
    for (int k = 0; k < 3; ++k) direct += (q[k] - ref[i][k]) * (q[k] - ref[i][k]);
  }
  EXPECT_NEAR(std::sqrt(direct / 40.0), best, 1e-12);
  const double det = s.rotation[0] * (s.rotation[4] * s.rotation[8] - s.rotation[5] * s.rotation[7]) -
                     s.rotation[1] * (s.rotation[3] * s.rotation[8] - s.rotation[5] * s.rotation[6]) +
                     s.rotation[2] * (s.rotation[3] * s.rotation[7] - s.rotation[4] * s.rotation[6]);
  EXPECT_NEAR(det, 1.0, 1e-12);
  // Small rotations about each axis after the optimum (and translations) only increase the error.
  for (int axis = 0; axis < 3; ++axis)
    for (double angle : {-0.01, 0.01}) {
      const double co = std::cos(angle), si = std::sin(angle);
      double sum = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        Vec3d q = s.apply(pred[i]);
        const int a = (axis + 1) % 3, b = (axis + 2) % 3;
        const double qa = co * q[a] - si * q[b], qb = si * q[a] + co * q[b];
        q[a] = qa;
        q[b] = qb;
        for (int k = 0; k < 3; ++k) sum += (q[k] - ref[i][k]) * (q[k] - ref[i][k]);
      }
      EXPECT_GT(std::sqrt(sum / 40.0), best) << axis << " " << angle;
    }
}

TEST(StructureMetrics, GdtOfOutlierAndDisplacedBlock) {
  // One residue moved 40 Å off: its distance to a neighbour changed by > 16 Å, so no superposition
  // puts both within 8 Å; the other 19 superpose exactly → 19/20 at
  // every cutoff.
  const std::vector<Vec3d> ref = random_chain(20, 10);
  std::vector<Vec3d> pred = ref;
  pred[9][2] += 40;
  GdtResult g = gdt_ts(rigid_move(pred, 11), ref, ones(20));
  for (double f : g.fractions) EXPECT_NEAR(f, 19.0 / 20.0, 1e-12);
  EXPECT_NEAR(g.gdt_ts, 0.95, 1e-12);
  // A rigid block of the last 4 of 12 residues on a straight line, shifted 100 Å sideways: every
  // distance between the blocks changes by more than 16 Å, so no superposition puts residues of
  // both within 8 Å; the larger block (8) is the best set at every cutoff → GDT-TS 8/12.
  std::vector<Vec3d> line, shifted;
  for (int i = 0; i < 12; ++i) {
    line.push_back({3.8 * i, 0, 0});
    shifted.push_back({3.8 * i, i >= 8 ? 100.0 : 0.0, 0});
  }
  g = gdt_ts(shifted, line, ones(12));
  for (double f : g.fractions) EXPECT_NEAR(f, 8.0 / 12.0, 1e-12);
  // Cutoff-dependent: the superposition on every residue bounds each fraction from below.
  std::vector<Vec3d> noisy = rigid_move(ref, 12);
  std::mt19937 rng(13);
  std::normal_distribution<double> gauss(0, 2.0);
  for (Vec3d& p : noisy)
    for (double& v : p) v += gauss(rng);
  g = gdt_ts(noisy, ref, ones(20));
  const Superposition all = kabsch(noisy, ref, ones(20));
  const double cut[4] = {1, 2, 4, 8};
  for (int c = 0; c < 4; ++c) {
    int within = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const Vec3d q = all.apply(noisy[i]);
      within += std::sqrt((q[0] - ref[i][0]) * (q[0] - ref[i][0]) + (q[1] - ref[i][1]) * (q[1] - ref[i][1]) +
                          (q[2] - ref[i][2]) * (q[2] - ref[i][2])) <= cut[c];
    }
    EXPECT_GE(g.fractions[c], within / 20.0) << cut[c];
    if (c > 0) {
      EXPECT_GE(g.fractions[c], g.fractions[c - 1]);
    }
  }
  EXPECT_LT(g.gdt_ts, 1.0);
}

}  // namespace
}  // namespace foldcore::af2
