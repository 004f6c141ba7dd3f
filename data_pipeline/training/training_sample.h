// One AlphaFold2 training sample from a TrainingChain (training_chain.h): the random transforms of
// AlphaFold's training input pipeline (suppl. 1.2; OpenFold's feature_pipeline in "train" mode),
// seeded by a SampleKey, then the processed model inputs of feature_processing.h and the labels of
// training_labels.h, padded to FIXED shapes so that a loader can fill the same host buffers for
// every sample.
//
// Steps, each drawing from its own Philox stream of the sample seed (below):
//   1. recycling count  num_recycles ~ Uniform{0..max_recycles} (AlphaFold's num_iter_recycling)
//   2. use_clamped_fape ~ Bernoulli(clamped_fape_probability)
//   3. crop: chains longer than crop_size are cropped to crop_size residues —
//        contiguous: start ~ Uniform{0..N-crop_size} (AlphaFold's random_crop_to_size);
//        spatial (spatial_crop, or with spatial_crop_probability): a centre residue drawn among
//        those with an observed CA, then the crop_size residues whose CA is nearest to it
//        (residues without CA last; ties by sequence position), kept in sequence order;
//   4. templates: k ~ Uniform{0..T} of the chain's T hits, a random permutation, the first
//      min(k, max_templates) (OpenFold's subsample_templates);
//   5. process_features (feature_processing.h) on the cropped chain for iterations 0..num_recycles:
//      per iteration (AlphaFold's ensembled transforms) MSA block deletion (suppl. 1.2.6:
//      num_blocks block starts ~ U{0..S-1}, each deleting 30 % of the rows; the query stays),
//      cluster sampling (max_msa_clusters centres, query first), BERT masking (MaskedMsaConfig,
//      15 %), nearest-neighbour cluster profiles, extra-MSA crop (max_extra_msa);
//   6. labels (training_labels.h) of the crop: computed on the crop plus each residue's
//      predecessor, so that they equal the crop of the full chain's labels (φ and pre-ω of a crop's
//      first residue use the residue before it).
// Deviations from AlphaFold, for speed (the chain is cropped before process_features, AlphaFold
// crops after it): the nearest-neighbour cluster assignment compares rows over the cropped columns
// only (AlphaFold: full-length rows), and template pre-ω/φ at a crop boundary are masked (no
// predecessor in the crop). Everything else is per column or per row and the same.
//
// Randomness: the sample seed is the Philox4x32-10 block of counter (epoch, sample_index) under
// key `seed` (64 of its 128 bits: distinct keys collide with probability 2^-64); steps 1-4 use offsets
// 2^32 + k of that seed, process_features its offsets 4r..4r+3. Equal keys and configs give
// byte-identical samples on every platform.
//
// Output (C = crop_size, S = max_msa_clusters, E = max_extra_msa, T = max_templates,
// R = max_recycles + 1; dtypes float32 unless marked i64; padding is zero with masks 0):
//   the processed layout of feature_processing.h, every axis padded to C/S/E/T/R:
//     aatype, residue_index [C,R] i64 (residue_index = positions in the full chain's seqres)
//     seq_length [R] i64 (the crop's true length), seq_mask [C,R]
//     template_* [T,C,...,R] (template_mask [T,R]; with use_templates only)
//     msa_mask, bert_mask [S,C,R], true_msa [S,C,R] i64, msa_row_mask [S,R], msa_feat [S,C,49,R]
//     extra_msa [E,C,R] i64, extra_msa_mask, extra_has_deletion, extra_deletion_value [E,C,R],
//     extra_msa_row_mask [E,R]
//     atom14_atom_exists [C,14,R], residx_atom14_to_atom37 [C,14,R] i64,
//     residx_atom37_to_atom14 [C,37,R] i64, atom37_atom_exists [C,37,R], target_feat [C,22,R],
//     use_clamped_fape [R]
//   Slices r > num_recycles of the recycling axis repeat slice num_recycles (the model runs
//   num_recycles + 1 iterations; the copies keep any slice a valid input).
//   num_recycles [1] i64
//   the labels of training_labels.h, padded to C rows: all_atom_positions [C,37,3],
//     all_atom_mask [C,37], atom14_gt_positions / atom14_alt_gt_positions [C,14,3],
//     atom14_gt_exists / atom14_alt_gt_exists / atom14_atom_is_ambiguous [C,14],
//     rigidgroups_gt_frames / rigidgroups_alt_gt_frames [C,8,4,4], rigidgroups_gt_exists /
//     rigidgroups_group_exists / rigidgroups_group_is_ambiguous [C,8], backbone_rigid_tensor
//     [C,4,4], backbone_rigid_mask [C], torsion_angles_sin_cos / alt_torsion_angles_sin_cos
//     [C,7,2], torsion_angles_mask [C,7], chi_angles_sin_cos [C,4,2], chi_mask [C,4],
//     pseudo_beta [C,3], pseudo_beta_mask [C], resolution [1], is_distillation [1]
// training_sample_layout() lists exactly these keys, in output order, with shapes and dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data_pipeline/features/feature_processing_msa.h"
#include "data_pipeline/features/features.h"
#include "data_pipeline/training/training_chain.h"

namespace foldcore::data {

struct TrainingSampleConfig {
  int64_t crop_size = 256;
  bool spatial_crop = false;              // always crop spatially
  double spatial_crop_probability = 0.0;  // otherwise: spatially with this probability
  int64_t max_msa_clusters = 128;
  int64_t max_extra_msa = 1024;
  int64_t max_templates = 4;
  bool use_templates = true;
  int max_recycles = 3;  // R = max_recycles + 1
  bool use_masked_msa = true;
  msa_tf::MaskedMsaConfig masked_msa;  // 15 % of positions; 10/10/10 % profile/same/uniform, rest mask token
  double clamped_fape_probability = 0.9;
  // MSA block deletion per recycling iteration (suppl. 1.2.6): 5 blocks of 30 % of the rows.
  bool block_delete_msa = true;
  msa_tf::BlockDeletionConfig block_deletion;

  // AlphaFold's initial training: crop 256, 128 clusters, 1024 extra rows.
  static TrainingSampleConfig initial();
  // Fine-tuning: crop 384, 512 clusters, 5120 extra rows.
  static TrainingSampleConfig finetune();
  // Throws foldcore::Error naming the first invalid field.
  void validate() const;
};

// One key of a training sample: name, fixed shape, float32 or int64.
struct TrainingFeatureSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool is_float = true;
};
// Every key make_training_sample writes for `config`, in output order.
std::vector<TrainingFeatureSpec> training_sample_layout(const TrainingSampleConfig& config);

// The sample of `chain` for `key` (see the header comment). Throws foldcore::Error on an invalid
// config or inconsistent chain sizes.
FeatureDict make_training_sample(const TrainingChain& chain, const TrainingSampleConfig& config, const SampleKey& key);

// The sample seed of `key` (exposed for tests and logs).
uint64_t sample_seed(const SampleKey& key);

}  // namespace foldcore::data
