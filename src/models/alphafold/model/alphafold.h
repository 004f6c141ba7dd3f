// The AlphaFold2 model (suppl. Alg. 2): the modules wired into one recycling iteration, and the
// recycling loop for inference.
//
// One iteration (AF2 AlphaFoldIteration): the trunk (alphafold_trunk.h), the structure module
// (Alg. 20) on its single and pair representations, and the heads (distogram, masked MSA, pLDDT,
// experimentally resolved, PAE/pTM) with the confidence numbers computed from their logits.
// Recycled into the next iteration: m[0] (m1), z and the final atom37 positions (x); zeros on
// the first iteration. Inference runs in no-grad mode, so every activation of an iteration dies
// with it except the recycled state and the outputs kept.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/model/alphafold_trunk.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/params/param_table.h"
#include "nn/layers.h"

namespace foldcore::af2 {

class StructureModule;
class Af2Heads;
struct StructureModuleOutputs;
struct HeadOutputs;

// One iteration's outputs with their graph handles (training): the structure module's per-layer
// outputs and the heads' logits as Variables, for the loss gradients to be fed back in.
struct Af2GraphOutputs {
  std::shared_ptr<const StructureModuleOutputs> structure;
  std::shared_ptr<const HeadOutputs> heads;
};

// Named output arrays (AF2 / reference outputs.npz names), CPU tensors.
using Af2Outputs = std::vector<std::pair<std::string, Tensor>>;

// What an inference (AlphaFold::predict) keeps in its outputs beyond the structure and the
// confidence numbers (pLDDT, PAE, pTM).
struct Af2PredictKeep {
  // recycle_m1 / recycle_z / recycle_x: without them each iteration's pair dies with the next
  // iteration instead of staying alive to the end (with R recycles the kept states and their
  // stacked copy are 2·(R + 1) pairs at the end; `foldcore predict` does not write them).
  bool recycle_states = true;
  // msa, pair and single: without them the last iteration's pair dies after the heads.
  bool representations = true;
  // distogram_logits, tm_logits and aligned_confidence_probs ([N, N, 64] each, on the host):
  // without them the PAE head's logits are streamed into PAE and pTM by blocks of rows and the
  // distogram head does not run (`foldcore predict --result_arrays summary`).
  bool pair_logits = true;
};

class AlphaFold : public nn::Module {
 public:
  AlphaFold(nn::Scope scope, const Af2Config& config);
  ~AlphaFold() override;

  const Af2Config& config() const { return config_; }
  // Changes the inference chunk (>= 0; 0 = none) of later predict calls; results are the same up
  // to float reassociation (test_af2_memory), only the memory differs.
  void set_chunk_size(int64_t chunk) {
    FC_CHECK(chunk >= 0, "AlphaFold::set_chunk_size: chunk must be >= 0, got ", chunk);
    config_.chunk_size = chunk;
    trunk_.set_chunk_size(chunk);
  }
  // The template embedding's passes (Af2Config::template_passes: 0 auto, 1, 2) of later calls.
  void set_template_passes(int64_t passes) {
    FC_CHECK(passes >= 0 && passes <= 2, "AlphaFold::set_template_passes: 0 (auto), 1 or 2, got ", passes);
    config_.template_passes = passes;
    trunk_.set_template_passes(passes);
  }

  // Training with recomputation: the last `blocks` (>= 0) Evoformer blocks keep their activations
  // (Af2Config::recompute_keep_blocks; what `auto` resolves to, training/keep_blocks.h).
  void set_recompute_keep_blocks(int64_t blocks) {
    trunk_.set_recompute_keep_blocks(blocks);
    config_.recompute_keep_blocks = blocks;
  }
  // The same for the extra-MSA stack (Af2Config::recompute_keep_extra_msa_blocks).
  void set_recompute_keep_extra_msa_blocks(int64_t blocks) {
    trunk_.set_recompute_keep_extra_msa_blocks(blocks);
    config_.recompute_keep_extra_msa_blocks = blocks;
  }
  // What one kept Evoformer block leaves allocated (EvoformerStack::max_kept_block_bytes).
  int64_t max_kept_block_bytes() const;
  // What one kept extra-MSA block leaves allocated.
  int64_t max_kept_extra_msa_block_bytes() const;

  // One recycling iteration on `batch` (on the model's device) with the previous iteration's
  // state (undefined tensors: the first iteration, zeros). Writes the state for the next
  // iteration into *next and returns the iteration's outputs. outputs = false: only *next (the
  // trunk and the structure module), no heads, no confidence, nothing copied to the host — what a
  // recycling iteration before the last needs (its outputs are discarded). next may be null when
  // outputs is true (nothing is handed on). representations = false leaves AlphaFold's
  // representations (msa, pair, single) out of the outputs, and the pair and MSA streams die after
  // the heads unless *next holds them: at long N the pair is the largest tensor left.
  // pair_logits as Af2PredictKeep's: the pair-sized heads always run by blocks of rows
  // (Af2Heads::pair_heads_by_rows), so the device never holds [N, N, 64] logits.
  // prev by value: a caller that moves its state in lets the previous pair die after the
  // embeddings instead of living through the whole iteration.
  Af2Outputs iteration(const Af2Batch& batch, Af2RecycleState prev, Af2RecycleState* next, bool outputs = true,
                       bool representations = true, bool pair_logits = true) const;

  // The same iteration keeping the graph handles of what the training losses read (run it with
  // grad mode on for a training step). `next`, when given, receives the detached recycled state.
  // heads false: the heads are skipped (their outputs are null), for a recycling iteration whose
  // only result is `next`.
  Af2GraphOutputs forward_graph(const Af2Batch& batch, const Af2RecycleState& prev, Af2RecycleState* next = nullptr,
                                bool heads = true) const;

  // Training forward over recycling as AlphaFold2 trains (suppl. 1.10): R = features.num_iterations()
  // (the sample's recycling extent); iterations 0..R−2 on the slices [..., r] run without a graph
  // (no-grad), their recycled m1/z/x are plain values (detached); iteration R−1 runs with the graph
  // (grad mode as the caller has it). Returns the last iteration's graph outputs.
  Af2GraphOutputs forward_train(const Af2Features& features, Device device) const;

  // Inference (no-grad, eval): iterations 0..num_recycles on the feature slices [..., r]; the
  // final iteration's outputs plus recycle_m1 / recycle_z / recycle_x [R, …] (each iteration's
  // handed-on state) and num_recycles. `on_iteration(r, num_recycles + 1)`, when given, runs before
  // iteration r (progress reports; an exception from it aborts the prediction, e.g. a cancel).
  // `keep` leaves out what the caller does not need (Af2PredictKeep; `foldcore predict` keeps
  // neither the recycled states nor the representations).
  Af2Outputs predict(const Af2Features& features, int64_t num_recycles, Device device,
                     const std::function<void(int64_t, int64_t)>& on_iteration = {},
                     const Af2PredictKeep& keep = {}) const;

  // Model parallelism (model_parallel.h): DAP over the Evoformer and extra-MSA stacks, BP-2 over
  // a Parallel Evoformer. Every rank of the groups runs the same calls (forward_*, predict) on the
  // same inputs and gets the same outputs; after a backward, reduce_model_parallel_grads(*this).
  // Default (or groups of one rank): one process.
  void set_model_parallel(const ModelParallel& mp);
  const ModelParallel& model_parallel() const { return mp_; }
  const EmbeddingsAndEvoformer& trunk() const { return trunk_; }

  // Every parameter under its official key (prefix "" → "evoformer/…", "structure_module/…").
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix = "") const;

 private:
  Af2Config config_;
  EmbeddingsAndEvoformer trunk_;
  std::unique_ptr<StructureModule> structure_module_;
  std::unique_ptr<Af2Heads> heads_;
  ModelParallel mp_;
};

}  // namespace foldcore::af2
