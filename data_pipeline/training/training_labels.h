// AlphaFold2's training labels of one chain (alphafold/model/all_atom.py atom37_to_frames and
// atom37_to_torsion_angles, tf/data_transforms.py make_atom14_masks / make_atom14_positions /
// make_pseudo_beta; OpenFold's data/data_transforms.py computes the same), on host arrays.
//
// Conventions (AlphaFold's):
//  * Frames are rigids_from_3_points(p_neg_x, origin, p_xy) (geom::frame_from_three_points) of each
//    rigid group's three base atoms: backbone (group 0) from (C, CA, N), ψ (group 3) from
//    (CA, C, O), χk (group 4+k-1) from the 2nd..4th atoms of chi_angles_atoms[k]. Groups 1 and 2
//    (pre-ω, φ) have no ground-truth frame (group_exists 0). The backbone frame is then rotated by π
//    about its y axis (x ↦ -x, z ↦ -z): origin CA, x along CA→C, N in the xy-plane with y > 0 —
//    the frame the structure module predicts.
//  * Ambiguous groups: the last χ of ASP (χ2), GLU (χ3), PHE (χ2), TYR (χ2) — the residues of
//    residue_atom_renaming_swaps (AlphaFold's table has no ARG entry; NH1/NH2 are not swapped) —
//    have an alternative frame rotated by π about x (y ↦ -y, z ↦ -z).
//  * atom14 alternative truth: the renaming swap's atoms exchanged (OD1↔OD2, OE1↔OE2,
//    CD1↔CD2 + CE1↔CE2), positions and existence alike.
//  * Frames are 4x4 homogeneous matrices [R t; 0 1] (OpenFold's Rigid.to_tensor_4x4), R's
//    columns the frame axes. Frames of missing atoms are computed anyway (AlphaFold does; the eps
//    of the Gram-Schmidt step gives zero axes for all-zero positions) and masked by *_exists.
//
// Per-residue arrays (N residues), all float32:
//   all_atom_positions [N,37,3]  all_atom_mask [N,37]
//   atom14_gt_positions [N,14,3]  atom14_gt_exists [N,14]
//   atom14_alt_gt_positions [N,14,3]  atom14_alt_gt_exists [N,14]  atom14_atom_is_ambiguous [N,14]
//   rigidgroups_gt_frames [N,8,4,4]  rigidgroups_gt_exists [N,8]  rigidgroups_group_exists [N,8]
//   rigidgroups_group_is_ambiguous [N,8]  rigidgroups_alt_gt_frames [N,8,4,4]
//   backbone_rigid_tensor [N,4,4]  backbone_rigid_mask [N]        (group 0 of the above)
//   torsion_angles_sin_cos [N,7,2]  alt_torsion_angles_sin_cos [N,7,2]  torsion_angles_mask [N,7]
//   chi_angles_sin_cos [N,4,2]  chi_mask [N,4]                     (torsions 3..6)
//   pseudo_beta [N,3]  pseudo_beta_mask [N]
// plus per-chain resolution [1] and is_distillation [1] (float32) in label_features().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data_pipeline/features/features.h"

namespace foldcore::data {

struct ChainLabels {
  int64_t num_res = 0;
  // One per-residue array of the table above: its name, values (row-major, num_res rows) and the
  // trailing shape of one residue's row.
  struct Array {
    std::string name;
    std::vector<float> values;
    std::vector<int64_t> row_shape;
    int64_t row_size() const;
  };
  std::vector<Array> arrays;  // the table above (fixed order)
  // The array called `name`; throws foldcore::Error if there is none.
  const Array& at(const std::string& name) const;
};

// The labels of a chain: aatype [N] (0..20), positions [N,37,3], mask [N,37]. Throws on
// inconsistent sizes or an aatype outside 0..20.
ChainLabels compute_chain_labels(std::span<const int32_t> aatype, std::span<const float> positions,
                                 std::span<const float> mask);

// The label features of the residues `residues` (indices into `labels`, in output order; e.g. a
// crop), zero-padded to `padded_num_res` rows (padded rows: every mask 0), plus resolution [1]
// and is_distillation [1]. Throws when an index is out of range or there are more residues than
// padded_num_res.
FeatureDict label_features(const ChainLabels& labels, std::span<const int64_t> residues, int64_t padded_num_res,
                           double resolution, bool is_distillation);

}  // namespace foldcore::data
