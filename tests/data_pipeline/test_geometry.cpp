// data_pipeline/geometry: dihedrals, frames, pseudo-β and AlphaFold's atom37_to_torsion_angles
// against naive constructions, then the template torsion angles and pseudo-β of the AlphaFold
// reference features (../shared/af2/ref/features.npz, made by OpenFold) recomputed from its own
// template atom positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <random>

#include "data_pipeline/structure/geometry.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/structure/residue_constants.h"
#include "test_util.h"

namespace foldcore::data::geom {
namespace {

constexpr double kPi = std::numbers::pi;

Vec3 random_vec(std::mt19937_64& g, double scale = 10.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  return {u(g), u(g), u(g)};
}

Vec3 unit(const Vec3& v) { return scale(v, 1.0 / norm(v)); }

// d placed at dihedral θ from a about the axis b→c: with x the unit axis and u the unit component
// of (a - b) perpendicular to it, d = c + L (cos θ u + sin θ x×u) + t x. By the right-hand rule
// this is a rotation by +θ about b→c, i.e. the IUPAC dihedral θ.
Vec3 place_fourth(const Vec3& a, const Vec3& b, const Vec3& c, double theta, double len, double along) {
  const Vec3 x = unit(sub(c, b));
  const Vec3 ab = sub(a, b);
  const Vec3 u = unit(sub(ab, scale(x, dot(ab, x))));
  const Vec3 w = cross(x, u);
  return add(c, add(scale(x, along), scale(add(scale(u, std::cos(theta)), scale(w, std::sin(theta))), len)));
}

double wrap(double a) {  // into (-π, π]
  while (a <= -kPi) a += 2 * kPi;
  while (a > kPi) a -= 2 * kPi;
  return a;
}

TEST(Geometry, DihedralMatchesConstruction) {
  std::mt19937_64 g(7);
  std::uniform_real_distribution<double> ang(-kPi, kPi), len(0.5, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const Vec3 a = random_vec(g), b = random_vec(g), c = random_vec(g);
    const double theta = ang(g);
    const Vec3 d = place_fourth(a, b, c, theta, len(g), len(g) - 1.5);
    EXPECT_NEAR(wrap(dihedral(a, b, c, d) - theta), 0.0, 1e-9) << trial;
    const auto sc = torsion_sin_cos(a, b, c, d, /*eps=*/0.0);
    EXPECT_NEAR(sc[0], std::sin(theta), 1e-9) << trial;
    EXPECT_NEAR(sc[1], std::cos(theta), 1e-9) << trial;
    // Reversing the atom order keeps the dihedral (a-b-c-d and d-c-b-a describe the same angle).
    EXPECT_NEAR(wrap(dihedral(d, c, b, a) - theta), 0.0, 1e-9) << trial;
  }
  // Textbook cases: cis 0, trans π, ±90°.
  const Vec3 a{1, 1, 0}, b{0, 0, 0}, c{1, 0, 0};
  EXPECT_NEAR(dihedral(a, b, c, Vec3{2, 1, 0}), 0.0, 1e-12);
  EXPECT_NEAR(std::abs(dihedral(a, b, c, Vec3{2, -1, 0})), kPi, 1e-12);
  EXPECT_NEAR(dihedral(a, b, c, Vec3{2, 0, 1}), kPi / 2, 1e-12);
  EXPECT_NEAR(dihedral(a, b, c, Vec3{2, 0, -1}), -kPi / 2, 1e-12);
}

TEST(Geometry, FrameFromThreePoints) {
  std::mt19937_64 g(11);
  for (int trial = 0; trial < 50; ++trial) {
    const Vec3 p0 = random_vec(g), o = random_vec(g), p2 = random_vec(g);
    const Frame f = frame_from_three_points(p0, o, p2, 0.0);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        EXPECT_NEAR(dot(f.axes[static_cast<size_t>(i)], f.axes[static_cast<size_t>(j)]), i == j ? 1.0 : 0.0, 1e-12);
    const Vec3 z = cross(f.axes[0], f.axes[1]);  // right-handed
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(z[k], f.axes[2][k], 1e-12);
    const Vec3 lneg = f.to_local(p0), lxy = f.to_local(p2), lo = f.to_local(o);
    EXPECT_LT(lneg[0], 0.0);  // on the negative x axis
    EXPECT_NEAR(lneg[1], 0.0, 1e-9);
    EXPECT_NEAR(lneg[2], 0.0, 1e-9);
    EXPECT_NEAR(lneg[0], -norm(sub(o, p0)), 1e-9);
    EXPECT_GT(lxy[1], 0.0);  // in the xy plane, y > 0
    EXPECT_NEAR(lxy[2], 0.0, 1e-9);
    EXPECT_NEAR(norm(lo), 0.0, 1e-12);
    const Vec3 q = random_vec(g), back = f.to_global(f.to_local(q));
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(back[k], q[k], 1e-9);
  }
  // All-zero (missing) atoms: finite, zero frame and (0, 0) torsion thanks to eps.
  const Vec3 zero{0, 0, 0};
  const auto sc = torsion_sin_cos(zero, zero, zero, zero);
  EXPECT_EQ(sc[0], 0.0);
  EXPECT_EQ(sc[1], 0.0);
}

TEST(Geometry, PseudoBeta) {
  std::vector<float> pos(37 * 3), mask(37, 0.0f);
  for (size_t k = 0; k < pos.size(); ++k) pos[k] = static_cast<float>(k) * 0.5f;
  const int ca = rc::atom_order("CA"), cb = rc::atom_order("CB");
  mask[static_cast<size_t>(ca)] = 1.0f;
  const PseudoBeta gly = pseudo_beta(rc::restype_order('G'), pos.data(), mask.data());
  EXPECT_EQ(gly.position[0], pos[static_cast<size_t>(3 * ca)]);
  EXPECT_EQ(gly.position[2], pos[static_cast<size_t>(3 * ca + 2)]);
  EXPECT_EQ(gly.mask, 1.0f);
  const PseudoBeta ala = pseudo_beta(rc::restype_order('A'), pos.data(), mask.data());
  EXPECT_EQ(ala.position[1], pos[static_cast<size_t>(3 * cb + 1)]);
  EXPECT_EQ(ala.mask, 0.0f);  // CB absent
  const PseudoBeta gap = pseudo_beta(21, pos.data(), mask.data());  // template gap token: CB slot
  EXPECT_EQ(gap.position[0], pos[static_cast<size_t>(3 * cb)]);
}

// A three-residue chain with random atom positions: every angle equals dihedral() of its atoms.
TEST(Geometry, TorsionAnglesMatchDihedrals) {
  std::mt19937_64 g(3);
  const std::vector<int64_t> aatype = {rc::restype_order('F'), rc::restype_order('D'), rc::restype_order('R'), 21};
  const size_t n = aatype.size();
  std::vector<float> pos(n * 37 * 3), mask(n * 37, 1.0f);
  for (auto& p : pos) p = static_cast<float>(std::uniform_real_distribution<double>(-8, 8)(g));
  auto at = [&](size_t i, const char* name) {
    const size_t a = static_cast<size_t>(rc::atom_order(name));
    return Vec3{pos[(i * 37 + a) * 3], pos[(i * 37 + a) * 3 + 1], pos[(i * 37 + a) * 3 + 2]};
  };
  mask[2 * 37 + static_cast<size_t>(rc::atom_order("NE"))] = 0.0f;  // ARG loses chi3, chi4
  const TorsionAngles t = atom37_to_torsion_angles(aatype, pos.data(), mask.data());
  auto check = [&](size_t i, size_t k, double angle, float want_mask, bool negate_alt) {
    EXPECT_NEAR(t.sin_cos[(i * 7 + k) * 2], std::sin(angle), 2e-6) << i << "," << k;
    EXPECT_NEAR(t.sin_cos[(i * 7 + k) * 2 + 1], std::cos(angle), 2e-6) << i << "," << k;
    const float s = negate_alt ? -1.0f : 1.0f;
    EXPECT_EQ(t.alt_sin_cos[(i * 7 + k) * 2], s * t.sin_cos[(i * 7 + k) * 2]);
    EXPECT_EQ(t.alt_sin_cos[(i * 7 + k) * 2 + 1], s * t.sin_cos[(i * 7 + k) * 2 + 1]);
    EXPECT_EQ(t.mask[i * 7 + k], want_mask) << i << "," << k;
  };
  for (size_t i = 0; i < 3; ++i) {
    if (i > 0) {
      check(i, 0, dihedral(at(i - 1, "CA"), at(i - 1, "C"), at(i, "N"), at(i, "CA")), 1.0f, false);
      check(i, 1, dihedral(at(i - 1, "C"), at(i, "N"), at(i, "CA"), at(i, "C")), 1.0f, false);
    } else {
      EXPECT_EQ(t.mask[0], 0.0f);  // no predecessor
      EXPECT_EQ(t.mask[1], 0.0f);
    }
    check(i, 2, dihedral(at(i, "N"), at(i, "CA"), at(i, "C"), at(i, "O")) + kPi, 1.0f, false);  // ψ via O, + π
  }
  // PHE: chi1 N-CA-CB-CG, chi2 CA-CB-CG-CD1 (π-periodic: alt negated); chi3/chi4 absent.
  check(0, 3, dihedral(at(0, "N"), at(0, "CA"), at(0, "CB"), at(0, "CG")), 1.0f, false);
  check(0, 4, dihedral(at(0, "CA"), at(0, "CB"), at(0, "CG"), at(0, "CD1")), 1.0f, true);
  EXPECT_EQ(t.mask[0 * 7 + 5], 0.0f);
  EXPECT_EQ(t.mask[0 * 7 + 6], 0.0f);
  // ASP chi2 CA-CB-CG-OD1, π-periodic.
  check(1, 4, dihedral(at(1, "CA"), at(1, "CB"), at(1, "CG"), at(1, "OD1")), 1.0f, true);
  // ARG chi2 CA-CB-CG-CD present; chi3 CB-CG-CD-NE lost its NE: computed, masked; not periodic.
  check(2, 4, dihedral(at(2, "CA"), at(2, "CB"), at(2, "CG"), at(2, "CD")), 1.0f, false);
  EXPECT_EQ(t.mask[2 * 7 + 5], 0.0f);
  EXPECT_EQ(t.mask[2 * 7 + 6], 0.0f);
  // Gap token 21 is treated as UNK: no chi angles, but its backbone angles exist.
  for (size_t k = 3; k < 7; ++k) EXPECT_EQ(t.mask[3 * 7 + k], 0.0f);
  EXPECT_EQ(t.mask[3 * 7 + 2], 1.0f);
  EXPECT_THROW(atom37_to_torsion_angles({-1}, pos.data(), mask.data()), Error);
}

// ------------------------------------------------------------------ reference features

std::string ref_path() { return testing::shared_dir() + "/af2/ref/features.npz"; }

// Slice r of the last (recycling) axis of a float32 or int64 array, as doubles.
std::vector<double> slice_last(const NpyArray& a, int64_t r) {
  const int64_t rr = a.shape.back(), n = a.numel() / rr;
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i * rr + r);
    if (a.dtype == NpyDType::f32()) {
      float v;
      std::memcpy(&v, a.data.data() + 4 * k, 4);
      out[static_cast<size_t>(i)] = v;
    } else {
      int64_t v;
      std::memcpy(&v, a.data.data() + 8 * k, 8);
      out[static_cast<size_t>(i)] = static_cast<double>(v);
    }
  }
  return out;
}

std::vector<float> to_f32(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

TEST(Geometry, ReferenceTemplateTorsionAnglesAndPseudoBeta) {
  const std::map<std::string, NpyArray> ref = read_npz(ref_path());
  const NpyArray& pos_a = ref.at("template_all_atom_positions");
  const int64_t nt = pos_a.shape[0], n = pos_a.shape[1], rr = pos_a.shape.back();
  ASSERT_EQ(ref.at("template_torsion_angles_sin_cos").shape, (std::vector<int64_t>{nt, n, 7, 2, rr}));
  for (int64_t r = 0; r < rr; ++r) {
    const std::vector<float> pos = to_f32(slice_last(pos_a, r));
    const std::vector<float> mask = to_f32(slice_last(ref.at("template_all_atom_mask"), r));
    const std::vector<double> aatype_d = slice_last(ref.at("template_aatype"), r);
    const std::vector<double> sc_ref = slice_last(ref.at("template_torsion_angles_sin_cos"), r);
    const std::vector<double> alt_ref = slice_last(ref.at("template_alt_torsion_angles_sin_cos"), r);
    const std::vector<double> mask_ref = slice_last(ref.at("template_torsion_angles_mask"), r);
    const std::vector<double> pb_ref = slice_last(ref.at("template_pseudo_beta"), r);
    const std::vector<double> pbm_ref = slice_last(ref.at("template_pseudo_beta_mask"), r);
    // The reference's template_aatype is in AlphaFold restype order (fix_templates_aatype applied):
    // values 0..21 with 21 (gap) exactly where the template has no atoms.
    int64_t present = 0, masked_checked = 0, unmasked_nonzero = 0;
    for (int64_t k = 0; k < nt; ++k) {
      const size_t base = static_cast<size_t>(k * n);
      std::vector<int64_t> aatype(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        aatype[static_cast<size_t>(i)] = static_cast<int64_t>(aatype_d[base + static_cast<size_t>(i)]);
        ASSERT_GE(aatype[static_cast<size_t>(i)], 0);
        ASSERT_LE(aatype[static_cast<size_t>(i)], 21);
        float atoms = 0;
        for (int a = 0; a < 37; ++a) atoms += mask[(base + static_cast<size_t>(i)) * 37 + static_cast<size_t>(a)];
        EXPECT_EQ(aatype[static_cast<size_t>(i)] == 21, atoms == 0.0f) << "template " << k << " residue " << i;
        present += aatype[static_cast<size_t>(i)] != 21;
      }
      const TorsionAngles t = atom37_to_torsion_angles(aatype, pos.data() + base * 37 * 3, mask.data() + base * 37);
      for (size_t j = 0; j < static_cast<size_t>(n) * 7; ++j) {
        const size_t g = base * 7 + j;
        ASSERT_EQ(t.mask[j], mask_ref[g]) << "template " << k << " residue " << j / 7 << " angle " << j % 7;
        for (size_t c = 0; c < 2; ++c) {
          // fp32 of the same formula in the same operation order: equal up to a few ulps. This
          // includes masked angles, which the model sees unmasked; those over zero-padded missing
          // atoms are ill-conditioned (the Gram-Schmidt residual is rounding), and reproduce only
          // because the operation order is the reference's.
          EXPECT_NEAR(t.sin_cos[j * 2 + c], sc_ref[g * 2 + c], 1e-5) << k << "," << j / 7 << "," << j % 7;
          EXPECT_NEAR(t.alt_sin_cos[j * 2 + c], alt_ref[g * 2 + c], 1e-5) << k << "," << j / 7 << "," << j % 7;
          if (mask_ref[g] == 1.0) ++masked_checked;
          if (mask_ref[g] == 0.0 && sc_ref[g * 2 + c] != 0.0) ++unmasked_nonzero;
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const size_t res = base + static_cast<size_t>(i);
        const PseudoBeta b = pseudo_beta(static_cast<int>(aatype[static_cast<size_t>(i)]), pos.data() + res * 37 * 3,
                                         mask.data() + res * 37);
        EXPECT_EQ(b.mask, pbm_ref[res]) << k << "," << i;
        for (size_t c = 0; c < 3; ++c) EXPECT_EQ(static_cast<float>(b.position[c]), pb_ref[res * 3 + c]) << k << "," << i;
      }
    }
    EXPECT_GT(present, 40);            // the reference has real template residues
    EXPECT_GT(masked_checked, 500);    // and many defined angles
    EXPECT_GT(unmasked_nonzero, 0);  // the ill-conditioned case occurs in the reference
  }
}

}  // namespace
}  // namespace foldcore::data::geom
