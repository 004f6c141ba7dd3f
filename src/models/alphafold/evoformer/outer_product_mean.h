// Outer product mean (AlphaFold2 supplement Alg. 10, official module "outer_product_mean"): the
// MSA → pair communication.
//   x = LN(m) (layer_norm_input);  a = mask·(x W_l + b_l),  b = mask·(x W_r + b_r)   [S, N, c]
//   o_ij = (flatten_{c,e}(Σ_s a_sic b_sje) · W_o + b_o) / (1e-3 + Σ_s mask_si mask_sj)   [N, N, c_z]
// (the output bias is added BEFORE the division, as in AlphaFold and OpenFold). W_o is AF2's
// output_w [c, c, c_z] viewed as [c·c, c_z] (row index c·C + e, left channel major).
// The contraction over s is one strided-batch GEMM (per i), the projection another
// (autograd::outer_product_project).
#pragma once

#include "models/alphafold/evoformer/evoformer_util.h"

namespace foldcore::af2 {

class ParallelGroup;  // model_parallel.h

class OuterProductMean : public nn::Module {
 public:
  OuterProductMean(nn::Scope scope, int64_t c_m, int64_t c_hidden, int64_t c_z);
  // m [S, N, c_m], msa_mask [S, N] → update [N, N, c_z]. chunk > 0 (no-grad): rows i in chunks.
  // `into` (no-grad only; the pair stream [N, N, c_z]): the update is added into it row chunk by
  // row chunk (run_chunked) and `into` is returned.
  // normed: LN(m) by input_norm() in the GEMMs' dtype, made by the caller (the preceding residual
  // add: stream_residual_norm), taken instead of normalising m where the projections are made whole
  // (grad mode or unchunked).
  Variable forward(const Variable& m, const Tensor& msa_mask, int64_t chunk = 0, const Tensor& into = Tensor(),
                   const Variable& normed = Variable()) const;
  const nn::LayerNorm& input_norm() const { return layer_norm_input_; }
  // DAP (evoformer_parallel.cpp): m_rows [S/P, N, c_m] this rank's MSA rows, msa_mask [S, N]
  // whole. The projections are made on the rows; the left one switched to this rank's columns and
  // the right one gathered whole (both in the wire dtype: bf16 products times a 0/1 mask) → the
  // update's pair rows [N/P, N, c_z], computed by chunks of `chunk` rows when chunk > 0 (the outer
  // products of one chunk at a time). Chunked inference gathers no right projection: it is switched
  // to the columns too and its pieces of `chunk` columns are broadcast in turn (pair_rows.h's
  // for_each_ring_piece), each making its columns of the update.
  Variable forward_dap(const Variable& m_rows, const Tensor& msa_mask, const ParallelGroup& g,
                       int64_t chunk = 0) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  // a = mask·left(LN(m)), b = mask·right(LN(m)) [S, K, c] for m [S, K, c_m], mask [S, K] (f32).
  // Chunked inference: by chunks of MSA rows, so no whole LN(m) (MSA-sized) exists beside m.
  std::pair<Variable, Variable> projections(const Variable& m, const Tensor& mask, int64_t chunk,
                                            const Variable& normed = Variable()) const;
  // 1 / (1e-3 + Σ_s rows_mask_si mask_sj) [K, N] for rows_mask [S, K] and mask [S, N] (f32).
  static Tensor inverse_norm(const Tensor& rows_mask, const Tensor& mask);
  // output(Σ_s a[s, i] ⊗ b[s, j]) [I, J, c_z] for a [S, I, c] and b [S, J, c], before the
  // normalisation: autograd::outer_product_project (the outer products [I, J, e, c] and the output
  // projection in one op; neither they nor their gradient are transposed).
  Variable project_outer(const Variable& a, const Variable& b) const;
  nn::LayerNorm layer_norm_input_;
  nn::Linear left_, right_, output_;
};

}  // namespace foldcore::af2
