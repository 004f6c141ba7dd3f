// The AlphaFold2 training loss (suppl. 1.9, eq. 7 with Table 4's weights) over every term of
// losses_fape.h, losses_torsion.h, losses_heads.h and losses_violation.h, with the gradient of the
// total w.r.t. every model output it reads. This is what the trainer calls after the forward pass
// and feeds, as the output gradients, into the backward pass.
//
//   unscaled = w_dist·L_dist + w_er·L_er + w_fape·L_fape + w_plddt·L_plddt + w_msa·L_msa
//            + w_chi·L_chi + w_viol·L_viol + w_tm·L_tm
//   loss     = unscaled · sqrt(min(mean(seq_length), N_crop))   (N_crop = padded residues)
//   L_fape   = 0.5·backbone FAPE (mean over layers) + 0.5·side-chain FAPE (final layer)
// As OpenFold does, a term that evaluates to NaN/Inf contributes 0 (and a warning) instead of
// poisoning the step; its name is listed in Af2Loss::skipped.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/alphafold/losses/losses_fape.h"
#include "models/alphafold/losses/losses_heads.h"
#include "models/alphafold/losses/losses_torsion.h"
#include "models/alphafold/losses/losses_violation.h"

namespace foldcore::af2 {

// Suppl. Table 4 (and OpenFold's config): the initial-training and fine-tuning stages differ in the
// experimentally resolved (0 → 0.01) and violation (0 → 1) weights. The TM/PAE head of the _ptm
// models is trained with weight 0.1 (suppl. 1.9.7) in either stage.
struct LossWeights {
  double distogram = 0.3;
  double experimentally_resolved = 0.0;
  double fape = 1.0;
  double plddt = 0.01;
  double masked_msa = 2.0;
  double supervised_chi = 1.0;
  double violation = 0.0;
  double tm = 0.0;

  static LossWeights initial(bool ptm);
  static LossWeights finetune(bool ptm);
  // "initial" or "finetune"; anything else throws foldcore::Error.
  static LossWeights stage(const std::string& name, bool ptm);
};

struct Af2LossConfig {
  LossWeights weights = LossWeights::initial(false);
  FapeLossConfig fape;
  SupervisedChiLossConfig supervised_chi;
  DistogramLossConfig distogram;
  double masked_msa_eps = 1e-8;
  PlddtLossConfig plddt;
  ExperimentallyResolvedLossConfig experimentally_resolved;
  ViolationLossConfig violation;
  TmLossConfig tm;
};

// The model outputs the loss reads (one example, no batch axis; L structure-module layers). The
// same struct carries their gradients in Af2Loss::grads.
struct Af2LossOutputs {
  Tensor sm_frames;                       // [L, N, 7] backbone frames per layer (quaternion, Å) or [L, N, 4, 4]
  Tensor sm_angles;                       // [L, N, 7, 2] normalised torsion (sin, cos)
  Tensor sm_unnormalized_angles;          // [L, N, 7, 2]
  Tensor sidechain_frames;                // [N, 8, 4, 4] final layer's global rigid-group frames (Å)
  Tensor atom14_positions;                // [N, 14, 3] final layer (Å)
  Tensor final_atom_positions;            // [N, 37, 3] (pLDDT target only: no gradient)
  Tensor distogram_logits;                // [N, N, 64]
  Tensor masked_msa_logits;               // [S, N, 23]
  Tensor lddt_logits;                     // [N, 50]
  Tensor experimentally_resolved_logits;  // [N, 37]
  Tensor tm_logits;                       // [N, N, 64]; may be undefined when weights.tm is 0

  // Every field under its name above, in declaration order (loops over all outputs or gradients).
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
};

// The labels and features the loss reads (the final recycling iteration's, no batch axis).
struct Af2LossBatch {
  Tensor aatype, residue_index, seq_mask;                      // [N]
  Tensor seq_length, resolution, use_clamped_fape;             // one value each
  Tensor pseudo_beta, pseudo_beta_mask;                        // [N, 3], [N]
  Tensor true_msa, bert_mask;                                  // [S, N]
  Tensor all_atom_positions, all_atom_mask, atom37_atom_exists;  // [N, 37, 3], [N, 37], [N, 37]
  Tensor atom14_atom_exists;                                   // [N, 14]
  Tensor atom14_gt_positions, atom14_alt_gt_positions;         // [N, 14, 3]
  Tensor atom14_gt_exists, atom14_alt_gt_exists, atom14_atom_is_ambiguous;  // [N, 14]
  Tensor rigidgroups_gt_frames, rigidgroups_alt_gt_frames;     // [N, 8, 4, 4]
  Tensor rigidgroups_gt_exists;                                // [N, 8]
  Tensor backbone_rigid_tensor, backbone_rigid_mask;           // [N, 4, 4], [N]
  Tensor chi_angles_sin_cos, chi_mask;                         // [N, 4, 2], [N, 4]

  // From arrays named as in AlphaFold/OpenFold's feature dicts (the names above); a missing key
  // throws foldcore::Error naming it. Shapes are checked by the losses.
  static Af2LossBatch from_arrays(const std::map<std::string, Tensor>& arrays);
  // The names from_arrays reads.
  static const std::vector<std::string>& keys();
};

struct Af2Loss {
  // Unweighted terms under OpenFold's names: distogram, experimentally_resolved, fape,
  // plddt_loss, masked_msa, supervised_chi, violation, tm (when tm logits are given).
  std::map<std::string, double> terms;
  double unscaled_loss = 0;
  double loss = 0;
  double scale = 1;                  // sqrt(min(seq_length, N))
  std::vector<std::string> skipped;  // terms that were NaN/Inf and counted as 0
  Af2LossOutputs grads;              // d loss / d output (final_atom_positions: 0, a detached target)
  RenamedGroundTruth renamed;        // the side-chain naming chosen per residue
  ViolationLoss violation;           // the violation parts (value, grads unscaled)
};

Af2Loss af2_loss(const Af2LossOutputs& outputs, const Af2LossBatch& batch, const Af2LossConfig& config);

}  // namespace foldcore::af2
