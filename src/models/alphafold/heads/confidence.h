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

// The PAE head's confidence numbers streamed over blocks of query rows i of its logits [N, N, B]
// (any device, f32/bf16/f16), so that neither the logits nor their softmax need to exist whole:
// one softmax per pair (i, j), in double, gives its PAE (Σ_b p_b · centre_b), its pTM term
// (Σ_b p_b / (1 + centre_b² / d0²)) and, with keep_probs, the probabilities. Every row i must be
// added exactly once, in any order and any block sizes; results do not depend on them (rows are
// reduced over j in j's order, as in predicted_tm_score). residue_weights [N] as in
// predicted_tm_score (undefined: all ones).
class PaeStream {
 public:
  PaeStream(int64_t n, int64_t bins, double max_error_bin, const Tensor& residue_weights = {},
            bool keep_probs = true);
  // logits_rows [rows, N, B]: rows i0 .. i0 + rows − 1 of the logits.
  void add_rows(int64_t i0, const Tensor& logits_rows);
  bool complete() const { return rows_added_ == n_; }
  // After every row (host f32): PAE [N, N], the probabilities [N, N, B] (keep_probs).
  PredictedAlignedError result() const;
  float ptm() const;

 private:
  int64_t n_, b_, rows_added_ = 0;
  bool keep_probs_;
  std::vector<double> centers_, tm_per_bin_;
  std::vector<float> w_;
  std::vector<double> per_alignment_;  // per row i
  std::vector<char> seen_;
  Tensor pae_, probs_;
};

// pTM (AF2 predicted_tm_score): logits [N, N, B]; residue_weights [N] (e.g. seq_mask; undefined:
// all ones).
//   n = max(Σ w, 19),  d0 = 1.24·(n − 15)^(1/3) − 1.8,
//   tm[i, j] = Σ_b p_ijb / (1 + centre_b² / d0²),
//   per_alignment[i] = Σ_j tm[i, j] · w_i w_j / (1e-8 + Σ_j w_i w_j),
//   pTM = per_alignment[argmax_i per_alignment[i] · w_i].
float predicted_tm_score(const Tensor& logits, const Tensor& residue_weights = {}, double max_error_bin = 31.0);

}  // namespace foldcore::af2
