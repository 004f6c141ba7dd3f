// AlphaFold2 input-side embedders (suppl. 1.5): the input embedder with relative position
// encoding (Alg. 3 + 4), the recycling embedder (Alg. 32) and the extra-MSA embedder (1.7.2),
// plus the feature functions they need (pseudo-β, distograms, relpos one-hots, extra-MSA
// features) as plain tensor functions usable by the integration code.
//
// Feature functions take host or device tensors and return f32 tensors on the input's device
// (relpos_one_hot: in the dtype and on the device asked for); they are computed on the host (they
// are one-hots/geometry of small inputs, no gradient), relpos_one_hot's expansion excepted.
// Modules register their weights under AF2's names below key_prefix (normally "evoformer").
#pragma once

#include <optional>

#include "models/alphafold/model/config.h"
#include "models/alphafold/params/param_table.h"
#include "nn/layers.h"

namespace foldcore::af2 {

using nn::Variable;

// ---------------------------------------------------------------- features
// Alg. 4 one-hot: offset[i, j] = residue_index[i] − residue_index[j];
// out[i, j, :] = one_hot(clip(offset + k, 0, 2k), 2k + 1), k = max_relative_feature.
// residue_index [N] (integer) → [N, N, 2k+1]; with row0/rows only the rows i ∈ [row0, row0 + rows)
// → [rows, N, 2k+1] (rows < 0: to the end), so a chunked embedding never holds the N² one-hot.
// Built in `dtype` (0 and 1 are exact in every float dtype) on `device` (default: residue_index's):
// the host computes only the bins ([rows, N] 32-bit integers), and the one-hot is expanded where it
// is used (ops::one_hot), so a GPU run copies 4 bytes per pair, not 4·(2k+1) = 260.
Tensor relpos_one_hot(const Tensor& residue_index, int64_t max_relative_feature, int64_t row0 = 0,
                      int64_t rows = -1, DType dtype = DType::f32, std::optional<Device> device = std::nullopt);

// AF2 pseudo_beta_fn: CB position, CA for glycine. aatype [..., N] (integer, AF2 order: G = 7),
// atom37 positions [..., N, 37, 3] → [..., N, 3].
Tensor pseudo_beta(const Tensor& aatype, const Tensor& atom37_positions);
// Its mask: atom37 mask [..., N, 37] of CB (CA for glycine) → [..., N].
Tensor pseudo_beta_mask(const Tensor& aatype, const Tensor& atom37_mask);

// AF2 dgram_from_positions: positions [..., N, 3] →
//   out[..., i, j, b] = 1[lower_b < d²_ij < upper_b],  lower = linspace(min, max, bins)²,
//   upper_b = lower_{b+1} (last: 1e8), d²_ij = |x_i − x_j|²: [..., N, N, bins].
// (Distances below min_bin fall into no bin, so a residue's own entry is all zeros.)
// row0/rows: only the rows i ∈ [row0, row0 + rows) (rows < 0: to the end) → [..., rows, N, bins].
Tensor dgram_from_positions(const Tensor& positions, float min_bin, float max_bin, int64_t num_bins,
                            int64_t row0 = 0, int64_t rows = -1);

// AF2 create_extra_msa_feature: [one_hot(extra_msa, 23), extra_has_deletion,
// extra_deletion_value]: extra_msa [S, N] (integer 0..22), the others [S, N] → [S, N, 25].
Tensor extra_msa_feat(const Tensor& extra_msa, const Tensor& extra_has_deletion, const Tensor& extra_deletion_value);

// ---------------------------------------------------------------- modules
struct MsaPair {
  Variable msa;   // [S, N, c_m]
  Variable pair;  // [N, N, c_z]
};

// Alg. 3 (InputEmbedder) + Alg. 4 (relpos):
//   a = target_feat·W_1d (preprocess_1d), m[s, i] = msa_feat[s, i]·W_msa (preprocess_msa) + a[i]
//   z[i, j] = left_single(target_feat)[i] + right_single(target_feat)[j] + pair_activiations(relpos[i, j])
// (AF2's key is spelled "pair_activiations".)
class InputEmbedder : public nn::Module {
 public:
  InputEmbedder(nn::Scope scope, const Af2Config& config);
  // target_feat [N, 22], msa_feat [S, N, 49], residue_index [N] (integer).
  MsaPair forward(const Variable& target_feat, const Variable& msa_feat, const Tensor& residue_index) const;
  // The two halves of forward: m [S, N, c_m], and the pair rows i ∈ [row0, row0 + rows)
  // [rows, N, c_z] (the chunked embedding builds z from these without an N²-sized temporary).
  Variable msa(const Variable& target_feat, const Variable& msa_feat) const;
  Variable pair_rows(const Variable& target_feat, const Tensor& residue_index, int64_t row0, int64_t rows) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  void check_inputs(const Variable& target_feat, const Tensor& residue_index) const;
  int64_t max_relative_feature_;
  nn::Linear preprocess_1d_, preprocess_msa_, left_single_, right_single_, pair_activations_;
};

// Alg. 32 (RecyclingEmbedder), AF2 order:
//   z += prev_pos_linear(dgram(pseudo_beta(prev_pos), 3.25..20.75, 15 bins)) + prev_pair_norm(prev_z)
//   m[0] += prev_msa_first_row_norm(prev_m1)
// At the first iteration AlphaFold feeds zeros (prev positions all 0: empty dgram → bias only).
class RecyclingEmbedder : public nn::Module {
 public:
  RecyclingEmbedder(nn::Scope scope, const Af2Config& config);
  struct Updates {
    Variable msa_first_row;  // [N, c_m]
    Variable pair;           // [N, N, c_z]
  };
  // prev_m1 [N, c_m], prev_z [N, N, c_z], prev_pseudo_beta [N, 3] (Å; see pseudo_beta()).
  Updates forward(const Variable& prev_m1, const Variable& prev_z, const Tensor& prev_pseudo_beta) const;
  // The same added to an embedding: msa row 0 and the pair.
  MsaPair apply(const MsaPair& embedded, const Variable& prev_m1, const Variable& prev_z,
                const Tensor& prev_pseudo_beta) const;
  // The pieces of apply for a chunked embedding. The pair update of rows [row0, row0 + rows)
  // [rows, N, c_z] from the whole prev_z [N, N, c_z] (undefined: zeros, the first iteration,
  // made per chunk) and prev_pseudo_beta [N, 3]; and m with prev_msa_first_row_norm(prev_m1)
  // added to row 0.
  Variable pair_update_rows(const Variable& prev_z, const Tensor& prev_pseudo_beta, int64_t row0, int64_t rows) const;
  // The same from the rows themselves: prev_z_rows [rows, N, c_z] (undefined: zeros).
  Variable pair_update_of_rows(const Variable& prev_z_rows, const Tensor& prev_pseudo_beta, int64_t row0,
                               int64_t rows) const;
  Variable apply_msa(const Variable& msa, const Variable& prev_m1) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  static Variable add_first_row(const Variable& msa, const Variable& first_row);  // msa[0] += first_row
  float min_bin_, max_bin_;
  int64_t num_bins_;
  nn::LayerNorm prev_msa_first_row_norm_, prev_pair_norm_;
  nn::Linear prev_pos_linear_;
};

// Extra-MSA embedding (1.7.2): extra_msa_feat [S, N, 25] → [S, N, c_e] ("extra_msa_activations").
class ExtraMsaEmbedder : public nn::Module {
 public:
  ExtraMsaEmbedder(nn::Scope scope, const Af2Config& config);
  Variable forward(const Variable& extra_msa_feat) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear extra_msa_activations_;
};

}  // namespace foldcore::af2
