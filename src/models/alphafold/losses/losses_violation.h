// Structural violation loss of AlphaFold2 (suppl. 1.9.11, eqs. 44–47) with its analytic gradient
// w.r.t. the final layer's atom14 positions, as OpenFold's find_structural_violations +
// violation_loss define it. Conventions of losses_common.h.
//
// Between residues (consecutive rows i, i+1 with residue_index[i+1] − residue_index[i] = 1):
//   ℓ_CN = sqrt(1e-6 + |C_i − N_{i+1}|²),  e = sqrt(1e-6 + (ℓ_CN − ℓ⁰)²)
//   bond  = Σ m·relu(e − τ·σ) / (Σ m + 1e-6),  ℓ⁰/σ = 1.329/0.014 (1.341/0.016 before Pro), τ = 12
//   angles: cos∠(CA_i, C_i, N_{i+1}) = û(C→CA)·û(C→N), cos∠(C_i, N_{i+1}, CA_{i+1}) = −û(C→N)·û(N→CA)
//   (û = v / sqrt(1e-6 + |v|²)), e = sqrt(1e-6 + (cos − cos⁰)²), same relu/mean with
//   cos⁰ = −0.4473 / −0.5203; σ = 0.014 for CA–C–N (AlphaFold uses the C–N bond-length stddev
//   there, kept for parity) and 0.0353 for C–N–CA.
// Clashes between atoms of different residues (residue_index_i < residue_index_j, both atoms
// present, not the C_i–N_{i+1} peptide bond, not a slot-5 pair — AlphaFold's disulfide exception
// by atom14 slot of Cys SG):  E = relu(r_a + r_b − 1.5 − d),  d = sqrt(1e-10 + |x_a − x_b|²),
// r the van der Waals radii (C 1.7, N 1.55, O 1.52, S 1.8).
// Within a residue, over ordered atom14 pairs a ≠ b of present atoms:
//   W = relu(lower_ab − d) + relu(d − upper_ab), bounds of make_atom14_dists_bounds(1.5, 12)
//   (Engh & Huber bonds and angle-derived distances ± 12σ; non-bonded r_a + r_b − 1.5).
// Per-atom sums count each pair for both atoms, so
//   clash = (2·Σ_pairs E + 2·Σ_ordered W) / (ε + Σ atom14_atom_exists),  ε = 1e-8
//   violation = bond + angle_CaCN + angle_CNCa + clash.
#pragma once

#include "core/tensor.h"

namespace foldcore::af2 {

struct ViolationLossConfig {
  double violation_tolerance_factor = 12.0;
  double clash_overlap_tolerance = 1.5;
  double eps = 1e-8;
};

struct ViolationLoss {
  double value = 0;
  // The four parts of the value (OpenFold's bonds_c_n_loss_mean, angles_ca_c_n_loss_mean,
  // angles_c_n_ca_loss_mean and the clash term).
  double bonds_c_n = 0, angles_ca_c_n = 0, angles_c_n_ca = 0, clash = 0;
  Tensor grad_positions;  // [N, 14, 3]
};

// atom14_pred_positions [N, 14, 3] (final layer, Å), atom14_atom_exists [N, 14],
// residue_index [N], aatype [N] (0..20).
ViolationLoss violation_loss(const Tensor& atom14_pred_positions, const Tensor& atom14_atom_exists,
                             const Tensor& residue_index, const Tensor& aatype, const ViolationLossConfig& config = {});

}  // namespace foldcore::af2
