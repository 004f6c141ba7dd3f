// Evoformer block (AlphaFold2 supplement Alg. 6) and stacks of blocks: the main Evoformer stack
// (official "evoformer/evoformer_iteration", 48 blocks, c_m 256) and the extra-MSA stack
// ("evoformer/extra_msa_stack", 4 blocks, c_e 64, global column attention, Alg. 18).
//
// Block, in AlphaFold's order (each update is added to its residual, with AF2's shared dropout in
// training: row-wise = mask shared over axis −3, column-wise = over axis −2):
//   m += RowDropout(MsaRowAttentionWithPairBias(m, z))       Alg. 7
//   m += MsaColumnAttention(m)  | MsaColumnGlobalAttention(m) Alg. 8 | Alg. 19 (extra stack)
//   m += MsaTransition(m)                                     Alg. 9
//   z += OuterProductMean(m)                                  Alg. 10
//   z += RowDropout(TriangleMultiplicationOutgoing(z))        Alg. 11
//   z += RowDropout(TriangleMultiplicationIncoming(z))        Alg. 12
//   z += RowDropout(TriangleAttentionStartingNode(z))         Alg. 13
//   z += ColumnDropout(TriangleAttentionEndingNode(z))        Alg. 14
//   z += PairTransition(z)                                    Alg. 15
// Shapes: m [S, N, c_m], z [N, N, c_z], msa_mask [S, N], pair_mask [N, N]. The transitions ignore
// the masks, as in AlphaFold (OpenFold multiplies the MSA transition output by the mask; the
// reference fixtures follow AlphaFold).
// chunk (Af2Config::chunk_size; 0 = off): in no-grad mode, the attention modules, transitions and
// the outer product mean run in chunks along their long axis (rows / columns), with identical
// results; memory then scales with the chunk instead of the whole axis.
// In no-grad mode the residual adds are done in place where that is safe: every add after the first
// of each track, and inside a stack also the first ones from block 1 on (never on the caller's
// inputs). Chunked inference (no-grad, chunk > 0, no dropout) goes further: every module adds its
// update into the stream chunk by chunk as the chunk is computed (the modules' `into`), so no
// stream-sized update ever exists: the pair track holds z plus the triangle multiplication's t
// (triangle_multiplication.h) plus chunk-sized temporaries. Each chunk reads only what no earlier
// chunk of the same update wrote (see each module's `into`). The streams keep their dtype (bf16
// streams stay bf16: the fp32 sum is rounded once per update).
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "models/alphafold/parallel/model_parallel.h"
#include "models/alphafold/evoformer/msa_attention.h"
#include "models/alphafold/evoformer/outer_product_mean.h"
#include "models/alphafold/evoformer/triangle_attention.h"
#include "models/alphafold/evoformer/triangle_multiplication.h"

namespace foldcore::af2 {

class EvoformerBlock : public nn::Module {
 public:
  EvoformerBlock(nn::Scope scope, const EvoformerBlockConfig& config);
  // → (m', z'), same shapes as (m, z).
  std::pair<Variable, Variable> forward(const Variable& m, const Variable& z, const Tensor& msa_mask,
                                        const Tensor& pair_mask, int64_t chunk = 0) const;
  // key_prefix: "evoformer/evoformer_iteration" or "evoformer/extra_msa_stack"; stack_index: this
  // block's index into the stacked official arrays.
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index = -1) const;

  const EvoformerBlockConfig& config() const { return cfg_; }
  const MsaRowAttentionWithPairBias& msa_row_attention() const { return row_att_; }
  const MsaColumnAttention* msa_column_attention() const { return col_att_.get(); }                // main stack
  const MsaColumnGlobalAttention* msa_column_global_attention() const { return col_glob_.get(); }  // extra stack
  // The column update of either kind: [S, N, c_m]; `into` as run_chunked's (added into m's stream).
  Variable msa_column_update(const Variable& m, const Tensor& msa_mask, int64_t chunk = 0,
                             const Tensor& into = Tensor()) const;
  // DAP (evoformer_parallel.cpp): this rank's MSA rows m_rows [S/P, N, c_m] (msa_mask [S, N]
  // whole, padded) plus (dropout of) their column update: the LayerNorm on the rows, switched to
  // the columns in the wire dtype, the attention there, its update switched back and added on the
  // rows. Inference with chunk > 0 (and no dropout): by pieces of `chunk` of the rank's columns,
  // each switched there and its update back into m_rows (written in place when it owns them), so
  // no whole LN(m) or update exists beside m.
  Variable msa_column_residual_dap(Variable m_rows, const Tensor& msa_mask, const ParallelGroup& g,
                                   int64_t chunk) const;
  const nn::Transition& msa_transition() const { return msa_transition_; }
  const OuterProductMean& outer_product_mean() const { return opm_; }
  const TriangleMultiplication& triangle_multiplication_outgoing() const { return tri_mul_out_; }
  const TriangleMultiplication& triangle_multiplication_incoming() const { return tri_mul_in_; }
  const TriangleAttention& triangle_attention_starting_node() const { return tri_att_start_; }
  const TriangleAttention& triangle_attention_ending_node() const { return tri_att_end_; }
  const nn::Transition& pair_transition() const { return pair_transition_; }

 private:
  friend class EvoformerStack;
  // own_inputs: m and z belong to the caller's temporaries only (a stack's intermediates), so even
  // the first residual add of each track may reuse their storage in no-grad mode. By value: each
  // residual add replaces the block's only handle of its stream, so the storage keeps one owner
  // and every later add can be in place too (a second handle would make autograd refuse).
  std::pair<Variable, Variable> forward_impl(Variable m, Variable z, const Tensor& msa_mask, const Tensor& pair_mask,
                                             int64_t chunk, bool own_inputs) const;
  // Chunked inference with the residual adds in the chunks' epilogues (see the file comment); the
  // streams are updated in place (copied first unless own_inputs and their only holder).
  std::pair<Variable, Variable> forward_into(Variable m, Variable z, const Tensor& msa_mask, const Tensor& pair_mask,
                                             int64_t chunk, bool own_inputs) const;
  bool dropout_is_identity() const;  // every dropout of the block is off (eval, or rate 0)
  // DAP (evoformer_parallel.cpp): m_rows [S/P, N, c_m], z_rows [N/P, N, c_z] (this rank's rows),
  // masks whole (sizes divisible by P) → the block's outputs, split the same way. `own_inputs` as
  // forward_impl's (false: a recompute segment's saved inputs, never added into in place).
  std::pair<Variable, Variable> forward_dap(Variable m_rows, Variable z_rows, const Tensor& msa_mask,
                                            const Tensor& pair_mask, const ParallelGroup& g, int64_t chunk,
                                            bool own_inputs = true) const;
  // BP-2 (Parallel Evoformer only): rank 0 computes the MSA branch and the outer product mean,
  // rank 1 the pair branch, both from the block's (replicated) inputs; the results are exchanged
  // at the end. `last`: the outputs feed computation every rank repeats (their gradients are
  // whole on each rank), not another branch-parallel block.
  // The pair branch's parameters (triangle updates and attentions, pair transition); the rest of
  // the block's are the MSA branch's (forward_bp).
  std::vector<Variable> pair_branch_parameters() const;
  std::pair<Variable, Variable> forward_bp(const Variable& m, const Variable& z, const Tensor& msa_mask,
                                           const Tensor& pair_mask, const ParallelGroup& g, int64_t chunk,
                                           bool last) const;

  EvoformerBlockConfig cfg_;
  MsaRowAttentionWithPairBias row_att_;
  std::unique_ptr<MsaColumnAttention> col_att_;
  std::unique_ptr<MsaColumnGlobalAttention> col_glob_;
  nn::Transition msa_transition_;
  OuterProductMean opm_;
  TriangleMultiplication tri_mul_out_, tri_mul_in_;
  TriangleAttention tri_att_start_, tri_att_end_;
  nn::Transition pair_transition_;
  nn::Dropout row_att_dropout_, col_att_dropout_, tri_mul_out_dropout_, tri_mul_in_dropout_, tri_att_start_dropout_,
      tri_att_end_dropout_;
};

// num_blocks blocks "block_<i>", applied in order; block i binds index i of the stacked arrays.
class EvoformerStack : public nn::Module {
 public:
  EvoformerStack(nn::Scope scope, const EvoformerBlockConfig& config, int64_t num_blocks);
  // m and z by value: a caller that moves its streams in lets block 0 update them in place in
  // no-grad mode (one pair and one MSA fewer at the peak); a caller that keeps a copy keeps it
  // unchanged (the in-place adds skip storage with more than one owner).
  std::pair<Variable, Variable> forward(Variable m, Variable z, const Tensor& msa_mask, const Tensor& pair_mask,
                                        int64_t chunk = 0) const;
  // key_prefix: "evoformer/evoformer_iteration" (main) or "evoformer/extra_msa_stack" (extra).
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix) const;
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  const EvoformerBlock& block(int64_t i) const { return *blocks_.at(static_cast<size_t>(i)); }
  // Training (grad mode): every `blocks` consecutive blocks form one recomputation segment
  // (autograd::recompute, dropout replayed from the scope's generator): only the segment inputs
  // stay alive for backward, the segment runs without a graph (and with in-place residual adds)
  // in the forward and again with one in the backward. 0: off (Af2Config::recompute_blocks).
  // The same under DAP, BP and both: a segment's collectives run again in its backward.
  void set_recompute_blocks(int64_t blocks);
  // With recomputation on: the last `blocks` blocks run outside any segment and keep their
  // activations for the backward (no second forward; more memory). More than the stack has: all
  // of them. 0: every block recomputed (Af2Config::recompute_keep_blocks).
  void set_recompute_keep_blocks(int64_t blocks);
  int64_t recompute_keep_blocks() const { return recompute_keep_blocks_; }
  // The most allocator bytes one block has left allocated (its activations kept for the backward
  // and its output streams) when it ran in grad mode outside a recomputation segment, over every
  // forward so far; 0 until one has. What keeping one more block costs (recompute_keep_blocks: auto).
  int64_t max_kept_block_bytes() const { return max_kept_block_bytes_; }

  // Model parallelism (model_parallel.h; evoformer_parallel.cpp). DAP > 1: forward splits m along
  // its rows and z along its rows over the group (padding S and N with masked rows/residues up to
  // a multiple of the group size; the padding is cut off again at the end), runs every block
  // split, and gathers the outputs whole on every rank. BP 2 (Parallel Evoformer stacks only;
  // other stacks ignore it and run whole on every rank): each block's two branches on the two
  // ranks. Both (DAP P × BP 2, Parallel Evoformer stacks): each BP rank runs its branch of every
  // block split over its DAP group as DAP does, and the BP partners exchange their chunks at each
  // block's end; other stacks run DAP only (the same on both BP partners). Inactive: the
  // single-process path.
  void set_model_parallel(const ModelParallel& mp) { mp_ = mp; }
  // Inference under DAP with the MSA and the pair kept split (pair_rows.h): m_rows is this rank's
  // rows [S'/P, N', c] of the MSA padded with zeros to S' and N' (multiples of P; PairRows's
  // arithmetic on S and N), z_rows its rows [N'/P, N', c_z] of the padded pair, and so are the
  // returned (m, z): no rank embeds, holds or gathers either whole (the extra-MSA stack's caller
  // drops its MSA; the Evoformer's hands its rows to the heads).
  std::pair<Variable, Variable> forward_split(Variable m_rows, Variable z_rows, const Tensor& msa_mask,
                                              const Tensor& pair_mask, int64_t chunk = 0) const;
  const ModelParallel& model_parallel() const { return mp_; }
  // BP 2 on a Parallel Evoformer stack: the branches run on two ranks.
  bool branch_parallel() const;
  // Under branch_parallel(): the parameters of the branch this rank does not run (every block's
  // pair-branch modules on BP rank 0, its MSA branch and outer product mean on rank 1). Their
  // gradients stay zero here, so they are final from the start of a backward (the
  // model-parallel gradient sums use this). Empty otherwise.
  std::vector<Variable> other_branch_parameters() const;

 private:
  // split: m and z come in and go out as this rank's rows of the padded tensors (forward_split);
  // else whole (training: scattered at the entry, gathered at the exit).
  std::pair<Variable, Variable> forward_dap(Variable m, Variable z, const Tensor& msa_mask, const Tensor& pair_mask,
                                            int64_t chunk, bool split) const;
  std::pair<Variable, Variable> forward_bp(Variable m, Variable z, const Tensor& msa_mask, const Tensor& pair_mask,
                                           int64_t chunk) const;
  // DAP × BP-2: block b's branch of this BP rank on this DAP rank's rows (forward_dap's layout);
  // the BP partners exchange their results' chunks at the end (`last` as in forward_bp).
  std::pair<Variable, Variable> forward_block_dap_bp(const EvoformerBlock& b, Variable m, Variable z,
                                                     const Tensor& msa_mask, const Tensor& pair_mask, int64_t chunk,
                                                     bool last) const;

  // Block b applied to (m, z); own_inputs as EvoformerBlock::forward_impl's.
  using BlockFn = std::function<std::pair<Variable, Variable>(size_t b, Variable m, Variable z, bool own_inputs)>;
  // Every block through `one`, in order: in recomputation segments of recompute_blocks_ blocks in
  // grad mode (`one` is kept for the backward: it must hold its masks by value), else directly.
  std::pair<Variable, Variable> run_blocks(Variable m, Variable z, const BlockFn& one) const;

  ModelParallel mp_;
  std::vector<std::unique_ptr<EvoformerBlock>> blocks_;
  int64_t recompute_blocks_ = 0;
  int64_t recompute_keep_blocks_ = 0;
  mutable int64_t max_kept_block_bytes_ = 0;
};

}  // namespace foldcore::af2
