// Finite-difference checks of every AlphaFold2 loss's analytic gradient (losses_*.h) on small
// random inputs with fixed seeds, plus the discrete parts (clamped/unclamped FAPE switch, choice
// of the alternative side-chain naming, π-periodic χ). Tolerances: see af2_loss_grad_check.h.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "af2_loss_grad_check.h"
#include "core/random.h"
#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/structure/all_atom.h"
#include "models/alphafold/losses/losses_fape.h"
#include "models/alphafold/losses/losses_heads.h"
#include "models/alphafold/losses/losses_torsion.h"
#include "models/alphafold/losses/losses_violation.h"
#include "models/alphafold/structure/rigid.h"

namespace foldcore::af2 {
namespace {

namespace rc = data::rc;

// A rotation entry moves every local point by h·|x − t| (up to ~20 Å here), so frame coordinates
// take a smaller step than points: with h = 1e-3 a few of the ~3,000 point pairs per frame sit
// within h·20 Å of the 10 Å clamp and the difference straddles the kink. The loss is double and
// the step exact (af2_loss_grad_check.h), so h = 1e-5 costs no precision (rounding ~1e-11).
constexpr double kFrameStep = 1e-5;

// n random rigid transforms as [n, 4, 4] (translations N(0, spread²) per axis).
Tensor random_frames_4x4(int64_t n, double spread, Generator& g) {
  const Rigid r{quat_to_rot(normalize_quat(randn({n, 4}, g))), randn({n, 3}, g, 0.f, static_cast<float>(spread))};
  return rigid_to_4x4(r);
}

// 0/1 mask with P(1) = p.
Tensor random_mask(const Shape& shape, double p, Generator& g) {
  std::vector<float> v = rand_uniform(shape, g).to_vector();
  for (float& x : v) x = x < p ? 1.f : 0.f;
  return Tensor::from_vector(v, shape);
}

// Unit (sin, cos) pairs, [..., 2].
Tensor random_unit_pairs(const Shape& shape, Generator& g) {
  std::vector<float> v = randn(shape, g).to_vector();
  for (size_t k = 0; k + 1 < v.size(); k += 2) {
    const float r = std::sqrt(v[k] * v[k] + v[k + 1] * v[k + 1]);
    v[k] /= r;
    v[k + 1] /= r;
  }
  return Tensor::from_vector(v, shape);
}

// ---------------------------------------------------------------- backbone FAPE
struct BackboneCase {
  Tensor frames, truth, mask;
};
BackboneCase backbone_case(uint64_t seed) {
  Generator g(seed);
  const int64_t nl = 3, n = 7;
  BackboneCase c;
  // Translations spread 6 Å: local errors from ~1 to ~30 Å, so both sides of the 10 Å clamp occur.
  std::vector<float> f = randn({nl, n, 7}, g).to_vector();
  const std::vector<float> t = randn({nl, n, 3}, g, 0.f, 6.f).to_vector();
  for (int64_t k = 0; k < nl * n; ++k) {
    const float r = std::sqrt(f[7 * k] * f[7 * k] + f[7 * k + 1] * f[7 * k + 1] + f[7 * k + 2] * f[7 * k + 2] +
                              f[7 * k + 3] * f[7 * k + 3]);
    for (int q = 0; q < 4; ++q) f[7 * k + q] /= r;
    for (int q = 0; q < 3; ++q) f[7 * k + 4 + q] = t[3 * k + q];
  }
  c.frames = Tensor::from_vector(f, {nl, n, 7});
  c.truth = random_frames_4x4(n, 6.0, g);
  std::vector<float> m(n, 1.f);
  m[2] = 0.f;
  c.mask = Tensor::from_vector(m, {n});
  return c;
}

TEST(Af2LossesGrad, BackboneFapeClampedUnclampedAndMixed) {
  BackboneCase c = backbone_case(11);
  for (double use_clamped : {1.0, 0.0, 0.3}) {
    const auto r = backbone_fape_loss(c.frames, c.truth, c.mask, use_clamped);
    expect_fd_gradient([&] { return backbone_fape_loss(c.frames, c.truth, c.mask, use_clamped).value; }, c.frames,
                       r.grad_frames, "backbone FAPE, use_clamped_fape " + std::to_string(use_clamped), kFrameStep);
  }
  // The switch: errors beyond 10 Å are capped only when clamped; the mix is linear in it.
  const double clamped = backbone_fape_loss(c.frames, c.truth, c.mask, 1.0).value;
  const double free = backbone_fape_loss(c.frames, c.truth, c.mask, 0.0).value;
  const double mixed = backbone_fape_loss(c.frames, c.truth, c.mask, 0.3).value;
  EXPECT_LT(clamped, free * 0.95);
  EXPECT_NEAR(mixed, 0.3 * clamped + 0.7 * free, 1e-12 * free);
  // Perfect prediction: every d = sqrt(ε) = 0.01 Å, FAPE = 0.01/10 (up to the ε in the means).
  const Rigid truth = rigid_from_4x4(c.truth);
  const Tensor q = rot_to_quat(truth.rot);
  std::vector<float> perfect;
  const auto qv = q.to_vector(), tv = truth.trans.to_vector();
  for (int64_t i = 0; i < 7; ++i) {
    for (int k = 0; k < 4; ++k) perfect.push_back(qv[4 * i + k]);
    for (int k = 0; k < 3; ++k) perfect.push_back(tv[3 * i + k]);
  }
  const Tensor exact = Tensor::from_vector(perfect, {1, 7, 7});
  EXPECT_NEAR(backbone_fape_loss(exact, c.truth, c.mask, 1.0).value, 1e-3, 1e-6);
  // The same frames as [L, N, 4, 4] matrices: same value, and the matrix gradient checks too.
  const int64_t nl = c.frames.size(0), n = c.frames.size(1);
  const Tensor q4 = c.frames.narrow(-1, 0, 4).contiguous(), t3 = c.frames.narrow(-1, 4, 3).contiguous();
  Tensor m44 = rigid_to_4x4(Rigid{quat_to_rot(q4), t3}).contiguous();
  ASSERT_EQ(m44.shape(), Shape({nl, n, 4, 4}));
  const auto r44 = backbone_fape_loss(m44, c.truth, c.mask, 0.3);
  EXPECT_NEAR(r44.value, mixed, 1e-6 * mixed);
  expect_fd_gradient([&] { return backbone_fape_loss(m44, c.truth, c.mask, 0.3).value; }, m44, r44.grad_frames,
                     "backbone FAPE, 4x4 frames", kFrameStep);
  EXPECT_THROW(backbone_fape_loss(c.frames, c.truth, c.mask, 1.5), Error);
  EXPECT_THROW(backbone_fape_loss(c.frames.narrow(-1, 0, 4).contiguous(), c.truth, c.mask, 1.0), Error);
}

// ---------------------------------------------------------------- side-chain FAPE, renaming
TEST(Af2LossesGrad, SidechainFape) {
  Generator g(21);
  const int64_t n = 5;
  Tensor frames = random_frames_4x4(n * 8, 4.0, g).view({n, 8, 4, 4}).contiguous();
  Tensor positions = randn({n, 14, 3}, g, 0.f, 4.f);
  const Tensor gt = random_frames_4x4(n * 8, 4.0, g).view({n, 8, 4, 4}).contiguous();
  const Tensor alt = random_frames_4x4(n * 8, 4.0, g).view({n, 8, 4, 4}).contiguous();
  const Tensor exists = random_mask({n, 8}, 0.7, g);
  RenamedGroundTruth renamed{Tensor::from_vector({0, 1, 0, 1, 1}, {n}), randn({n, 14, 3}, g, 0.f, 4.f),
                             random_mask({n, 14}, 0.8, g)};
  const auto r = sidechain_fape_loss(frames, positions, gt, alt, exists, renamed);
  auto value = [&] { return sidechain_fape_loss(frames, positions, gt, alt, exists, renamed).value; };
  expect_fd_gradient(value, frames, r.grad_frames, "side-chain FAPE / frames", kFrameStep);
  expect_fd_gradient(value, positions, r.grad_positions, "side-chain FAPE / atom14 positions");
  // Some pairs lie beyond the 10 Å clamp (so the check above covers both sides of it).
  FapeLossConfig unclamped;
  unclamped.clamp_distance = 1e9;
  EXPECT_LT(r.value, sidechain_fape_loss(frames, positions, gt, alt, exists, renamed, unclamped).value * 0.99);
  // The alternative frames are used exactly for the residues with alt_naming_is_better.
  RenamedGroundTruth none = renamed;
  none.alt_naming_is_better = Tensor::zeros({n}, DType::f32);
  EXPECT_NE(sidechain_fape_loss(frames, positions, gt, alt, exists, none).value, r.value);
  EXPECT_EQ(sidechain_fape_loss(frames, positions, gt, gt, exists, none).value,
            sidechain_fape_loss(frames, positions, gt, gt, exists, renamed).value);
}

TEST(Af2LossesGrad, RenamedGroundTruthPicksTheCloserNaming) {
  // Residue 1 has two ambiguous atoms (slots 6, 7) whose alternative truth swaps them; residues 0
  // and 2 have none. Every residue has atoms in slots 0..7.
  Generator g(31);
  const int64_t n = 3;
  const Tensor gt = randn({n, 14, 3}, g, 0.f, 3.f);
  std::vector<float> altv = gt.to_vector(), exists(n * 14, 0.f), amb(n * 14, 0.f);
  for (int k = 0; k < 3; ++k) std::swap(altv[(14 + 6) * 3 + k], altv[(14 + 7) * 3 + k]);
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 8; ++a) exists[14 * i + a] = 1.f;
  amb[14 + 6] = amb[14 + 7] = 1.f;
  const Tensor alt = Tensor::from_vector(altv, {n, 14, 3});
  const Tensor ex = Tensor::from_vector(exists, {n, 14}), ambt = Tensor::from_vector(amb, {n, 14});
  const Tensor noise = randn({n, 14, 3}, g, 0.f, 0.05f);
  auto plus = [](const Tensor& a, const Tensor& b) {
    std::vector<float> v = a.to_vector();
    const std::vector<float> w = b.to_vector();
    for (size_t k = 0; k < v.size(); ++k) v[k] += w[k];
    return Tensor::from_vector(v, a.shape());
  };
  const auto near_gt = compute_renamed_ground_truth(plus(gt, noise), gt, alt, ex, ex, ambt);
  EXPECT_EQ(near_gt.alt_naming_is_better.to_vector(), std::vector<float>({0, 0, 0}));
  EXPECT_EQ(near_gt.positions.to_vector(), gt.to_vector());
  const auto near_alt = compute_renamed_ground_truth(plus(alt, noise), gt, alt, ex, ex, ambt);
  EXPECT_EQ(near_alt.alt_naming_is_better.to_vector(), std::vector<float>({0, 1, 0}));
  EXPECT_EQ(near_alt.positions.to_vector(), alt.to_vector());
}

// ---------------------------------------------------------------- supervised χ
TEST(Af2LossesGrad, SupervisedChi) {
  Generator g(41);
  const int64_t nl = 2, n = 6;
  // ASP, GLU, PHE, TYR have a π-periodic χ; ARG has 4 χ; UNK none.
  const std::vector<int64_t> aa = {3, 6, 13, 18, 1, 20};
  const Tensor aatype = Tensor::from_vector_i64(aa, {n});
  Tensor angles = random_unit_pairs({nl, n, 7, 2}, g);
  Tensor unnormalized = randn({nl, n, 7, 2}, g, 0.f, 1.f);
  std::vector<float> cm;
  for (int64_t a : aa)
    for (int k = 0; k < 4; ++k) cm.push_back(rc::kChiAnglesMask[a][k]);
  const Tensor chi_mask = Tensor::from_vector(cm, {n, 4});
  const Tensor seq_mask = Tensor::from_vector({1, 1, 1, 1, 0, 1}, {n});
  const Tensor truth = random_unit_pairs({n, 4, 2}, g);
  auto loss = [&] { return supervised_chi_loss(angles, unnormalized, aatype, seq_mask, chi_mask, truth); };
  const auto r = loss();
  expect_fd_gradient([&] { return loss().value; }, angles, r.grad_angles, "supervised chi / angles");
  expect_fd_gradient([&] { return loss().value; }, unnormalized, r.grad_unnormalized_angles,
                     "supervised chi / unnormalized angles");
}

TEST(Af2LossesGrad, SupervisedChiPiPeriodic) {
  // One ASP (χ2 π-periodic) and one ARG; the prediction is the truth rotated by π in every χ.
  const int64_t n = 2;
  const Tensor aatype = Tensor::from_vector_i64({3, 1}, {n});
  const Tensor truth = Tensor::from_vector({0.6f, 0.8f, 0.6f, 0.8f, 0, 0, 0, 0,  // ASP χ1, χ2
                                            0.6f, 0.8f, 0.6f, 0.8f, 0.6f, 0.8f, 0.6f, 0.8f},
                                           {n, 4, 2});
  std::vector<float> a(n * 7 * 2, 0.f);
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 4; ++k) {
      a[(i * 7 + 3 + k) * 2] = -0.6f;
      a[(i * 7 + 3 + k) * 2 + 1] = -0.8f;
    }
  const Tensor angles = Tensor::from_vector(a, {1, n, 7, 2});
  const Tensor chi_mask = Tensor::from_vector({1, 1, 0, 0, 1, 1, 1, 1}, {n, 4});
  SupervisedChiLossConfig cfg;
  cfg.angle_norm_weight = 0;
  // ASP χ1 and ARG χ1..χ4 are off by |2α|² = 4 each; ASP χ2 costs nothing: (4·5) / 6 · 0.5.
  const auto r = supervised_chi_loss(angles, angles, aatype, Tensor::from_vector({1, 1}, {n}), chi_mask, truth, cfg);
  EXPECT_NEAR(r.value, 0.5 * 20.0 / (6.0 + 1e-4), 1e-6);
}

// ---------------------------------------------------------------- heads
TEST(Af2LossesGrad, DistogramAndMaskedMsa) {
  Generator g(51);
  const int64_t n = 6;
  Tensor logits = randn({n, n, 64}, g);
  const Tensor pb = randn({n, 3}, g, 0.f, 8.f);
  const Tensor pb_mask = Tensor::from_vector({1, 1, 0, 1, 1, 1}, {n});
  const auto d = distogram_loss(logits, pb, pb_mask);
  expect_fd_gradient([&] { return distogram_loss(logits, pb, pb_mask).value; }, logits, d.grad_logits,
                     "distogram / logits");
  const int64_t s = 3;
  Tensor msa_logits = randn({s, n, 23}, g);
  const Tensor true_msa = randint({s, n}, g, 0, 23);
  const Tensor bert = random_mask({s, n}, 0.5, g);
  const auto m = masked_msa_loss(msa_logits, true_msa, bert);
  expect_fd_gradient([&] { return masked_msa_loss(msa_logits, true_msa, bert).value; }, msa_logits, m.grad_logits,
                     "masked MSA / logits");
  // Bin edges: torch.linspace(2.3125, 21.6875, 63) steps by 0.3125.
  const auto edges = linspace_f32(2.3125, 21.6875, 63);
  EXPECT_EQ(edges.front(), 2.3125f);
  EXPECT_EQ(edges.back(), 21.6875f);
  EXPECT_FLOAT_EQ(edges[1] - edges[0], 0.3125f);
}

TEST(Af2LossesGrad, PlddtExperimentallyResolvedTm) {
  Generator g(61);
  const int64_t n = 6;
  Tensor lddt_logits = randn({n, 50}, g);
  const Tensor truth37 = randn({n, 37, 3}, g, 0.f, 5.f);
  const Tensor pred37 = randn({n, 37, 3}, g, 0.f, 5.f);
  const Tensor mask37 = random_mask({n, 37}, 0.8, g);
  const auto p = plddt_loss(lddt_logits, pred37, truth37, mask37, 2.0);
  expect_fd_gradient([&] { return plddt_loss(lddt_logits, pred37, truth37, mask37, 2.0).value; }, lddt_logits,
                     p.grad_logits, "pLDDT / logits");

  Tensor er_logits = randn({n, 37}, g, 0.f, 2.f);
  const Tensor exists37 = random_mask({n, 37}, 0.7, g);
  const auto e = experimentally_resolved_loss(er_logits, exists37, mask37, 2.0);
  expect_fd_gradient([&] { return experimentally_resolved_loss(er_logits, exists37, mask37, 2.0).value; }, er_logits,
                     e.grad_logits, "experimentally resolved / logits");

  Tensor tm_logits = randn({n, n, 64}, g);
  const Tensor gt = random_frames_4x4(n, 6.0, g);
  std::vector<float> f7;
  const Rigid pr{quat_to_rot(normalize_quat(randn({n, 4}, g))), randn({n, 3}, g, 0.f, 6.f)};
  const Tensor q = rot_to_quat(pr.rot);
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 4; ++k) f7.push_back(q.to_vector()[4 * i + k]);
    for (int k = 0; k < 3; ++k) f7.push_back(pr.trans.to_vector()[3 * i + k]);
  }
  const Tensor frames = Tensor::from_vector(f7, {n, 7});
  const Tensor bb_mask = Tensor::from_vector({1, 1, 1, 0, 1, 1}, {n});
  const auto t = tm_loss(tm_logits, frames, gt, bb_mask, 2.0);
  expect_fd_gradient([&] { return tm_loss(tm_logits, frames, gt, bb_mask, 2.0).value; }, tm_logits, t.grad_logits,
                     "TM / logits");

  // Resolution filter 0.1 ≤ r ≤ 3.0 (inclusive): outside it these three losses are exactly 0.
  for (double res : {0.05, 3.5}) {
    const auto p0 = plddt_loss(lddt_logits, pred37, truth37, mask37, res);
    const auto e0 = experimentally_resolved_loss(er_logits, exists37, mask37, res);
    const auto t0 = tm_loss(tm_logits, frames, gt, bb_mask, res);
    EXPECT_EQ(p0.value, 0.0);
    EXPECT_EQ(e0.value, 0.0);
    EXPECT_EQ(t0.value, 0.0);
    for (const Tensor* gr : {&p0.grad_logits, &e0.grad_logits, &t0.grad_logits})
      for (float v : gr->to_vector()) ASSERT_EQ(v, 0.f);
  }
  for (double res : {0.1, 3.0}) {
    EXPECT_GT(plddt_loss(lddt_logits, pred37, truth37, mask37, res).value, 0.0);
    EXPECT_GT(experimentally_resolved_loss(er_logits, exists37, mask37, res).value, 0.0);
    EXPECT_GT(tm_loss(tm_logits, frames, gt, bb_mask, res).value, 0.0);
  }
}

TEST(Af2LossesGrad, LddtCaOfExactAndShiftedStructures) {
  // Perfect prediction: every scored pair within 0.5 Å → lDDT 1. Moving one atom 3 Å away from all
  // others (along a line) costs the thresholds it crosses.
  const std::vector<double> truth = {0, 0, 0, 3.8, 0, 0, 7.6, 0, 0};
  const std::vector<double> mask = {1, 1, 1};
  for (double v : lddt_ca(truth, truth, mask)) EXPECT_NEAR(v, 1.0, 1e-9);
  std::vector<double> pred = truth;
  pred[6] += 3.0;  // residue 2 moves 3 Å: |Δd| = 3 to both others → passes only the 4 Å test
  const auto s = lddt_ca(pred, truth, mask);
  EXPECT_NEAR(s[2], 0.25, 1e-9);
  EXPECT_NEAR(s[0], (1.0 + 0.25) / 2, 1e-9);
}

// ---------------------------------------------------------------- violations
TEST(Af2LossesGrad, StructuralViolations) {
  Generator g(71);
  // CYS, PRO (peptide bond to Pro), TRP, GLY, ASP, SER; a chain break between rows 3 and 4.
  const std::vector<int64_t> aa = {4, 14, 17, 7, 3, 15};
  const int64_t n = static_cast<int64_t>(aa.size());
  const Tensor aatype = Tensor::from_vector_i64(aa, {n});
  const Tensor residue_index = Tensor::from_vector_i64({0, 1, 2, 3, 5, 6}, {n});
  // Ideal residues (Alg. 24) on random backbone frames 3.8 Å apart along x, random torsions,
  // plus 0.15 Å noise: broken peptide geometry, some bond violations, a few clashes.
  std::vector<float> t = randn({n, 3}, g, 0.f, 0.7f).to_vector();
  for (int64_t i = 0; i < n; ++i) t[3 * i] += 3.8f * static_cast<float>(i);
  const Rigid backbone{quat_to_rot(normalize_quat(randn({n, 4}, g))), Tensor::from_vector(t, {n, 3})};
  const Tensor angles = random_unit_pairs({n, 7, 2}, g);
  const Tensor ideal = frames_to_atom14_positions(aatype, torsion_angles_to_frames(aatype, backbone, angles));
  std::vector<float> x = ideal.to_vector();
  const std::vector<float> noise = randn({n, 14, 3}, g, 0.f, 0.15f).to_vector();
  std::vector<float> exists;
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 14; ++a) exists.push_back(rc::atom14_maps().atom14_mask[aa[i]][a]);
  for (size_t k = 0; k < x.size(); ++k) x[k] = exists[k / 3] != 0 ? x[k] + noise[k] : 0.f;
  Tensor positions = Tensor::from_vector(x, {n, 14, 3});
  const Tensor ex = Tensor::from_vector(exists, {n, 14});
  const auto r = violation_loss(positions, ex, residue_index, aatype);
  std::printf("  violation parts: bond %.4g, CA-C-N %.4g, C-N-CA %.4g, clash %.4g\n", r.bonds_c_n, r.angles_ca_c_n,
              r.angles_c_n_ca, r.clash);
  EXPECT_GT(r.bonds_c_n, 0);
  EXPECT_GT(r.angles_ca_c_n, 0);
  EXPECT_GT(r.angles_c_n_ca, 0);
  EXPECT_GT(r.clash, 0);
  expect_fd_gradient([&] { return violation_loss(positions, ex, residue_index, aatype).value; }, positions,
                     r.grad_positions, "violation / atom14 positions", 1e-4);
  // Ideal residues at ideal peptide geometry would score 0; an ideal residue alone does.
  const auto one = violation_loss(ideal.narrow(0, 2, 1).contiguous(), ex.narrow(0, 2, 1).contiguous(),
                                  Tensor::from_vector_i64({0}, {1}), Tensor::from_vector_i64({17}, {1}));
  EXPECT_NEAR(one.value, 0.0, 1e-12);
}

TEST(Af2LossesGrad, ViolationIgnoresMissingAtomsAndGaps) {
  Generator g(81);
  const int64_t n = 3;
  const Tensor aatype = Tensor::from_vector_i64({0, 0, 0}, {n});
  const Tensor positions = randn({n, 14, 3}, g, 0.f, 3.f);
  const auto none = violation_loss(positions, Tensor::zeros({n, 14}, DType::f32),
                                   Tensor::from_vector_i64({0, 5, 10}, {n}), aatype);
  EXPECT_EQ(none.value, 0.0);
  for (float v : none.grad_positions.to_vector()) ASSERT_EQ(v, 0.f);
}

// The clash term's exceptions, with one or two present atoms per residue (so no within-residue or
// peptide terms): clash = 2·E / (ε + #atoms), E = r_a + r_b − 1.5 − d.
TEST(Af2LossesGrad, ClashExceptions) {
  const Tensor cys2 = Tensor::from_vector_i64({4, 4}, {2});
  auto clash = [&](int slot_a, int slot_b, const std::vector<int64_t>& ridx) {
    std::vector<float> x(2 * 14 * 3, 0.f), ex(2 * 14, 0.f);
    x[(14 + slot_b) * 3] = 1.0f;  // the two atoms 1 Å apart along x
    ex[slot_a] = ex[14 + slot_b] = 1.f;
    return violation_loss(Tensor::from_vector(x, {2, 14, 3}), Tensor::from_vector(ex, {2, 14}),
                          Tensor::from_vector_i64(ridx, {2}), cys2)
        .clash;
  };
  // Cys SG (slot 5) – SG: a disulfide bridge, no clash. SG – CB (slot 4): 1.8 + 1.7 − 1.5 − 1 = 1.
  EXPECT_EQ(clash(5, 5, {0, 7}), 0.0);
  EXPECT_NEAR(clash(5, 4, {0, 7}), 2.0 * 1.0 / 2.0, 1e-7);
  // C_i (slot 2) – N_{i+1} (slot 0) is the peptide bond, not a clash; across a gap it is one:
  // 1.7 + 1.55 − 1.5 − 1 = 0.75.
  EXPECT_EQ(clash(2, 0, {0, 1}), 0.0);
  EXPECT_NEAR(clash(2, 0, {0, 2}), 2.0 * 0.75 / 2.0, 1e-7);
  // Pairs are taken once, ordered by residue index, not by row.
  EXPECT_NEAR(clash(5, 4, {7, 0}), 1.0, 1e-7);
}

}  // namespace
}  // namespace foldcore::af2
