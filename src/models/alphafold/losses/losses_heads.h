// The AlphaFold2 losses on head logits (suppl. 1.9.6–1.9.10, 1.9.7 for TM) with their analytic
// gradients w.r.t. the logits, as OpenFold's loss.py defines them. Conventions of
// losses_common.h: double-precision host math, f32 CPU gradient shaped like the logits — except
// that the distogram, masked MSA and TM losses, given logits on a CUDA device, compute their rows
// there (fp32 per row, the sum in double on the host) and return the gradient there (f32).
// CE(z, k) = −log softmax(z)_k, ∂CE/∂z = softmax(z) − onehot(k).
#pragma once

#include "core/tensor.h"

namespace foldcore::af2 {

struct LogitsLoss {
  double value = 0;
  Tensor grad_logits;  // same shape as the logits
};

// Resolution filter of pLDDT, experimentally resolved and TM (suppl. 1.9.6, 1.9.10): these losses
// are 0 unless min_resolution ≤ resolution ≤ max_resolution.
struct ResolutionFilter {
  double min_resolution = 0.1;  // Å
  double max_resolution = 3.0;  // Å
  bool accepts(double resolution) const { return resolution >= min_resolution && resolution <= max_resolution; }
};

// Distogram (suppl. 1.9.8, eq. 41): 64 bins of the Cβ (Cα for Gly) distance, lower breaks
// b_k = linspace(2.3125, 21.6875, 63); true bin of (i,j) = #{k : |x_i − x_j|² > b_k²};
//   L = Σ_ij m_i m_j CE(logits_ij, bin_ij) / (ε + Σ_ij m_i m_j),  ε = 1e-8 (OpenFold's config eps).
// logits [N, N, 64], pseudo_beta [N, 3] (Å), pseudo_beta_mask [N].
struct DistogramLossConfig {
  double min_bin = 2.3125, max_bin = 21.6875;
  int64_t num_bins = 64;
  double eps = 1e-8;
};
LogitsLoss distogram_loss(const Tensor& logits, const Tensor& pseudo_beta, const Tensor& pseudo_beta_mask,
                          const DistogramLossConfig& config = {});

// Masked MSA (suppl. 1.9.9, eq. 42): over the BERT-masked positions,
//   L = 0.5·Σ_sn m_sn CE(logits_sn, true_msa_sn) / (ε + 0.5·Σ_sn m_sn),  ε = 1e-8
// (OpenFold's fp16-friendly scale 0.5 kept so the ε enters identically).
// logits [S, N, 23], true_msa [S, N] (integer 0..22), bert_mask [S, N].
LogitsLoss masked_msa_loss(const Tensor& logits, const Tensor& true_msa, const Tensor& bert_mask, double eps = 1e-8);

// lDDT-Cα per residue (suppl. 1.9.6; OpenFold lddt with per_residue), the pLDDT target: pairs
// j ≠ i with true Cα distance < 15 Å (both Cα resolved) score ¼·Σ_{t∈{0.5,1,2,4}} [|d_pred − d_true| < t],
//   lddt_i = (ε + Σ_j score_ij) / (ε + Σ_j pair_ij),  distances sqrt(ε + |Δ|²),  ε = 1e-10.
// pred_ca / true_ca [N, 3], ca_mask [N] → [N] (double).
std::vector<double> lddt_ca(const std::vector<double>& pred_ca, const std::vector<double>& true_ca,
                            const std::vector<double>& ca_mask, double cutoff = 15.0, double eps = 1e-10);

// pLDDT (suppl. 1.9.6, eq. 39, Alg. 29): 50 bins of lDDT-Cα of the final structure (no gradient
// into the structure); bin = min(⌊lddt·50⌋, 49), negative scores set to 0;
//   L = Σ_i m_i CE(logits_i, bin_i) / (ε + Σ_i m_i), m_i the Cα mask, ε = 1e-8; 0 outside the
//   resolution filter.
// logits [N, 50], final_atom_positions / all_atom_positions [N, 37, 3], all_atom_mask [N, 37].
struct PlddtLossConfig {
  double cutoff = 15.0;
  int64_t num_bins = 50;
  double eps = 1e-8;  // OpenFold's config passes its global eps (1e-8) to both lddt and the mean
  ResolutionFilter filter;
};
LogitsLoss plddt_loss(const Tensor& logits, const Tensor& final_atom_positions, const Tensor& all_atom_positions,
                      const Tensor& all_atom_mask, double resolution, const PlddtLossConfig& config = {});

// Experimentally resolved (suppl. 1.9.10, eq. 43): sigmoid cross-entropy per atom37 slot,
//   L = Σ_ia e_ia [−y log σ(z) − (1−y) log σ(−z)] / (ε + Σ_ia e_ia),
// y = all_atom_mask, e = atom37_atom_exists, ε = 1e-8; 0 outside the resolution filter.
// ∂/∂z = e (σ(z) − y) / (ε + Σ e).  logits [N, 37].
struct ExperimentallyResolvedLossConfig {
  double eps = 1e-8;
  ResolutionFilter filter;
};
LogitsLoss experimentally_resolved_loss(const Tensor& logits, const Tensor& atom37_atom_exists,
                                        const Tensor& all_atom_mask, double resolution,
                                        const ExperimentallyResolvedLossConfig& config = {});

// TM / PAE (suppl. 1.9.7, eq. 40): 64 bins of the aligned error e_ij = |T_i⁻¹ x_j − T*_i⁻¹ x*_j|
// (x the frame translations), lower breaks b_k = linspace(0, 31, 63); bin = #{k : e² > b_k²};
//   L = 0.5·Σ_ij m_i m_j CE(logits_ij, bin_ij) / (ε + 0.5·Σ_ij m_i m_j),  ε = 1e-8;
// 0 outside the resolution filter. No gradient into the frames (the target is detached).
// logits [N, N, 64], final_frames [N, 7] (quaternion + translation Å) or [N, 4, 4] (the last
// structure-module layer), backbone_rigid_tensor [N, 4, 4], backbone_rigid_mask [N].
struct TmLossConfig {
  double max_bin = 31.0;
  int64_t num_bins = 64;
  double eps = 1e-8;
  ResolutionFilter filter;
};
LogitsLoss tm_loss(const Tensor& logits, const Tensor& final_frames, const Tensor& backbone_rigid_tensor,
                   const Tensor& backbone_rigid_mask, double resolution, const TmLossConfig& config = {});

// torch.linspace(start, end, steps) in float32 as PyTorch evaluates it (the first half counted up
// from start, the second half down from end), so bin edges agree bit for bit with OpenFold.
std::vector<float> linspace_f32(double start, double end, int64_t steps);

}  // namespace foldcore::af2
