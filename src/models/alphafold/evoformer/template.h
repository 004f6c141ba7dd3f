// AlphaFold2 template embedding for the monomer (suppl. 1.7.1): template pair features → per-template
// pair stack (Alg. 16) → pointwise attention from the pair (Alg. 17), and the template torsion-angle
// features that become extra MSA rows (Alg. 2 lines 7-8).
//
// Official keys (below key_prefix, normally "evoformer"):
//   template_embedding/single_template_embedding/{embedding2d, template_pair_stack/__layer_stack_no_state/
//     {triangle_attention_starting_node, triangle_attention_ending_node, triangle_multiplication_outgoing,
//      triangle_multiplication_incoming, pair_transition} (stacked per block), output_layer_norm}
//   template_embedding/attention (no gating)
//   template_single_embedding, template_projection
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kernels/af2_features.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/params/param_table.h"
#include "models/alphafold/evoformer/triangle_attention.h"
#include "models/alphafold/evoformer/triangle_multiplication.h"
#include "nn/attention.h"
#include "nn/transformer.h"

namespace foldcore::af2 {

// ---------------------------------------------------------------- features
// Channels of the template pair feature: dgram bins + 1 + 22 + 22 + 3 + 1 (88 for 39 bins).
int64_t template_pair_feat_dim(const TemplateConfig& config);

// One template's pair features [N, N, C] in AlphaFold's concatenation order:
//   dgram(pseudo_beta, 39 bins 3.25..50.75 Å)          [.., 39]
//   pseudo-β mask 2-D  pb_i·pb_j                          [.., 1]
//   one_hot(aatype, 22) of the column residue j          [.., 22]
//   one_hot(aatype, 22) of the row residue i             [.., 22]
//   unit vector x, y, z from residue i's backbone frame to CA_j (zeros unless
//     use_template_unit_vector; masked by the backbone mask)   [.., 3]
//   backbone mask 2-D bb_i·bb_j, bb = mask(N)·mask(CA)·mask(C)  [.., 1]
// and the whole feature multiplied by the backbone mask 2-D.
// aatype [N] (integer), pseudo_beta [N, 3], pseudo_beta_mask [N], all_atom_positions [N, 37, 3],
// all_atom_mask [N, 37]. f32 on pseudo_beta's device.
Tensor template_pair_feat(const Tensor& aatype, const Tensor& pseudo_beta, const Tensor& pseudo_beta_mask,
                          const Tensor& all_atom_positions, const Tensor& all_atom_mask, const TemplateConfig& config);
// The same features by row blocks (inference: no [N, N, 88] array): the per-residue inputs are
// checked and prepared once; rows(r0, len) is rows [r0, r0 + len) of template_pair_feat, bit for bit.
class TemplatePairFeatRows {
 public:
  TemplatePairFeatRows(const Tensor& aatype, const Tensor& pseudo_beta, const Tensor& pseudo_beta_mask,
                       const Tensor& all_atom_positions, const Tensor& all_atom_mask, const TemplateConfig& config);
  Tensor rows(int64_t r0, int64_t len) const;  // [len, N, C] f32 on pseudo_beta's device
  int64_t num_res() const { return n_; }

 private:
  ops::TemplatePairInputs in_;
  int64_t n_ = 0, c_ = 0;
};

// Template torsion-angle features [T, N, 57] = [one_hot(aatype, 22), sin/cos of the 7 torsions (14),
// alternative sin/cos (14), torsion mask (7)]. aatype [T, N], torsion_angles_sin_cos and
// alt_torsion_angles_sin_cos [T, N, 7, 2], torsion_angles_mask [T, N, 7].
Tensor template_angle_feat(const Tensor& aatype, const Tensor& torsion_angles_sin_cos,
                           const Tensor& alt_torsion_angles_sin_cos, const Tensor& torsion_angles_mask);
// The MSA mask of the template rows: the ψ-torsion mask, torsion_angles_mask[..., 2] → [T, N].
Tensor template_msa_mask(const Tensor& torsion_angles_mask);

// ---------------------------------------------------------------- modules
// One block of the template pair stack (Alg. 16), AlphaFold's order (differs from the Evoformer's):
//   t += RowDropout(TriangleAttentionStartingNode(t))     Alg. 13
//   t += ColumnDropout(TriangleAttentionEndingNode(t))    Alg. 14
//   t += RowDropout(TriangleMultiplicationOutgoing(t))    Alg. 11
//   t += RowDropout(TriangleMultiplicationIncoming(t))    Alg. 12
//   t += PairTransition(t)  (factor 2)                    Alg. 15
// t [N, N, c_t], pair_mask [N, N].
class TemplatePairBlock : public nn::Module {
 public:
  TemplatePairBlock(nn::Scope scope, const TemplateConfig& config);
  Variable forward(const Variable& t, const Tensor& pair_mask, int64_t chunk = 0) const;
  // DAP (parallel/template_parallel.cpp; EvoformerBlock::forward_dap's pair track in this block's
  // order): t_rows is this rank's rows [N'/P, N', c_t] of the pair padded to N' = a multiple of P
  // (pair_rows.h), pair_mask the padded [N', N'] mask; the ending node runs on the columns.
  // `own_input`: t_rows is the caller's to overwrite (no-grad only). Training too (the collectives'
  // backward passes are their duals).
  Variable forward_dap(Variable t_rows, const Tensor& pair_mask, const ParallelGroup& g, int64_t chunk,
                       bool own_input) const;
  // key_prefix ".../template_pair_stack/__layer_stack_no_state", stack_index = block index.
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  friend class SingleTemplateEmbedding;
  // `own_input`: t is the caller's to overwrite (no-grad only). Chunked inference with every
  // dropout off adds each update into t chunk by chunk (the Evoformer's forward_into path).
  Variable forward_impl(Variable t, const Tensor& pair_mask, int64_t chunk, bool own_input) const;
  TriangleAttention tri_att_start_, tri_att_end_;
  TriangleMultiplication tri_mul_out_, tri_mul_in_;
  nn::Transition pair_transition_;
  nn::Dropout tri_att_start_dropout_, tri_att_end_dropout_, tri_mul_out_dropout_, tri_mul_in_dropout_;
};

// AF2 SingleTemplateEmbedding: pair features [N, N, 88] → embedding2d → pair stack → output LN:
// [N, N, c_t].
class SingleTemplateEmbedding : public nn::Module {
 public:
  SingleTemplateEmbedding(nn::Scope scope, const TemplateConfig& config);
  Variable forward(const Variable& pair_feat, const Tensor& pair_mask, int64_t chunk = 0) const;
  // Inference: the same from features given by row blocks, feat_rows(r0, len) → [len, N, 88] (e.g.
  // TemplatePairFeatRows::rows), embedded one block of `chunk` rows at a time (all rows when
  // chunk <= 0): no [N, N, 88] array.
  Variable forward_rows(const std::function<Tensor(int64_t, int64_t)>& feat_rows, int64_t n, const Tensor& pair_mask,
                        int64_t chunk) const;
  // DAP: this rank's rows [N'/P, N', c_t] of the same (pair_rows.h's layout: zeros in the padding
  // before the stack), from feat_rows of its own residues only; the pair stack's blocks by
  // TemplatePairBlock::forward_dap. pair_mask is the unpadded [N, N] mask. Inference embeds by
  // blocks of `chunk` rows; training embeds the rank's rows at once, with autograd, and runs the
  // blocks in recomputation segments as forward() does.
  Variable forward_rows_dap(const std::function<Tensor(int64_t, int64_t)>& feat_rows, int64_t n,
                            const Tensor& pair_mask, const ParallelGroup& g, int64_t chunk) const;
  // key_prefix ".../template_embedding/single_template_embedding".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;
  // Training: pair blocks per recomputation segment (as EvoformerStack::set_recompute_blocks).
  void set_recompute_blocks(int64_t blocks);

 private:
  // The pair stack and the output LayerNorm on embedding2d's output t (this function's own).
  Variable stack(Variable t, const Tensor& pair_mask, int64_t chunk) const;
  // Training: t through every pair block, block(b, t) → its output, in recomputation segments of
  // recompute_blocks_ blocks (the dropout masks replayed; 0: no recomputation).
  Variable blocks_with_grad(Variable t,
                            const std::function<Variable(const TemplatePairBlock&, const Variable&)>& block) const;
  nn::Linear embedding2d_;
  std::vector<std::unique_ptr<TemplatePairBlock>> blocks_;
  int64_t recompute_blocks_ = 0;
  nn::LayerNorm output_layer_norm_;
};

// Alg. 17 (TemplatePointwiseAttention): each pair entry z_ij [c_z] attends over the templates'
// t_ij [T, c_t] (queries from the pair, keys/values from the templates, 4 heads × 16, no gating),
// template k masked by 1e9·(template_mask_k − 1). z [N, N, c_z], t [T, N, N, c_t] → [N, N, c_z];
// forward() takes any slab of the pair as well (z [R, C, c_z], t [T, R, C, c_t]: DAP's rows).
class TemplatePointwiseAttention : public nn::Module {
 public:
  TemplatePointwiseAttention(nn::Scope scope, int64_t c_z, const TemplateConfig& config);
  Variable forward(const Variable& z, const Variable& t, const Tensor& template_mask, int64_t chunk = 0) const;
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

  // Inference with one template at a time (no [T, N, N, c_t] stack). z and t_k may be any slab
  // [R, C, ·] of the pair (DAP: a rank's rows); the shapes below name the whole pair, R·C = N·N.
  // add() merges template t_k
  // [N, N, c_t] (with its mask value, > 0) into the running heads [N·N, 1, H, d] and their
  // log-sum-exp (ops::attention_combine), finish() adds the output projection of the merged heads
  // into `into` (z's stream, any rows; z is read only row by row before each row is written).
  // Templates with mask 0 need no add(): in forward() their weight exp(−1e9 − max) is exactly 0.
  // Equals forward() up to the merges' fp32 rounding (a few ulps per template).
  struct Running {
    Tensor heads, lse;
  };
  void add(const Variable& z, const Variable& t_k, float template_mask, int64_t chunk, Running& r) const;
  void finish(const Variable& z, const Running& r, int64_t chunk, const Tensor& into) const;

  // Inference in two passes over the templates (TemplatePasses::two), without running heads.
  // Pass 1, add_scores(): template t_k's score per (i, j, head), s = q·k/√d + 1e9·(mask − 1) (the
  // log-sum-exp of one key), into scores[:, :, slot] ([N·N, H, T'] fp32, one slot per unmasked
  // template); scores_to_weights(): the softmax over the T' slots, in place, by blocks of `block`
  // positions (0: all at once). Pass 2, add_weighted(): Wo·(w_k ⊙ v_k) for the recomputed t_k, plus the output bias when
  // `output_bias` (once, for the first template), added into `into` by row chunks. Pass 2 does
  // not read z, so `into` may be z's own storage; the gate would read it, hence
  // two_pass_supported() (AF2's pointwise attention has no gate). Equals forward() up to the
  // reassociation of Σ_k Wo·(w_k v_k) (a few ulps per template).
  bool two_pass_supported() const { return !attention_.options().gating; }
  void add_scores(const Variable& z, const Variable& t_k, float template_mask, int64_t chunk, const Tensor& scores,
                  int64_t slot) const;
  static void scores_to_weights(const Tensor& scores, int64_t block);
  void add_weighted(const Variable& t_k, const Tensor& weights, int64_t slot, bool output_bias, int64_t chunk,
                    const Tensor& into) const;

 private:
  // Inference over one present template t_k (mask > 0): f(s, len, part) for each block of `chunk`
  // pair rows [s, s + len), part = the heads and log-sum-exp of their len·N queries (one per
  // (i, j), from z) over t_k's single key. `caller` names the function in errors.
  void for_each_part(const char* caller, const Variable& z, const Variable& t_k, float template_mask, int64_t chunk,
                     const std::function<void(int64_t, int64_t, const autograd::AttentionPart&)>& f) const;
  nn::Attention attention_;
};

// The template inputs of one example (AF2 batch names without the "template_" prefix).
struct TemplateInputs {
  Tensor aatype;              // [T, N] integer
  Tensor all_atom_positions;  // [T, N, 37, 3]
  Tensor all_atom_mask;       // [T, N, 37]
  Tensor pseudo_beta;         // [T, N, 3]; undefined: computed from the atoms (pseudo_beta())
  Tensor pseudo_beta_mask;    // [T, N]; undefined: computed from the atom mask
  Tensor template_mask;       // [T]
};

// How TemplateEmbedder::add_into visits the templates (inference):
//   one: each unmasked template's pair stack runs once; the pointwise attention merges it into
//        running heads [N², H·d] and their log-sum-exp (TemplatePointwiseAttention::add), which
//        stay beside the pair stream while the next template's stack runs (0.5 fp32 pair units
//        at c_z 128, H·d 64);
//   two: each stack runs twice, first for the scores only [N², H, T'] (0.125 units for 4
//        templates), then for the values, whose weighted projection is added into the pair
//        (TemplatePointwiseAttention::add_scores/add_weighted): 0.375 units less at the template
//        stage's peak, for a second pass of the template stacks. With fewer than two unmasked
//        templates, or a gated pointwise attention, `two` runs as `one` (nothing to save, or the
//        gate would read the pair while it changes).
enum class TemplatePasses { one, two };

// AF2 TemplateEmbedding (monomer): every template through SingleTemplateEmbedding, then the
// pointwise attention; the result is multiplied by 1[Σ template_mask > 0] (zero, and no
// gradient, without templates). z [N, N, c_z], pair_mask [N, N] → the pair update [N, N, c_z].
class TemplateEmbedder : public nn::Module {
 public:
  TemplateEmbedder(nn::Scope scope, int64_t c_z, const TemplateConfig& config);
  Variable forward(const Variable& z, const TemplateInputs& templates, const Tensor& pair_mask,
                   int64_t chunk = 0) const;
  // Inference: adds forward()'s result into `into` (z's own stream, e.g. z's storage itself),
  // holding one template's activations at a time, in one or two passes over the templates
  // (TemplatePasses); nothing is added without an unmasked template. No autograd.
  void add_into(const Variable& z, const TemplateInputs& templates, const Tensor& pair_mask, int64_t chunk,
                const Tensor& into, TemplatePasses passes = TemplatePasses::one) const;
  // Inference under DAP (parallel/template_parallel.cpp): the same into z_rows itself, this rank's
  // rows [N'/P, N', c_z] of the pair split as pair_rows.h lays it out; each template's pair stack
  // runs split the same way (SingleTemplateEmbedding::forward_rows_dap), so no rank holds a whole
  // pair-sized tensor. pair_mask [N, N] unpadded. Equals add_into up to fp32 rounding.
  void add_into_split(const Tensor& z_rows, const TemplateInputs& templates, const Tensor& pair_mask, int64_t chunk,
                      const ParallelGroup& g, TemplatePasses passes = TemplatePasses::one) const;
  // DAP with the pair whole on every rank (training, and its recycling iterations without
  // gradients): z + forward(z, …), with each template's stack and the pointwise attention run on
  // this rank's rows only (as add_into_split; the rows scattered from z and the update gathered
  // whole, each collective's backward its dual). Every rank then holds 1/P of the template
  // activations, and the template parameters' gradients are this rank's part: their sum over the
  // group is reduce_model_parallel_grads's. Equals z + forward(z, …) up to fp32 rounding, with the
  // dropout masks one process draws (every template slot runs, as in forward()).
  Variable forward_dap(const Variable& z, const TemplateInputs& templates, const Tensor& pair_mask, int64_t chunk,
                       const ParallelGroup& g, TemplatePasses passes = TemplatePasses::one) const;
  // key_prefix "evoformer": registers "evoformer/template_embedding/...".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;
  const SingleTemplateEmbedding& single_template_embedding() const { return single_; }
  void set_recompute_blocks(int64_t blocks) { single_.set_recompute_blocks(blocks); }
  const TemplatePointwiseAttention& attention() const { return attention_; }

 private:
  // Template k's pair features (by row blocks) on `device`.
  TemplatePairFeatRows template_feat(const TemplateInputs& templates, int64_t k, Device device) const;
  // The templates add_into visits (mask > 0) after checking the inputs against z [R, C, c_z] of a
  // pair of n residues; `caller` names the function in errors.
  std::vector<int64_t> present_templates(const char* caller, const Variable& z, int64_t n,
                                         const TemplateInputs& templates, std::vector<float>& mask) const;
  // forward()'s and forward_dap's update with autograd: stack(k) gives template k's t over z's
  // cells ([R, C, c_t]) for every present slot (mask > 0, `mask` the template mask read on the
  // host; a masked one's weight is exactly 0, so its stack is skipped as in add_into); the
  // pointwise attention over those [T', R, C, c_t].
  Variable embed_present_slots(const Variable& z, const std::vector<float>& mask, int64_t chunk,
                               const std::function<Variable(int64_t)>& stack) const;
  // add_into's template loop: stack(k) gives template k's t over z's cells; the pointwise attention
  // adds into `into` in one or two passes.
  void add_templates(const Variable& z, const std::vector<int64_t>& present, const std::vector<float>& mask,
                     const std::function<Variable(int64_t)>& stack, int64_t chunk, const Tensor& into,
                     TemplatePasses passes) const;
  TemplateConfig cfg_;
  SingleTemplateEmbedding single_;
  TemplatePointwiseAttention attention_;
};

// Template torsion angles → extra MSA rows (Alg. 2 lines 7-8):
//   m_t = template_projection(relu(template_single_embedding(angle_feat)))
// angle_feat [T, N, 57] → [T, N, c_m]; concatenate below the MSA rows, with template_msa_mask().
class TemplateAngleEmbedder : public nn::Module {
 public:
  TemplateAngleEmbedder(nn::Scope scope, int64_t c_m);
  Variable forward(const Variable& angle_feat) const;
  // key_prefix "evoformer".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

 private:
  nn::Linear template_single_embedding_, template_projection_;
};

}  // namespace foldcore::af2
