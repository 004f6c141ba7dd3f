// The feature-processing step of `foldcore predict`: the raw feature dict → AlphaFold's processed
// inference batch (data_pipeline/features/feature_processing.h, MSA sampling/clustering/masking per
// recycling iteration) for one model's config, written as an .npz in the features.npz layout
// that af2::Af2Features reads.
#include "apps/predict_command_model.h"
#include "core/error.h"

#include "data_pipeline/features/feature_processing.h"

namespace foldcore::apps {

void process_features_to_npz(const data::FeatureDict& raw, const af2::Af2Config& config, int64_t num_iterations,
                             uint64_t seed, const std::string& npz_path) {
  FC_CHECK(num_iterations >= 1, "process_features: ", num_iterations, " iterations");
  data::FeatureProcessingConfig pc;
  pc.max_msa_clusters = config.max_msa_clusters;
  pc.max_extra_msa = config.max_extra_msa;
  pc.use_templates = config.templates.enabled;
  pc.max_templates = config.templates.max_templates;
  pc.reduce_msa_clusters_by_max_templates = config.reduce_msa_clusters_by_max_templates;
  pc.num_recycles = static_cast<int>(num_iterations - 1);
  pc.seed = seed;
  // Single-sequence input (one MSA row): the processing's single-sequence mode.
  pc.single_sequence = raw.at("msa").shape.at(0) == 1;
  data::write_processed_features(npz_path, data::process_features(raw, pc));
}

}  // namespace foldcore::apps
