// Invariant Point Attention (AF2 suppl. Alg. 22), AlphaFold's parameter names:
// structure_module/fold_iteration/invariant_point_attention/{q_scalar, kv_scalar, q_point_local,
// kv_point_local, attention_2d, output_projection, trainable_point_weights}.
//
// For residues i, j and head h (frames T_i = (R_i, t_i) in internal units, Å/10):
//   logit_hij = w_C·q_hi·k_hj − ½·γ_h·w_C·w_P·Σ_p ‖T_i∘qp_hip − T_j∘kp_hjp‖² + w_L·b_hij
//               − 1e5·(1 − m_i·m_j)
// with w_L = √(1/3), w_C = √(1/(3·c_qk)) on the scalar term, and for the point term
// √(1/(3·P_qk·9/2)) (AF2 folds w_C into point_weights), γ_h = softplus(trainable_point_weights_h),
// b = attention_2d(z). Outputs per i (concatenated in this order, then output_projection):
//   o_h   = Σ_j a_hij v_hj                              [H·c_v]
//   op_h  = T_i⁻¹ ∘ Σ_j a_hij (T_j ∘ vp_hjp)            x, y, z blocks of [H·P_v] each
//   ‖op‖  = sqrt(1e-8 + ‖op_hp‖²)                        [H·P_v]
//   õ_h   = Σ_j a_hij z_ij                               [H·c_z]
//
// Layouts (AlphaFold's, so official arrays load by reshape): kv_scalar's output is [H, c_qk + c_v]
// (k then v per head); q_point_local's is [3, H, P_qk] (x block, y block, z block);
// kv_point_local's is [3, H, P_qk + P_v].
//
// Differentiable (autograd ops + softplus/norm_last from structure_module_ops.h) in s, z, the
// frames and every parameter. The point-distance term is expanded as |q|² + |k|² − 2q·k so the
// logits are one batched GEMM (the |q_i|² term is kept so the logits equal AF2's exactly).
// Unbatched: s [N, c_s], z [N, N, c_z] (AF2 monomer).
#pragma once

#include <functional>

#include "models/alphafold/model/config.h"
#include "models/alphafold/params/param_table.h"
#include "nn/layers.h"

namespace foldcore::af2 {

using autograd::Variable;
class ParallelGroup;

// The query rows one no-grad block of invariant point attention takes at N residues: all N where
// the whole [N, N, max(H, c_z)] is at most 2^23 values (N <= 256 at c_z = 128: a training crop's
// recycling iterations, where blocks would only add launches), else blocks of about 2^22 values
// (long predictions: the [H, rows, N] logits and the block's pair rows stay bounded). The memory
// estimate (apps/memory_estimate.h) reads it too: whole rows hold about a pair of temporaries.
int64_t ipa_inference_row_block(int64_t n, const StructureModuleConfig& cfg);

class InvariantPointAttention : public nn::Module {
 public:
  InvariantPointAttention(nn::Scope scope, const StructureModuleConfig& cfg);

  // s [N, c_s], z [N, N, c_z], mask [N] (1 = residue present), rot [N, 3, 3], trans [N, 3]
  // → update [N, c_s] (before the residual add).
  Variable forward(const Variable& s, const Variable& z, const Tensor& mask, const Variable& rot,
                   const Variable& trans) const;
  // The same with the pair given by rows: z_rows(i0, len) → z[i0 : i0 + len] ([len, N, c_z]). In
  // no-grad mode the query rows run in blocks (about 4 M logits each) and each block asks for its
  // pair rows only, so a caller may compute them on demand (the structure module's LN(z), row
  // block by row block, instead of a whole normalised pair); in grad mode z_rows(0, N) once.
  // split (inference under DAP, pair_rows.h): this rank computes only its own query rows (z_rows
  // is asked for those only) and the group all-gathers the [N, F] features before the output
  // projection; every rank returns the whole update.
  Variable forward(const Variable& s, const std::function<Variable(int64_t, int64_t)>& z_rows, const Tensor& mask,
                   const Variable& rot, const Variable& trans, const ParallelGroup* split = nullptr) const;

  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  StructureModuleConfig cfg_;
  nn::Linear q_scalar_, kv_scalar_, q_point_local_, kv_point_local_, attention_2d_, output_projection_;
  Variable point_weights_;  // trainable_point_weights [H], pre-softplus
};

}  // namespace foldcore::af2
