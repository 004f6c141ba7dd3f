// From backbone frames and torsion angles to all-atom coordinates (AF2 suppl. 1.8.4–1.8.5),
// with AlphaFold's residue constants (data_pipeline/structure/residue_constants.h). Plain fp32 host
// geometry (no autograd graph); structure_geometry.h wraps the first two as autograd functions.
#pragma once

#include "models/alphafold/structure/rigid.h"

namespace foldcore::af2 {

// AF2 Alg. 24 lines 10–12 + Alg. 25 (all_atom.torsion_angles_to_frames).
//   aatype [N] (integer 0..20), backbone: Rigid [N] (Å), angles [N, 7, 2] (sin, cos) of
//   ω, φ, ψ, χ1..χ4 → Rigid [N, 8] global frames of the 8 rigid groups.
// Group g's frame in its parent: default_frame[aatype][g] ∘ R_x(angle_g) (backbone: angle 0);
// χ2..χ4 are chained onto χ1 (χ_k in χ_{k−1}'s frame), the rest hang off the backbone frame.
Rigid torsion_angles_to_frames(const Tensor& aatype, const Rigid& backbone, const Tensor& angles_sin_cos);

// AF2 Alg. 24 line 11 (all_atom.frames_and_literature_positions_to_atom14_pos): every atom14 slot
// is its rigid group's literature position mapped by that group's global frame; slots a residue
// type does not have are 0. frames: Rigid [N, 8] → [N, 14, 3].
Tensor frames_to_atom14_positions(const Tensor& aatype, const Rigid& frames);

// AF2 atom14_to_atom37: out[n, a] = atom14[n, residx_atom37_to_atom14[n, a]] · atom37_exists[n, a].
// atom14 [N, 14, 3], residx_atom37_to_atom14 [N, 37] (integer), atom37_exists [N, 37] → [N, 37, 3].
Tensor atom14_to_atom37(const Tensor& atom14, const Tensor& residx_atom37_to_atom14, const Tensor& atom37_exists);

// The per-residue maps of AF2's make_atom14_masks from aatype [N]:
// residx_atom37_to_atom14 [N, 37] (i64) and atom37_atom_exists [N, 37] (f32).
struct Atom37Maps {
  Tensor residx_atom37_to_atom14;
  Tensor atom37_atom_exists;
};
Atom37Maps atom37_maps(const Tensor& aatype);

}  // namespace foldcore::af2
