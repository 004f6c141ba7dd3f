// MSA attention modules of the Evoformer (AlphaFold2 supplement §1.6.1–1.6.2, §1.7.2):
//   MsaRowAttentionWithPairBias  (Alg. 7)   — official module "msa_row_attention_with_pair_bias"
//   MsaColumnAttention           (Alg. 8)   — "msa_column_attention"
//   MsaColumnGlobalAttention     (Alg. 19)  — "msa_column_global_attention" (extra-MSA stack)
// Each forward returns the UPDATE (before the residual add and dropout). Shapes: m [S, N, c_m],
// z [N, N, c_z], msa_mask [S, N] (1 = present). chunk > 0: inference-time chunking (no-grad mode)
// over the attention's batch axis (rows for row attention, columns for column attention).
// `into` (no-grad mode only; the stream m itself, or any [S, N, c_m] tensor the caller owns): the
// update is added into it chunk by chunk (run_chunked) instead of returned, and `into` is
// returned. Safe on m itself: every chunk reads only LN(m), computed whole before the first write.
#pragma once

#include "models/alphafold/model/config.h"
#include "models/alphafold/evoformer/evoformer_util.h"

namespace foldcore::af2 {

// Alg. 7: m̂ = LN(m) (query_norm); b[h,i,j] = LN(z)[i,j]·w_h (feat_2d_norm, feat_2d_weights, no
// bias); per row s: o = gated multi-head attention of m̂[s] over the residues with bias b shared by
// every row and the key mask bias 1e9·(mask[s] − 1).
class ParallelGroup;  // model_parallel.h

class MsaRowAttentionWithPairBias : public nn::Module {
 public:
  MsaRowAttentionWithPairBias(nn::Scope scope, int64_t c_m, int64_t c_z, const AttentionConfig& att);
  // m [S, N, c_m], z [N, N, c_z], msa_mask [S, N] → [S, N, c_m]
  Variable forward(const Variable& m, const Variable& z, const Tensor& msa_mask, int64_t chunk = 0,
                   const Tensor& into = Tensor()) const;
  // DAP (evoformer_parallel.cpp): m_rows [S/P, N, c_m] this rank's MSA rows, z_rows [N/P, N, c_z]
  // its pair rows, msa_mask_rows [S/P, N]; the pair bias is gathered whole. → [S/P, N, c_m].
  Variable forward_dap(const Variable& m_rows, const Variable& z_rows, const Tensor& msa_mask_rows,
                       const ParallelGroup& g, int64_t chunk = 0) const;
  // key_prefix e.g. "evoformer/evoformer_iteration/msa_row_attention_with_pair_bias".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::LayerNorm query_norm_, feat_2d_norm_;
  nn::Linear feat_2d_;
  nn::Attention attention_;
};

// Alg. 8: the same gated attention (no pair bias) along the columns: each residue's column of
// LN(m) attends over the sequences, key mask bias from msa_mask[:, i].
class MsaColumnAttention : public nn::Module {
 public:
  MsaColumnAttention(nn::Scope scope, int64_t c_m, const AttentionConfig& att);
  Variable forward(const Variable& m, const Tensor& msa_mask, int64_t chunk = 0,
                   const Tensor& into = Tensor()) const;  // → [S, N, c_m]
  // DAP (evoformer_parallel.cpp): x = query_norm()(m) of a rank's columns [S, N/P, c_m] (made on
  // its rows and switched) → the update in x's layout.
  Variable forward_normalized(const Variable& x, const Tensor& msa_mask, int64_t chunk = 0) const;
  const nn::LayerNorm& query_norm() const { return query_norm_; }
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  Variable forward_impl(const Variable& m, const Tensor& msa_mask, int64_t chunk, const Tensor& into,
                        const nn::LayerNorm* norm) const;
  nn::LayerNorm query_norm_;
  nn::Attention attention_;
};

// Alg. 19: per column, one query per head from the mask-weighted mean of LN(m) over the sequences
// (Σ_s mask·m / (Σ_s mask + 1e-10)), keys and values [S, d] shared by the heads, per-sequence gates
// (nn::GlobalAttention, checked against AF2's GlobalAttention and OpenFold's).
class MsaColumnGlobalAttention : public nn::Module {
 public:
  MsaColumnGlobalAttention(nn::Scope scope, int64_t c_m, const AttentionConfig& att);
  Variable forward(const Variable& m, const Tensor& msa_mask, int64_t chunk = 0,
                   const Tensor& into = Tensor()) const;  // → [S, N, c_m]
  // DAP: as MsaColumnAttention::forward_normalized.
  Variable forward_normalized(const Variable& x, const Tensor& msa_mask, int64_t chunk = 0) const;
  const nn::LayerNorm& query_norm() const { return query_norm_; }
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  Variable forward_impl(const Variable& m, const Tensor& msa_mask, int64_t chunk, const Tensor& into,
                        const nn::LayerNorm* norm) const;
  nn::LayerNorm query_norm_;
  nn::GlobalAttention attention_;
};

}  // namespace foldcore::af2
