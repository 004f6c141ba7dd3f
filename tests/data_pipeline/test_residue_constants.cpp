// Residue constants: counts, known AlphaFold entries, and the derived frames (proper rotations that
// rebuild the idealised side chains with every chi dihedral at its default value).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "data_pipeline/structure/residue_constants.h"

namespace rc = foldcore::data::rc;

namespace {

using Vec3 = std::array<double, 3>;
using Mat4 = std::array<std::array<double, 4>, 4>;

Mat4 to_double(const std::array<std::array<float, 4>, 4>& f) {
  Mat4 m{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) m[i][j] = f[i][j];
  return m;
}
Mat4 matmul(const Mat4& a, const Mat4& b) {
  Mat4 c{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) c[i][j] += a[i][k] * b[k][j];
  return c;
}
Vec3 transform_point(const Mat4& m, const Vec3& p) {
  Vec3 q{};
  for (int i = 0; i < 3; ++i) q[i] = m[i][0] * p[0] + m[i][1] * p[1] + m[i][2] * p[2] + m[i][3];
  return q;
}
Vec3 sub(const Vec3& a, const Vec3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }
// Dihedral angle p0-p1-p2-p3 in degrees (IUPAC sign convention).
double dihedral_deg(const Vec3& p0, const Vec3& p1, const Vec3& p2, const Vec3& p3) {
  const Vec3 b0 = sub(p1, p0), b1 = sub(p2, p1), b2 = sub(p3, p2);
  const Vec3 n0 = cross(b0, b1), n1 = cross(b1, b2);
  const double y = dot(cross(n0, n1), b1) / norm(b1);
  return std::atan2(y, dot(n0, n1)) * 180.0 / M_PI;
}

// Global frame of each rigid group with all torsion rotations at identity: groups 0..4 hang off
// the backbone frame; chi2..chi4 compose on the previous chi frame (AlphaFold's frame tree).
std::array<Mat4, rc::kNumRigidGroups> global_frames(int restype) {
  const auto& c = rc::rigid_group_constants();
  std::array<Mat4, rc::kNumRigidGroups> g{};
  for (int k = 0; k < 5; ++k) g[k] = to_double(c.default_frame[restype][k]);
  for (int k = 5; k < 8; ++k) g[k] = matmul(g[k - 1], to_double(c.default_frame[restype][k]));
  return g;
}

}  // namespace

TEST(ResidueConstants, Counts) {
  EXPECT_EQ(rc::kAtomTypes.size(), 37u);
  EXPECT_EQ(rc::kRestypeAtom14Names[0].size(), 14u);
  EXPECT_EQ(std::string(rc::kRestypes.begin(), rc::kRestypes.end()), "ARNDCQEGHILKMFPSTWYV");
  EXPECT_EQ(std::set<std::string_view>(rc::kAtomTypes.begin(), rc::kAtomTypes.end()).size(), 37u);
  // Heavy-atom counts per residue (atom14 slots in use).
  const int expected[21] = {5, 11, 8, 8, 6, 9, 9, 4, 10, 8, 8, 9, 8, 11, 7, 6, 7, 14, 12, 7, 0};
  const auto& maps = rc::atom14_maps();
  for (int r = 0; r < 21; ++r) {
    float n = 0;
    for (float m : maps.atom14_mask[r]) n += m;
    EXPECT_EQ(n, expected[r]) << rc::kResnames[r];
    if (r < 20) {
      EXPECT_EQ(static_cast<int>(rc::rigid_group_atom_positions(r).size()), expected[r]);
    }
  }
}

TEST(ResidueConstants, Lookups) {
  EXPECT_EQ(rc::restype_order('A'), 0);
  EXPECT_EQ(rc::restype_order('V'), 19);
  EXPECT_EQ(rc::restype_order('X'), -1);
  EXPECT_EQ(rc::restype_order_with_x('X'), 20);
  EXPECT_EQ(rc::restype_order_with_x('B'), -1);
  EXPECT_EQ(rc::restype_order_with_x('B', true), 20);
  EXPECT_EQ(rc::restype_order_with_x('-', true), -1);
  EXPECT_EQ(rc::restype_1to3('W'), "TRP");
  EXPECT_EQ(rc::restype_1to3('Z'), "UNK");
  EXPECT_EQ(rc::restype_3to1("TYR"), 'Y');
  EXPECT_EQ(rc::restype_3to1("MSE"), 'X');
  EXPECT_EQ(rc::resname_to_idx("GLY"), 7);
  EXPECT_EQ(rc::resname_to_idx("HOH"), 20);
  EXPECT_EQ(rc::atom_order("N"), 0);
  EXPECT_EQ(rc::atom_order("CB"), 3);
  EXPECT_EQ(rc::atom_order("OXT"), 36);
  EXPECT_EQ(rc::atom_order("XX"), -1);
  for (int r = 0; r < 20; ++r) EXPECT_EQ(rc::restype_3to1(rc::restype_1to3(rc::kRestypes[r])), rc::kRestypes[r]);
}

TEST(ResidueConstants, HhblitsMapIsAPermutationMatchingLetters) {
  // HHblits ids are the alphabetical one-letter order; check each maps to the same letter.
  const std::string hhblits = "ACDEFGHIKLMNPQRSTVWY";
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(rc::kRestypes[rc::kMapHhblitsAatypeToOurAatype[i]], hhblits[i]);
  EXPECT_EQ(rc::kMapHhblitsAatypeToOurAatype[20], 20);
  EXPECT_EQ(rc::kMapHhblitsAatypeToOurAatype[21], 21);
}

TEST(ResidueConstants, KnownEntries) {
  const auto& ala = rc::kRestypeAtom14Names[rc::restype_order('A')];
  EXPECT_EQ(ala[0], "N");
  EXPECT_EQ(ala[1], "CA");
  EXPECT_EQ(ala[2], "C");
  EXPECT_EQ(ala[3], "O");
  EXPECT_EQ(ala[4], "CB");
  EXPECT_EQ(ala[5], "");
  const int arg = rc::restype_order('R');
  EXPECT_EQ(rc::num_chi_angles(arg), 4);
  const rc::ChiQuad expected_chi4 = {"CG", "CD", "NE", "CZ"};
  EXPECT_EQ(rc::kChiAnglesAtoms[arg][3], expected_chi4);
  const rc::ChiQuad expected_chi1 = {"N", "CA", "CB", "CG"};
  EXPECT_EQ(rc::kChiAnglesAtoms[arg][0], expected_chi1);
  EXPECT_EQ(rc::num_chi_angles(rc::restype_order('G')), 0);
  EXPECT_EQ(rc::num_chi_angles(rc::restype_order('V')), 1);
  EXPECT_EQ(rc::num_chi_angles(20), 0);
  EXPECT_EQ(rc::kChiPiPeriodic[rc::restype_order('D')][1], 1.0f);
  EXPECT_EQ(rc::kChiPiPeriodic[rc::restype_order('E')][2], 1.0f);
  EXPECT_EQ(rc::kChiPiPeriodic[rc::restype_order('N')][1], 0.0f);
  // AlphaFold literature values (residue_constants.py rigid_group_atom_positions).
  for (const auto& a : rc::rigid_group_atom_positions(rc::restype_order('A'))) {
    if (a.name == "CB") {
      EXPECT_EQ(a.group, 0);
      EXPECT_DOUBLE_EQ(a.position[0], -0.529);
      EXPECT_DOUBLE_EQ(a.position[1], -0.774);
      EXPECT_DOUBLE_EQ(a.position[2], -1.205);
    }
  }
  for (const auto& a : rc::rigid_group_atom_positions(rc::restype_order('W'))) {
    if (a.name == "CZ3") {
      EXPECT_EQ(a.group, 5);
      EXPECT_DOUBLE_EQ(a.position[0], 1.715);
      EXPECT_DOUBLE_EQ(a.position[1], -3.389);
      EXPECT_DOUBLE_EQ(a.position[2], -0.011);
    }
  }
  EXPECT_DOUBLE_EQ(rc::van_der_waals_radius("C"), 1.7);
  EXPECT_DOUBLE_EQ(rc::van_der_waals_radius("n"), 1.55);
  EXPECT_DOUBLE_EQ(rc::van_der_waals_radius("O"), 1.52);
  EXPECT_DOUBLE_EQ(rc::van_der_waals_radius("S"), 1.8);
  EXPECT_DOUBLE_EQ(rc::van_der_waals_radius("Se"), 1.9);
  EXPECT_LT(rc::van_der_waals_radius("ZN"), 0.0);
}

TEST(ResidueConstants, Atom14Atom37MapsRoundTrip) {
  const auto& m = rc::atom14_maps();
  const auto& g = rc::rigid_group_constants();
  for (int r = 0; r < 21; ++r) {
    for (int i = 0; i < 14; ++i) {
      if (m.atom14_mask[r][i] == 0.0f) {
        EXPECT_EQ(m.atom14_to_atom37[r][i], 0);
        continue;
      }
      const int a37 = m.atom14_to_atom37[r][i];
      EXPECT_EQ(rc::kAtomTypes[a37], rc::kRestypeAtom14Names[r][i]);
      EXPECT_EQ(m.atom37_to_atom14[r][a37], i);
      EXPECT_EQ(m.atom37_mask[r][a37], 1.0f);
    }
    // The idealised-geometry masks agree with the name tables (no atom without a position).
    EXPECT_EQ(g.atom14_mask[r], m.atom14_mask[r]) << rc::kResnames[r];
    EXPECT_EQ(g.atom37_mask[r], m.atom37_mask[r]) << rc::kResnames[r];
  }
  float total = 0;
  for (const auto& row : m.atom37_mask)
    for (float v : row) total += v;
  EXPECT_EQ(total, 167.0f);  // sum of heavy atoms over the 20 residues
}

TEST(ResidueConstants, AmbiguousAtomSwaps) {
  const auto& m = rc::atom14_maps();
  const int phe = rc::restype_order('F');
  const int cd1 = rc::atom14_index(phe, "CD1"), cd2 = rc::atom14_index(phe, "CD2");
  EXPECT_EQ(m.atom14_swap_index[phe][cd1], cd2);
  EXPECT_EQ(m.atom14_swap_index[phe][cd2], cd1);
  EXPECT_EQ(m.atom14_is_ambiguous[phe][rc::atom14_index(phe, "CE2")], 1.0f);
  EXPECT_EQ(m.atom14_is_ambiguous[phe][rc::atom14_index(phe, "CZ")], 0.0f);
  int n_ambiguous = 0;
  for (int r = 0; r < 21; ++r)
    for (int i = 0; i < 14; ++i) {
      n_ambiguous += m.atom14_is_ambiguous[r][i] > 0 ? 1 : 0;
      EXPECT_EQ(m.atom14_swap_index[r][m.atom14_swap_index[r][i]], i);  // an involution
    }
  EXPECT_EQ(n_ambiguous, 12);  // ASP 2, GLU 2, PHE 4, TYR 4
}

TEST(ResidueConstants, DefaultFramesAreProperRigidTransforms) {
  const auto& c = rc::rigid_group_constants();
  for (int r = 0; r < 20; ++r) {
    for (int k = 0; k < 8; ++k) {
      const auto& f = c.default_frame[r][k];
      const bool used = k < 4 || rc::kChiAnglesMask[r][k - 4] > 0.5f;
      if (!used) {
        for (const auto& row : f)
          for (float v : row) EXPECT_EQ(v, 0.0f);
        continue;
      }
      // R^T R = I (float32 storage: 1e-6), det R = +1, last row (0 0 0 1).
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double s = 0;
          for (int l = 0; l < 3; ++l) s += double(f[l][i]) * f[l][j];
          EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-6) << rc::kResnames[r] << " group " << k;
        }
      const double det = f[0][0] * (f[1][1] * f[2][2] - f[1][2] * f[2][1]) -
                         f[0][1] * (f[1][0] * f[2][2] - f[1][2] * f[2][0]) +
                         f[0][2] * (f[1][0] * f[2][1] - f[1][1] * f[2][0]);
      EXPECT_NEAR(det, 1.0, 1e-6);
      EXPECT_EQ(f[3][0], 0.0f);
      EXPECT_EQ(f[3][3], 1.0f);
    }
  }
  for (const auto& g : c.default_frame[20])
    for (const auto& row : g)
      for (float v : row) EXPECT_EQ(v, 0.0f);
}

TEST(ResidueConstants, FramesRebuildTheIdealisedResidue) {
  // Place every atom through its group's global frame. Each chi frame sits at the axis-end atom
  // it was built from, and its xy-plane holds the dihedral-defining atoms, so every chi dihedral of
  // the rebuilt residue is 0, and N-CA-C-O is 180 (O in the psi frame, N on its -y side).
  // Tolerance 1e-3 Angstrom / 0.05 degrees: frames are float32, positions given to 1e-3 Angstrom.
  const auto& c = rc::rigid_group_constants();
  for (int r = 0; r < 20; ++r) {
    const auto frames = global_frames(r);
    std::map<std::string_view, Vec3> pos;
    for (int i = 0; i < 14; ++i) {
      if (c.atom14_mask[r][i] == 0.0f) continue;
      const auto& p = c.atom14_rigid_group_positions[r][i];
      pos[rc::kRestypeAtom14Names[r][i]] =
          transform_point(frames[c.atom14_to_rigid_group[r][i]], Vec3{p[0], p[1], p[2]});
    }
    for (int chi = 0; chi < rc::num_chi_angles(r); ++chi) {
      const auto& q = rc::kChiAnglesAtoms[r][chi];
      const double d = dihedral_deg(pos.at(q[0]), pos.at(q[1]), pos.at(q[2]), pos.at(q[3]));
      EXPECT_NEAR(d, 0.0, 0.05) << rc::kResnames[r] << " chi" << chi + 1;
      // The chi frame's origin is the axis-end atom (rebuilt from the previous group).
      const Mat4& f = frames[4 + chi];
      const Vec3 origin = {f[0][3], f[1][3], f[2][3]};
      EXPECT_LT(norm(sub(origin, pos.at(q[2]))), 1e-3) << rc::kResnames[r] << " chi" << chi + 1;
    }
    const double psi_o = dihedral_deg(pos.at("N"), pos.at("CA"), pos.at("C"), pos.at("O"));
    EXPECT_NEAR(std::abs(psi_o), 180.0, 0.05) << rc::kResnames[r];
    // Covalent geometry survives: C=O about 1.23 Angstrom.
    EXPECT_NEAR(norm(sub(pos.at("C"), pos.at("O"))), 1.23, 0.01) << rc::kResnames[r];
  }
}

TEST(ResidueConstants, RigidTransformationGramSchmidt) {
  const auto m = rc::make_rigid_transformation_4x4({2, 0, 0}, {1, 3, 0}, {1, 2, 3});
  EXPECT_DOUBLE_EQ(m[0][0], 1.0);  // ex = x
  EXPECT_DOUBLE_EQ(m[1][1], 1.0);  // ey = y after removing the x part
  EXPECT_DOUBLE_EQ(m[2][2], 1.0);  // ez = x × y = z
  EXPECT_DOUBLE_EQ(m[2][3], 3.0);
  EXPECT_THROW(rc::make_rigid_transformation_4x4({1, 0, 0}, {2, 0, 0}, {0, 0, 0}), std::exception);
}

TEST(ResidueConstants, ModifiedResidueParents) {
  EXPECT_EQ(rc::modified_residue_parent("MSE"), "MET");
  EXPECT_EQ(rc::modified_residue_parent("SEP"), "SER");
  EXPECT_EQ(rc::modified_residue_parent("TPO"), "THR");
  EXPECT_EQ(rc::modified_residue_parent("PTR"), "TYR");
  EXPECT_EQ(rc::modified_residue_parent("HYP"), "PRO");
  EXPECT_EQ(rc::modified_residue_parent("2AS"), "ASP");  // first entry
  EXPECT_EQ(rc::modified_residue_parent("YCM"), "CYS");  // last entry
  EXPECT_EQ(rc::modified_residue_parent("ALA"), "ALA");
  EXPECT_EQ(rc::modified_residue_parent("HOH"), "");
  EXPECT_EQ(rc::modified_residue_parent(""), "");
  // The table is sorted (the lookup bisects it), has no duplicates, and every parent is standard.
  const auto table = rc::modified_residues();
  EXPECT_GT(table.size(), 60u);
  for (size_t i = 0; i < table.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(table[i - 1].name, table[i].name);
    }
    EXPECT_LT(rc::resname_to_idx(table[i].parent), 20) << table[i].name;
    EXPECT_EQ(rc::modified_residue_parent(table[i].name), table[i].parent);
  }
}
