// Frame-aligned point error losses of AlphaFold2 (suppl. 1.9.2, Alg. 28) with their analytic
// gradients, as OpenFold's loss.py defines them (backbone_loss, sidechain_loss,
// compute_renamed_ground_truth). Conventions of losses_common.h: double-precision host math,
// f32 CPU gradients shaped like the model outputs.
//
// FAPE (Alg. 28) of frames T_f = (R_f, t_f) and points x_p against the truth (T*_f, x*_p):
//   x_fp = R_fᵀ(x_p − t_f),  x*_fp likewise,  d_fp = sqrt(|x_fp − x*_fp|² + ε)
//   FAPE = Σ_f Σ_p min(d_fp, d_clamp)·m_f·m_p / Z / (ε + Σ_f m_f) / (ε + Σ_p m_p)
// with Z the length scale (10 Å) and d_clamp 10 Å (no clamp when unclamped). OpenFold divides
// in this order (sum over points, / (ε+Σm_f), sum over frames, / (ε+Σm_p)), ε = 1e-4.
// Gradient: ∂/∂d_fp = m_f m_p / (Z (ε+Σm_f)(ε+Σm_p)) where d_fp < d_clamp (0 where clamped);
// ∂d/∂x_fp = (x_fp − x*_fp)/d; x_fp = Rᵀ(x − t) gives ∂x = R g, ∂t = −R g, ∂R_ji = g_i (x − t)_j.
#pragma once

#include "core/tensor.h"

namespace foldcore::af2 {

struct FapeLossConfig {
  double clamp_distance = 10.0;  // Å, backbone (when clamped) and side chains
  double length_scale = 10.0;    // Å ("loss_unit_distance")
  double eps = 1e-4;
  double backbone_weight = 0.5;  // fape = 0.5·backbone + 0.5·sidechain (suppl. 1.9.2, eq. 7 note)
  double sidechain_weight = 0.5;
};

// Backbone FAPE averaged over the structure-module layers (suppl. 1.9.2; Alg. 20 line 17 takes it
// per layer): frames are the backbone frames of each layer, points their translations (Cα).
//   loss = mean_l [ c·FAPE_clamped(l) + (1 − c)·FAPE_unclamped(l) ],  c = use_clamped_fape ∈ [0,1]
// frames [L, N, 7] (quaternion w,x,y,z — rotated through the unnormalised quadratic form as
// OpenFold does — and translation in Å) or [L, N, 4, 4] ([R t; 0 1], Å); backbone_rigid_tensor
// [N, 4, 4], backbone_rigid_mask [N]. grad_frames = ∂loss/∂frames, shaped like frames (4x4: the
// bottom rows 0).
struct BackboneFapeLoss {
  double value = 0;
  Tensor grad_frames;
};
BackboneFapeLoss backbone_fape_loss(const Tensor& frames, const Tensor& backbone_rigid_tensor,
                                    const Tensor& backbone_rigid_mask, double use_clamped_fape,
                                    const FapeLossConfig& config = {});

// Per-residue choice between the two namings of the symmetric side chains (suppl. 1.8.5, Alg. 26
// lines 1–9, OpenFold compute_renamed_ground_truth): with d the pairwise distances (+1e-10 under
// the root) between atom a of residue i and atom b of residue j,
//   L(i) = Σ_{a,j,b} m · sqrt(1e-10 + (d_pred − d_gt)²),  m = e_ia · amb_ia · e_jb · (1 − amb_jb)
// and L_alt(i) likewise with the alternative truth; residue i takes the alternative naming when
// L_alt(i) < L(i). A discrete choice: no gradient flows through it.
//   atom14_pred_positions [N, 14, 3] (final layer), atom14_gt_positions / atom14_alt_gt_positions
//   [N, 14, 3], atom14_gt_exists / atom14_alt_gt_exists / atom14_atom_is_ambiguous [N, 14].
struct RenamedGroundTruth {
  Tensor alt_naming_is_better;  // [N] 0/1
  Tensor positions;             // [N, 14, 3] renamed_atom14_gt_positions
  Tensor exists;                // [N, 14]    renamed_atom14_gt_exists
};
RenamedGroundTruth compute_renamed_ground_truth(const Tensor& atom14_pred_positions, const Tensor& atom14_gt_positions,
                                                const Tensor& atom14_alt_gt_positions, const Tensor& atom14_gt_exists,
                                                const Tensor& atom14_alt_gt_exists,
                                                const Tensor& atom14_atom_is_ambiguous);

// Side-chain FAPE (suppl. 1.9.2 eq. 7 last line, Alg. 28 over all 8N rigid-group frames and 14N
// atoms of the final layer), always clamped at config.clamp_distance: frames of the truth are
// rigidgroups_gt_frames or, for residues with alt_naming_is_better, rigidgroups_alt_gt_frames
// (both [N, 8, 4, 4]); frame mask rigidgroups_gt_exists [N, 8]; points the renamed truth.
//   sidechain_frames [N, 8, 4, 4] (the final layer's global rigid-group frames, Å),
//   atom14_pred_positions [N, 14, 3] (final layer, Å).
// grad_frames [N, 8, 4, 4] (bottom rows 0), grad_positions [N, 14, 3].
struct SidechainFapeLoss {
  double value = 0;
  Tensor grad_frames;
  Tensor grad_positions;
};
SidechainFapeLoss sidechain_fape_loss(const Tensor& sidechain_frames, const Tensor& atom14_pred_positions,
                                      const Tensor& rigidgroups_gt_frames, const Tensor& rigidgroups_alt_gt_frames,
                                      const Tensor& rigidgroups_gt_exists, const RenamedGroundTruth& renamed,
                                      const FapeLossConfig& config = {});

}  // namespace foldcore::af2
