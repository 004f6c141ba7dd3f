// AlphaFold2 monomer model configuration. Defaults are model_1_ptm at full size (AlphaFold2
// config.py, CONFIG + CONFIG_DIFFS). Every dimension is read from configs/model/<preset>.yaml
// (config_yaml.cpp), so small test configs run through the same code.
#pragma once

#include <cstdint>
#include <string>

namespace foldcore::af2 {

// One gated attention block: num_head heads of width head_dim (AF2: key_dim / num_head).
struct AttentionConfig {
  int64_t num_head = 8;
  int64_t head_dim = 32;
  bool gating = true;
  float dropout = 0.f;
};

struct EvoformerBlockConfig {
  int64_t c_m = 256;  // msa_channel (extra MSA stack: 64)
  int64_t c_z = 128;  // pair_channel
  AttentionConfig msa_row{8, 32, true, 0.15f};      // row attention with pair bias
  AttentionConfig msa_column{8, 32, true, 0.f};     // column attention (global in the extra stack)
  int64_t msa_transition_factor = 4;
  int64_t opm_channels = 32;                        // outer product mean c
  int64_t tri_mul_channels = 128;                   // triangle multiplication intermediate
  float tri_mul_dropout = 0.25f;
  AttentionConfig tri_att{4, 32, true, 0.25f};      // triangle attention start/end
  int64_t pair_transition_factor = 4;
  bool global_column_attention = false;             // true in the extra-MSA stack
  // HelixFold's Parallel Evoformer (outer_product_mean_position: end): the MSA branch and the pair
  // branch both read only the block's inputs, and the outer product mean of the updated MSA is
  // added to the pair at the block's end, so branch parallelism can run the two branches on two
  // devices. YAML key `parallel_evoformer` (main Evoformer stack only).
  bool parallel = false;
};

struct TemplateConfig {
  bool enabled = true;
  bool embed_torsion_angles = true;
  int64_t max_templates = 4;
  int64_t c_t = 64;
  int64_t num_pair_blocks = 2;
  AttentionConfig tri_att{4, 16, true, 0.25f};
  int64_t tri_mul_channels = 64;
  float tri_mul_dropout = 0.25f;
  int64_t pair_transition_factor = 2;
  AttentionConfig pointwise_att{4, 16, false, 0.f};  // template pointwise attention (key/value dim 64)
  float dgram_min_bin = 3.25f, dgram_max_bin = 50.75f;
  int64_t dgram_num_bins = 39;
  bool use_template_unit_vector = false;
};

struct StructureModuleConfig {
  int64_t c_s = 384;
  int64_t c_z = 128;
  int64_t num_layers = 8;          // shared weights
  int64_t num_head = 12;
  int64_t num_scalar_qk = 16, num_scalar_v = 16;
  int64_t num_point_qk = 4, num_point_v = 8;
  int64_t num_transition_layers = 3;
  float position_scale = 10.f;     // Å per internal unit
  int64_t sidechain_channels = 128;
  int64_t sidechain_residual_blocks = 2;
  float dropout = 0.1f;
  // AF2 training detaches the backbone rotation between layers (stop_gradient); off only for
  // checking the full chain rule against finite differences.
  bool stop_rotation_gradient = true;
};

struct HeadsConfig {
  int64_t distogram_bins = 64;
  float distogram_first_break = 2.3125f, distogram_last_break = 21.6875f;
  int64_t masked_msa_outputs = 23;
  int64_t lddt_bins = 50, lddt_channels = 128;
  bool ptm = true;                 // predicted aligned error + pTM head
  int64_t pae_bins = 64;
  float pae_max_error_bin = 31.f;
};

struct Af2Config {
  std::string preset = "model_1_ptm";
  int64_t target_feat_dim = 22;
  int64_t msa_feat_dim = 49;
  int64_t c_m = 256, c_z = 128, c_s = 384, c_e = 64;
  int64_t max_relative_feature = 32;
  float recycle_min_bin = 3.25f, recycle_max_bin = 20.75f;
  int64_t recycle_num_bins = 15;
  int64_t num_evoformer_blocks = 48;
  int64_t num_extra_msa_blocks = 4;
  EvoformerBlockConfig evoformer;  // c_m 256
  EvoformerBlockConfig extra_msa{64, 128, {8, 8, true, 0.15f}, {8, 8, true, 0.f}, 4, 32, 128, 0.25f, {4, 32, true, 0.25f}, 4, true};
  TemplateConfig templates;
  StructureModuleConfig structure;
  HeadsConfig heads;
  int64_t num_recycles = 3;
  int64_t max_msa_clusters = 512;
  int64_t max_extra_msa = 5120;
  bool reduce_msa_clusters_by_max_templates = true;
  int64_t chunk_size = 0;          // 0: no chunking
  // Inference: passes of the template embedding over the templates (TemplatePasses in
  // template.h): 1, 2 (each template's pair stack twice, without the pointwise attention's
  // running heads), or 0 = auto: 2 when chunk_size > 0 (the low-memory mode), else 1 (`predict`
  // decides auto per target from its preflight instead: choose_template_passes).
  int64_t template_passes = 0;
  std::string precision = "fp32";  // "fp32" or "bf16" (autocast GEMMs/attention; geometry stays fp32)
  // Training under bf16 autocast (`train --precision bf16`): the storage of the MSA and pair
  // residual streams. false: fp32 (each bf16 module update added into an fp32 stream; the
  // LayerNorms read fp32). true: bf16, as AlphaFold2's own bf16 mode keeps every Evoformer
  // activation (each residual add still sums in fp32 and rounds once): half the bytes of every
  // pass over a stream and of its gradient. The recycled state stays fp32 either way. Under DAP too
  // (its collectives move LayerNorm outputs, edges and updates, not the streams); no effect in
  // fp32, in inference (whose bf16 streams follow `precision`) or under branch parallelism (its
  // ranks exchange the branches' fp32 streams). true by default and in every preset (YAML
  // `bf16_training_streams`).
  bool bf16_training_streams = true;
  // Training only (grad mode): activation recomputation, this many consecutive blocks per
  // checkpoint segment in the Evoformer, extra-MSA and template pair stacks (autograd/recompute.h;
  // only each segment's inputs stay alive). 0: off. No effect in inference.
  int64_t recompute_blocks = 0;
  // Training with recomputation on: the last this many Evoformer blocks (not extra-MSA or
  // template ones) keep their activations instead, so the backward does not run their forward
  // again: less time, more memory (docs/training.md gives the memory per kept block). 0: all
  // recomputed; more than num_evoformer_blocks: none. kKeepBlocksAuto (YAML `auto`): as many as
  // the device's memory holds, measured by the first training step (training/keep_blocks.h).
  static constexpr int64_t kKeepBlocksAuto = -1;
  int64_t recompute_keep_blocks = 0;
  // The same for the extra-MSA stack's blocks (its last this many keep their activations). One
  // kept extra-MSA block holds about what an Evoformer block holds at crop 256 and saves more
  // time, so `auto` on both keeps the extra-MSA blocks first (training/keep_blocks.h).
  // kKeepBlocksAuto: decided with the others by the first steps.
  int64_t recompute_keep_extra_msa_blocks = 0;
};

// Throws foldcore::Error naming the first inconsistent or out-of-range field (positive
// dimensions, head counts; the per-module copies of c_m/c_z/c_s/c_e equal to the top-level ones;
// dropout rates in [0, 1); precision fp32|bf16). Implemented in alphafold_config.cpp.
void validate_af2_config(const Af2Config& config);

// The `tiny` preset of configs/model/tiny.yaml built in code (every module present, one block
// each, narrow channels), for builds without yaml-cpp (the portable GPU tests);
// tests/models/test_af2_model.cpp checks that it equals the YAML file.
Af2Config tiny_af2_config();

// Whether inference asks the template embedding for two passes (template_passes 2, or 0 with
// chunking). TemplateEmbedder::add_into still runs one with fewer than two unmasked templates or
// a gated pointwise attention.
bool template_two_passes_requested(const Af2Config& config);

}  // namespace foldcore::af2
