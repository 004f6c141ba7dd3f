// AlphaFold2's monomer inference feature processing (alphafold/model/features.py,
// tf/input_pipeline.py, tf/data_transforms.py; OpenFold's feature_pipeline.py/input_pipeline.py
// compute the same): the raw feature dict of features.h → the processed model inputs that
// `foldcore run_features` consumes, in the layout of ../shared/af2/ref/features.npz:
//
//   key                                   shape              dtype
//   aatype, residue_index                 [N,R]              int64
//   seq_length                            [R]                int64
//   template_aatype                       [T,N,R]            int64   AlphaFold restype order (21 = gap)
//   template_all_atom_positions           [T,N,37,3,R]       float32
//   template_sum_probs                    [T,1,R]            float32
//   template_all_atom_mask                [T,N,37,R]         float32
//   seq_mask                              [N,R]              float32
//   msa_mask                              [S,N,R]            float32
//   msa_row_mask                          [S,R]              float32
//   template_mask                         [T,R]              float32
//   template_pseudo_beta                  [T,N,3,R]          float32
//   template_pseudo_beta_mask             [T,N,R]            float32
//   template_torsion_angles_sin_cos       [T,N,7,2,R]        float32
//   template_alt_torsion_angles_sin_cos   [T,N,7,2,R]        float32
//   template_torsion_angles_mask          [T,N,7,R]          float32
//   atom14_atom_exists                    [N,14,R]           float32
//   residx_atom14_to_atom37               [N,14,R]           int64
//   residx_atom37_to_atom14               [N,37,R]           int64
//   atom37_atom_exists                    [N,37,R]           float32
//   extra_msa                             [E,N,R]            int64
//   extra_msa_mask                        [E,N,R]            float32
//   extra_msa_row_mask                    [E,R]              float32
//   bert_mask                             [S,N,R]            float32
//   true_msa                              [S,N,R]            int64
//   extra_has_deletion, extra_deletion_value [E,N,R]         float32
//   msa_feat                              [S,N,49,R]         float32
//   target_feat                           [N,22,R]           float32
//   use_clamped_fape                      [R]                float32
//
// The recycling axis R = num_recycles + 1 is LAST: slice [..., r] feeds iteration r. The
// non-ensembled features (sequence, templates, atom maps) are the same in every slice; the MSA
// features are re-drawn per iteration (AlphaFold's ensembled transforms with a fresh seed each).
//
// Per iteration r, in AlphaFold's order: sample_msa (query first, the rest shuffled) →
// make_masked_msa (BERT) → nearest_neighbor_clusters + summarize_clusters (over ALL unsampled rows)
// → crop_extra_msa → make_msa_feat; then crop_templates. Once: correct_msa_restypes (HHblits →
// AlphaFold order), squeeze/cast, make_seq_mask, make_msa_mask, make_hhblits_profile,
// fix_templates_aatype, make_template_mask, make_pseudo_beta('template_'),
// atom37_to_torsion_angles('template_'), make_atom14_masks.
//
// Randomness: Philox4x32-10 (core/philox.h) streams keyed by `seed`; iteration r's sample_msa,
// make_masked_msa, crop_extra_msa and (training) block_delete_msa draw from stream offsets 4r, 4r+1,
// 4r+2, 4r+3. Same seed and input →
// identical output on every platform.
//
// Padding: AlphaFold pads to fixed sizes at inference; here no padding is added, except where an
// axis would be empty: no templates → one fully masked template (template_mask 0, all zero, as
// AlphaFold's padding gives), no extra MSA rows → one fully masked extra row (mask 0). Masked rows
// and templates do not change the model's output.
// With FeatureProcessingConfig::padding every axis is padded to a fixed size instead (training).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data_pipeline/features/feature_processing_msa.h"
#include "data_pipeline/features/features.h"

namespace foldcore::data {

struct FeatureProcessingConfig {
  int64_t max_msa_clusters = 512;
  int64_t max_extra_msa = 5120;
  int64_t max_templates = 4;
  // Use template features (AlphaFold models 1 and 2). Without, no template_* keys are written.
  bool use_templates = true;
  // Clusters = max_msa_clusters - max_templates (AlphaFold: the template rows share the MSA stack).
  bool reduce_msa_clusters_by_max_templates = true;
  int num_recycles = 3;  // R = num_recycles + 1 slices
  bool use_masked_msa = true;
  msa_tf::MaskedMsaConfig masked_msa;  // profile 0.1, same 0.1, uniform 0.1, replace 0.15
  // MSA block deletion per iteration before sampling (training; AlphaFold's ensembled transforms).
  bool block_delete_msa = false;
  msa_tf::BlockDeletionConfig block_deletion;
  uint64_t seed = 0;
  // Single-sequence mode: the MSA is reduced to the query row, templates are dropped (one masked
  // template stays when use_templates). `predict` without alignments.
  bool single_sequence = false;
  float use_clamped_fape = 0.0f;  // inference: unclamped FAPE is irrelevant; AlphaFold/OpenFold write 0
  // Fixed output sizes (0: the natural size; smaller than natural is an error): axes are padded
  // with zeros (masks 0), and recycling slices past num_recycles + 1 repeat the last computed one,
  // so that every sample of a training run has the same shapes (training_sample.h).
  struct Padding {
    int64_t num_res = 0, msa_clusters = 0, extra_msa = 0, templates = 0, recycling_slices = 0;
  } padding;

  // The number of MSA cluster centres requested (before limiting by the MSA depth).
  int64_t msa_clusters() const {
    return reduce_msa_clusters_by_max_templates && use_templates ? max_msa_clusters - max_templates
                                                                 : max_msa_clusters;
  }
};

// The processed features. Required raw keys: aatype ([N,21] one-hot or [N] indices),
// between_segment_residues, residue_index, seq_length, msa ([S,N] HHblits codes 0..21), and
// deletion_matrix_int (or deletion_matrix); with use_templates: template_aatype ([T,N,22] one-hot
// HHblits codes, or [T,N] HHblits codes), template_all_atom_positions, template_all_atom_masks (or
// template_all_atom_mask), template_sum_probs (optional: zeros). Integer arrays may be int32 or
// int64, float arrays float32 or float64. Throws foldcore::Error naming the feature and shapes.
FeatureDict process_features(const FeatureDict& raw, const FeatureProcessingConfig& config);

// The raw feature dict of a single sequence without alignments: sequence features, an MSA made of
// the query alone, zero templates.
FeatureDict single_sequence_raw_features(const std::string& sequence, const std::string& description);

// One key of the layout above: `dims` space-separated, a letter (N S E T R) a size shared across
// keys, a number a fixed size; float32 or int64; template keys are absent without templates.
struct ProcessedKeyLayout {
  const char* name;
  const char* dims;
  bool is_float;
  bool is_template;
};
// The whole table, in key order.
std::span<const ProcessedKeyLayout> processed_layout();

// Checks that `features` has exactly the layout above (keys in that order, ranks, dtypes, and one
// consistent N, S, E, T, R; template keys all present or all absent). Throws foldcore::Error
// naming the first offending key.
void check_processed_layout(const FeatureDict& features);

// Writes processed features as an .npz in the layout above (checked first), atomically.
void write_processed_features(const std::string& path, const FeatureDict& features);

}  // namespace foldcore::data
