// AlphaFold2 confidence metrics from head logits (suppl. 1.9.6 pLDDT, 1.9.7 PAE / pTM), as plain
// functions on tensors (any device, f32/bf16/f16 logits; computed on the host in double, results
// f32 on the logits' device). No autograd: these are reporting quantities, not losses.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace foldcore::af2 {

// Softmax over the last axis, f32, on the input's device.
Tensor softmax_last(const Tensor& logits);

// pLDDT (Alg. 29 head output): logits [..., B] (B = 50) → [...] in [0, 100]:
//   plddt = 100 · Σ_b softmax(logits)_b · c_b,   c_b = (b + ½)/B (bin centres on [0, 1]).
Tensor compute_plddt(const Tensor& logits);

// Bin centres of AF2's PAE head: breaks = linspace(0, max_error_bin, num_bins − 1),
// step = breaks[1] − breaks[0], centres = breaks + step/2, plus one more centre past the last
// break (breaks[-1] + 3·step/2) for the open-ended last bin. num_bins ≥ 3.
std::vector<double> pae_bin_centers(double max_error_bin, int64_t num_bins);

struct PredictedAlignedError {
  Tensor aligned_confidence_probs;  // [N, N, B] softmax(logits)
  Tensor predicted_aligned_error;   // [N, N] Σ_b p_b · centre_b (Å)
  float max_predicted_aligned_error = 0.f;  // the last bin centre (31.75 Å for 64 bins to 31)
};

// logits [N, N, B] of the predicted_aligned_error head.
PredictedAlignedError compute_predicted_aligned_error(const Tensor& logits, double max_error_bin = 31.0);

// pTM (AF2 predicted_tm_score): logits [N, N, B]; residue_weights [N] (e.g. seq_mask; undefined:
// all ones).
//   n = max(Σ w, 19),  d0 = 1.24·(n − 15)^(1/3) − 1.8,
//   tm[i, j] = Σ_b p_ijb / (1 + centre_b² / d0²),
//   per_alignment[i] = Σ_j tm[i, j] · w_i w_j / (1e-8 + Σ_j w_i w_j),
//   pTM = per_alignment[argmax_i per_alignment[i] · w_i].
float predicted_tm_score(const Tensor& logits, const Tensor& residue_weights = {}, double max_error_bin = 31.0);

}  // namespace foldcore::af2
