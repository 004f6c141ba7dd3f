// Triangular gated self-attention (AlphaFold2 supplement §1.6.6):
//   starting node (Alg. 13, "triangle_attention_starting_node"): every row i of the pair attends
//     over k: o_ij = Σ_k softmax_k(q_ij·k_ik/√d + b_jk + mask bias_ik) v_ik, b = LN(z)·w (no bias);
//   ending node (Alg. 14, "triangle_attention_ending_node"): the same module on the TRANSPOSED pair
//     (z_ji, mask_ji) with the result transposed back — AlphaFold's per_column orientation.
// Configurable by dims (the template pair stack reuses it with c_t = 64, 4 heads × 16).
#pragma once

#include "models/alphafold/model/config.h"
#include "models/alphafold/evoformer/evoformer_util.h"

namespace foldcore::af2 {

class ParallelGroup;  // model_parallel.h

class TriangleAttention : public nn::Module {
 public:
  // starting: Alg. 13; else Alg. 14.
  TriangleAttention(nn::Scope scope, int64_t c_z, const AttentionConfig& att, bool starting);
  // z [N, N, c_z], pair_mask [N, N] → update [N, N, c_z] (before residual/dropout). chunk > 0: in
  // no-grad mode, chunks of rows (start) / columns (end). `into` (no-grad only; z's own stream or a
  // [N, N, c_z] tensor the caller owns): the update is added into it chunk by chunk (rows / columns,
  // run_chunked) and `into` is returned. Safe on z itself: the pair bias is computed whole before
  // the first write, and a row (column) chunk of the update reads only the same rows (columns) of z.
  // normed: LN(z) by input_norm() in the GEMMs' dtype, made by the caller (the preceding residual
  // add: stream_residual_norm), taken instead of normalising z; unchunked (or grad mode) only.
  Variable forward(const Variable& z, const Tensor& pair_mask, int64_t chunk = 0, const Tensor& into = Tensor(),
                   const Variable& normed = Variable()) const;
  const nn::LayerNorm& input_norm() const { return query_norm_; }
  // DAP (evoformer_parallel.cpp): z_rows [N/P, N, c_z] this rank's pair rows, pair_mask [N, N]
  // whole; the pair bias is gathered whole. The ending node works on the columns: its LayerNorm
  // runs on the rows and is switched there in the wire dtype, the update switched back (the block
  // adds it on the rows, its column-wise shared dropout mask [N, 1, c_z] cut to the rank's rows
  // with DropoutSpec::index_base). → the update's rows [N/P, N, c_z].
  Variable forward_dap(const Variable& z_rows, const Tensor& pair_mask, const ParallelGroup& g,
                       int64_t chunk = 0) const;
  // key_prefix e.g. "evoformer/evoformer_iteration/triangle_attention_starting_node".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;
  bool starting() const { return starting_; }

 private:
  bool starting_;
  nn::LayerNorm query_norm_;
  nn::Linear feat_2d_;
  nn::Attention attention_;
};

}  // namespace foldcore::af2
