// Triangular multiplicative update (AlphaFold2 supplement Alg. 11 "outgoing" / Alg. 12 "incoming";
// official modules "triangle_multiplication_outgoing" / "_incoming", the unfused monomer layout):
//   x = LN(z) (layer_norm_input)
//   a = mask ⊙ sigmoid(x W_lg + b_lg) ⊙ (x W_lp + b_lp)        (left_gate, left_projection)
//   b = mask ⊙ sigmoid(x W_rg + b_rg) ⊙ (x W_rp + b_rp)        (right_gate, right_projection)
//   outgoing: t_ij = Σ_k a_ik b_jk      (AF2 einsum 'ikc,jkc->ijc')
//   incoming: t_ij = Σ_k a_kj b_ki      (AF2 einsum 'kjc,kic->ijc': note left ↔ j, right ↔ i)
//   out = sigmoid(x W_g + b_g) ⊙ (LN(t) W_o + b_o)            (gating_linear, center_layer_norm,
//                                                                output_projection)
// The contraction is one batched GEMM over the channels: [c, i, k] · [c, j, k]ᵀ → [c, i, j].
// Configurable by dims (the template pair stack reuses it with c_t = 64).
#pragma once

#include "models/alphafold/evoformer_util.h"

namespace foldcore::af2 {

class TriangleMultiplication : public nn::Module {
 public:
  TriangleMultiplication(nn::Scope scope, int64_t c_z, int64_t c_hidden, bool outgoing);
  // z [N, N, c_z], pair_mask [N, N] → update [N, N, c_z] (before residual/dropout).
  Variable forward(const Variable& z, const Tensor& pair_mask) const;
  // key_prefix e.g. "evoformer/evoformer_iteration/triangle_multiplication_outgoing".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;
  bool outgoing() const { return outgoing_; }

 private:
  bool outgoing_;
  nn::LayerNorm layer_norm_input_, center_layer_norm_;
  nn::Linear left_projection_, right_projection_, left_gate_, right_gate_, output_projection_, gating_linear_;
};

}  // namespace foldcore::af2
