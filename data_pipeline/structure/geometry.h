// Small 3-D geometry for the data pipeline: dihedral angles, frames from three points, pseudo-β
// positions and AlphaFold2's atom37_to_torsion_angles (alphafold/model/all_atom.py; OpenFold
// data_transforms.atom37_to_torsion_angles is the same computation), used to build the template
// torsion-angle features. The model layer has its own (Tensor-based) geometry; the data layer may
// not depend on it, and these host routines work on flat float arrays in double precision.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace foldcore::data::geom {

using Vec3 = std::array<double, 3>;

inline Vec3 sub(const Vec3& a, const Vec3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
inline Vec3 add(const Vec3& a, const Vec3& b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
inline Vec3 scale(const Vec3& a, double s) { return {a[0] * s, a[1] * s, a[2] * s}; }
inline double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double norm(const Vec3& a);

// The dihedral angle a-b-c-d in radians, in (-π, π], IUPAC sign convention (positive when, looking
// along b→c, the far bond c→d is rotated clockwise from the near bond b→a):
//   b1 = b-a, b2 = c-b, b3 = d-c, n1 = b1×b2, n2 = b2×b3,
//   φ = atan2(|b2| b1·n2, n1·n2).
// Degenerate input (collinear atoms) gives atan2(0, 0) = 0.
double dihedral(const Vec3& a, const Vec3& b, const Vec3& c, const Vec3& d);

// A rigid frame: rotation R (columns ex, ey, ez, the frame axes in global coordinates) and origin t;
// local → global is x ↦ R x + t.
struct Frame {
  std::array<Vec3, 3> axes;  // ex, ey, ez
  Vec3 origin;
  // R^T (p - t): global point in this frame's coordinates.
  Vec3 to_local(const Vec3& p) const;
  Vec3 to_global(const Vec3& local) const;
};

// AlphaFold's rigids_from_3_points / OpenFold's Rigid.from_3_points (Gram-Schmidt):
//   ex = normalise(origin - p_neg_x_axis)
//   ey = normalise(u - (ex·u) ex),  u = p_xy_plane - origin
//   ez = ex × ey
// where normalise(v) = v / sqrt(|v|² + eps) (the eps keeps degenerate inputs finite: all-zero
// positions of missing atoms give a zero frame instead of NaN).
Frame frame_from_three_points(const Vec3& p_neg_x_axis, const Vec3& origin, const Vec3& p_xy_plane,
                              double eps = 1e-8);

// AlphaFold's torsion (sin, cos) of the atoms a-b-c-d: d expressed in the frame
// frame_from_three_points(b, c, a) (x along b→c, a in the xy-plane with y > 0) is (·, y, z), and
// (sin, cos) = (z, y) / sqrt(y² + z² + eps). For non-degenerate atoms this is (sin φ, cos φ) of
// dihedral(a, b, c, d); for missing (all-zero) atoms it is (0, 0).
std::array<double, 2> torsion_sin_cos(const Vec3& a, const Vec3& b, const Vec3& c, const Vec3& d,
                                      double eps = 1e-8);

// AlphaFold's pseudo_beta_fn for one residue: CA for glycine (restype 7), CB otherwise, with that
// atom's mask. `positions` [37,3] and `mask` [37] in atom37 order.
struct PseudoBeta {
  Vec3 position;
  float mask;
};
PseudoBeta pseudo_beta(int restype, const float* positions37, const float* mask37);

// Torsion angles of a chain in AlphaFold's 7-angle layout: pre-ω (CA(i-1), C(i-1), N, CA),
// φ (C(i-1), N, CA, C), ψ (N, CA, C, O), χ1..χ4 (residue_constants chi_angles_atoms).
//   sin_cos      [N,7,2]  (sin, cos); ψ is computed with O and shifted by π (both negated), as
//                         AlphaFold does; angles whose atoms are missing are still computed (often
//                         (0,0) or meaningless) and must be read together with the mask
//   alt_sin_cos  [N,7,2]  sin_cos with the π-periodic chis (ASP χ2, GLU χ3, PHE χ2, TYR χ2) negated
//                         (the alternative, π-shifted, naming of symmetric side chains)
//   mask         [N,7]    1 where all four atoms exist (χ: and the residue has that chi)
// `aatype` [N] in AlphaFold restype order; values above 20 (the gap token 21) count as UNK (20),
// as AlphaFold clamps them. Residue 0 has no predecessor: its pre-ω and φ use zero positions with
// mask 0. `positions` [N,37,3], `mask` [N,37]. Computed in float32 in OpenFold's operation order
// (not through torsion_sin_cos above) so that masked, ill-conditioned angles, which the template
// embedding reads unmasked, match the reference pipeline too.
struct TorsionAngles {
  std::vector<float> sin_cos;
  std::vector<float> alt_sin_cos;
  std::vector<float> mask;
};
TorsionAngles atom37_to_torsion_angles(const std::vector<int64_t>& aatype, const float* positions,
                                       const float* mask);

// atom37 indices of the four chi-defining atoms of chi k for `restype` (0..20); unused chis (and UNK)
// give {0,0,0,0} as AlphaFold's get_chi_atom_indices pads them.
std::array<std::array<int, 4>, 4> chi_atom_indices(int restype);

}  // namespace foldcore::data::geom
