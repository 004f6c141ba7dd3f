// Tables derived from AlphaFold's literal residue constants: rigid-group default frames and per-slot
// positions (AlphaFold's _make_rigid_group_constants) and the atom14 <-> atom37 maps and renaming
// permutations (AlphaFold's make_atom14_masks / the all-atom loss' renaming matrices).
#include <cmath>

#include "core/error.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data::rc {
namespace {

using Vec3 = std::array<double, 3>;
using Mat4 = std::array<std::array<double, 4>, 4>;

Vec3 sub(const Vec3& a, const Vec3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec3 scaled(const Vec3& a, double s) { return {a[0] * s, a[1] * s, a[2] * s}; }
Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

// Position of `name` in restype's idealised atom list; FC_CHECK that it exists.
Vec3 ideal_position(int restype, std::string_view name) {
  for (const RigidGroupAtom& a : rigid_group_atom_positions(restype))
    if (a.name == name) return a.position;
  FC_THROW("residue constants: atom ", name, " missing from ", kResnames[restype]);
}

void store_frame(RigidGroupConstants& c, int restype, int group, const Mat4& m) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) c.default_frame[restype][group][i][j] = static_cast<float>(m[i][j]);
}

Mat4 identity4() {
  Mat4 m{};
  for (int i = 0; i < 4; ++i) m[i][i] = 1.0;
  return m;
}

RigidGroupConstants build_rigid_group_constants() {
  RigidGroupConstants c;
  for (int r = 0; r < kRestypeNum; ++r) {
    for (const RigidGroupAtom& a : rigid_group_atom_positions(r)) {
      const int a37 = atom_order(a.name);
      const int a14 = atom14_index(r, a.name);
      FC_CHECK(a37 >= 0 && a14 >= 0, "residue constants: bad atom ", a.name, " in ", kResnames[r]);
      c.atom37_to_rigid_group[r][a37] = a.group;
      c.atom37_mask[r][a37] = 1.0f;
      c.atom14_to_rigid_group[r][a14] = a.group;
      c.atom14_mask[r][a14] = 1.0f;
      for (int k = 0; k < 3; ++k) {
        c.atom37_rigid_group_positions[r][a37][k] = static_cast<float>(a.position[k]);
        c.atom14_rigid_group_positions[r][a14][k] = static_cast<float>(a.position[k]);
      }
    }
  }
  for (int r = 0; r < kRestypeNum; ++r) {
    // Group 0 (backbone) is the residue frame itself; group 1 (pre-omega) is an identity
    // placeholder in AlphaFold.
    store_frame(c, r, 0, identity4());
    store_frame(c, r, 1, identity4());
    const Vec3 n = ideal_position(r, "N"), ca = ideal_position(r, "CA"), cc = ideal_position(r, "C");
    // phi frame: x along CA->N, y from the backbone x axis, origin at N.
    store_frame(c, r, 2, make_rigid_transformation_4x4(sub(n, ca), {1.0, 0.0, 0.0}, n));
    // psi frame: x along CA->C, y from N->CA, origin at C.
    store_frame(c, r, 3, make_rigid_transformation_4x4(sub(cc, ca), sub(ca, n), cc));
    // chi1 frame (in the backbone frame): x along CA->CB (the chi1 axis), y towards N.
    if (kChiAnglesMask[r][0] > 0.5f) {
      const ChiQuad& q = kChiAnglesAtoms[r][0];
      const Vec3 p0 = ideal_position(r, q[0]), p1 = ideal_position(r, q[1]),
                 p2 = ideal_position(r, q[2]);
      store_frame(c, r, 4, make_rigid_transformation_4x4(sub(p2, p1), sub(p0, p1), p2));
    }
    // chi2..chi4 frames, each in the previous chi frame: the next axis starts at that frame's
    // origin and ends at the axis-end atom, which is given in the previous frame's coordinates;
    // y is chosen as -x of the previous frame so the previous axis atom lies in the xy-plane.
    for (int chi = 1; chi < kNumChiAngles; ++chi) {
      if (kChiAnglesMask[r][chi] < 0.5f) continue;
      const Vec3 end = ideal_position(r, kChiAnglesAtoms[r][chi][2]);
      store_frame(c, r, 4 + chi, make_rigid_transformation_4x4(end, {-1.0, 0.0, 0.0}, end));
    }
  }
  return c;
}

Atom14Maps build_atom14_maps() {
  Atom14Maps m;
  for (int r = 0; r < kRestypeNumWithX; ++r) {
    for (int i = 0; i < kAtom14Num; ++i) {
      m.atom14_swap_index[r][i] = i;
      const std::string_view name = kRestypeAtom14Names[r][i];
      if (name.empty()) continue;
      const int a37 = atom_order(name);
      FC_CHECK(a37 >= 0, "residue constants: unknown atom ", name);
      m.atom14_to_atom37[r][i] = a37;
      m.atom37_to_atom14[r][a37] = i;
      m.atom14_mask[r][i] = 1.0f;
      m.atom37_mask[r][a37] = 1.0f;
    }
    if (r == kUnkRestypeIndex) continue;
    for (const AtomSwap& s : kResidueAtomRenamingSwaps) {
      if (s.resname != kResnames[r]) continue;
      const int i = atom14_index(r, s.atom1), j = atom14_index(r, s.atom2);
      FC_CHECK(i >= 0 && j >= 0, "residue constants: bad renaming swap in ", s.resname);
      m.atom14_swap_index[r][i] = j;
      m.atom14_swap_index[r][j] = i;
      m.atom14_is_ambiguous[r][i] = 1.0f;
      m.atom14_is_ambiguous[r][j] = 1.0f;
    }
  }
  return m;
}

}  // namespace

std::array<std::array<double, 4>, 4> make_rigid_transformation_4x4(const Vec3& ex, const Vec3& ey,
                                                                   const Vec3& t) {
  const double ex_norm = std::sqrt(dot(ex, ex));
  FC_CHECK(ex_norm > 0.0, "make_rigid_transformation_4x4: ex is the zero vector");
  const Vec3 e0 = scaled(ex, 1.0 / ex_norm);
  // Gram-Schmidt: remove ey's component along e0, then normalise.
  Vec3 e1 = sub(ey, scaled(e0, dot(ey, e0)));
  const double e1_norm = std::sqrt(dot(e1, e1));
  FC_CHECK(e1_norm > 0.0, "make_rigid_transformation_4x4: ey is parallel to ex");
  e1 = scaled(e1, 1.0 / e1_norm);
  const Vec3 e2 = cross(e0, e1);
  Mat4 m{};
  for (int i = 0; i < 3; ++i) {
    m[i][0] = e0[i];
    m[i][1] = e1[i];
    m[i][2] = e2[i];
    m[i][3] = t[i];
  }
  m[3][3] = 1.0;
  return m;
}

const RigidGroupConstants& rigid_group_constants() {
  static const RigidGroupConstants kConstants = build_rigid_group_constants();
  return kConstants;
}

const Atom14Maps& atom14_maps() {
  static const Atom14Maps kMaps = build_atom14_maps();
  return kMaps;
}

}  // namespace foldcore::data::rc
