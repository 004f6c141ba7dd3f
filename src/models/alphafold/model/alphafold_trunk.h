// AlphaFold2's EmbeddingsAndEvoformer (suppl. Alg. 2 lines 1-12): everything of one recycling
// iteration before the structure module. Shapes: S MSA rows, E extra rows, T templates, N residues.
//   m [S, N, c_m], z [N, N, c_z] = InputEmbedder(target_feat, msa_feat, residue_index)   Alg. 3, 4
//   z += prev_pos_linear(dgram(pseudo_β(prev x))) + LN(prev z);  m[0] += LN(prev m1)   Alg. 32
//   z += TemplateEmbedder(z, templates, pair mask)                          Alg. 16, 17
//   e = ExtraMsaEmbedder(extra features); (e, z) = ExtraMsaStack(e, z)       1.7.2, Alg. 18
//   m = concat(m, TemplateAngleEmbedder(angle features)) over rows (mask: ψ torsion mask)  Alg. 2 l. 7-8
//   (m, z) = EvoformerStack(m, z)                                            Alg. 6
//   s = single_activations(m[0])                                            Alg. 2 line 12
#pragma once

#include <memory>
#include <string>

#include "models/alphafold/model/config.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/parallel/model_parallel.h"
#include "models/alphafold/params/param_table.h"
#include "nn/layers.h"

namespace foldcore::af2 {

class InputEmbedder;
class RecyclingEmbedder;
class ExtraMsaEmbedder;
class TemplateEmbedder;
class TemplateAngleEmbedder;
class EvoformerStack;

// What one iteration hands to the next (AF2's prev_msa_first_row, prev_pair, prev_pos).
struct Af2RecycleState {
  Tensor m1;  // [N, c_m]
  Tensor z;   // [N, N, c_z]; z_split: this rank's rows of the padded pair (pair_rows.h)
  Tensor x;   // [N, 37, 3] final atom positions (Å)
  bool z_split = false;
};

struct TrunkOutput {
  nn::Variable msa;     // [S, N, c_m] (without the template rows); with pair_split this rank's rows of the
                        // padded MSA of msa_rows rows (pair_rows.h; the template rows included)
  nn::Variable pair;    // [N, N, c_z]; with pair_split this rank's rows of the padded pair (pair_rows.h)
  nn::Variable single;  // [N, c_s]
  nn::Variable m1;      // [N, c_m] the first MSA row (recycled)
  const ParallelGroup* pair_split = nullptr;  // forward's split_pair: the DAP group (the pair and MSA split)
  int64_t msa_rows = 0;                       // the MSA's rows: S clusters + T template rows
};

class EmbeddingsAndEvoformer : public nn::Module {
 public:
  EmbeddingsAndEvoformer(nn::Scope scope, const Af2Config& config);
  ~EmbeddingsAndEvoformer() override;
  // batch on the model's device; prev: undefined tensors on the first iteration (zeros).
  // stream_dtype: the storage of the residual streams (MSA, extra MSA, pair) from the embeddings to
  // the outputs. bf16 (inference under bf16 autocast, no grad: `predict --precision bf16`) halves
  // the model's pair-sized memory; every op still accumulates in fp32 and each residual add rounds
  // its fp32 sum once to bf16 (evoformer_util.h, add_into). The outputs' msa, pair and m1 are then
  // bf16. In training (grad mode) bf16 with Af2Config::bf16_training_streams (the graph's MSA and
  // pair streams in bf16, as AlphaFold2's bf16), else f32 (the graph keeps fp32 MSA and pair
  // streams under autocast); the extra-MSA stream keeps its embedder's dtype there, bf16 under
  // bf16 autocast. Inference under model parallelism keeps f32 streams (the split pair's
  // collectives exchange fp32 rows), training under branch parallelism too (stream_dtype).
  // prev by value: the recycled state is released once the embeddings have read it (a caller
  // that moves its state in frees the previous pair before the stacks run).
  // split_pair (inference under DAP, fp32 streams): the pair is made, kept and returned as this
  // rank's rows of the padded pair (pair_rows.h; TrunkOutput::pair_split), from this rank's rows
  // of the embedding and of a split recycled pair; the template stacks run split by rows too. No
  // rank then holds the whole pair. Without split_pair under DAP (training), the pair is whole on
  // every rank between the stacks, and the templates run on each rank's rows
  // (TemplateEmbedder::forward_dap).
  TrunkOutput forward(const Af2Batch& batch, Af2RecycleState prev, DType stream_dtype = DType::f32,
                      bool split_pair = false) const;
  // The stream dtype of a forward now, on the single-process path under bf16 autocast: bf16 in
  // inference (no grad), and in training (every iteration of a training step, its recycling ones
  // without gradients included) with the config's bf16_training_streams; else f32.
  DType stream_dtype(bool training) const;
  // key_prefix "" → "evoformer/…".
  void add_af2_params(Af2ParamTable& table, const std::string& key_prefix = "") const;
  // Model parallelism of the Evoformer and extra-MSA stacks (model_parallel.h), and DAP of the
  // template embedding (TemplateEmbedder::forward_dap / add_into_split).
  void set_model_parallel(const ModelParallel& mp);
  // The stacks split by model parallelism: extra MSA, then the main Evoformer.
  std::vector<const EvoformerStack*> stacks() const;
  // The template embedding (null without templates.enabled): split by DAP, not by BP.
  const TemplateEmbedder* template_embedder() const { return template_embedder_.get(); }
  // Inference chunk (Af2Config::chunk_size) for later forward calls: `predict --chunk_size auto`
  // picks it per target from the memory estimate.
  void set_chunk_size(int64_t chunk) { config_.chunk_size = chunk; }
  void set_template_passes(int64_t passes) { config_.template_passes = passes; }
  // Training: the main Evoformer stack's kept blocks (EvoformerStack::set_recompute_keep_blocks).
  void set_recompute_keep_blocks(int64_t blocks);
  void set_recompute_keep_extra_msa_blocks(int64_t blocks);

 private:
  Af2Config config_;
  std::unique_ptr<InputEmbedder> input_embedder_;
  std::unique_ptr<RecyclingEmbedder> recycling_embedder_;
  std::unique_ptr<TemplateEmbedder> template_embedder_;              // templates.enabled
  std::unique_ptr<TemplateAngleEmbedder> template_angle_embedder_;  // templates.embed_torsion_angles
  std::unique_ptr<ExtraMsaEmbedder> extra_msa_embedder_;
  std::unique_ptr<EvoformerStack> extra_msa_stack_;
  std::unique_ptr<EvoformerStack> evoformer_;
  std::unique_ptr<nn::Linear> single_activations_;
};

// mask_2d[i, j] = seq_mask[i] · seq_mask[j]: [N] → [N, N] f32 on seq_mask's device.
Tensor pair_mask_from_seq_mask(const Tensor& seq_mask);

}  // namespace foldcore::af2
