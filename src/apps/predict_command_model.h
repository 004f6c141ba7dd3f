// The engine of `foldcore predict` (predict_command.cpp parses the flags): the feature, model and
// output steps per target, with the loaded models cached across targets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "data_pipeline/features.h"
#include "models/alphafold/config.h"

namespace foldcore::apps {

struct PredictOptions {
  std::vector<std::string> fasta_paths;
  std::string output_dir;
  std::string data_dir;
  std::vector<std::string> model_names{"model_1_ptm"};
  bool use_precomputed_msas = false;
  int64_t num_recycles = 3;
  int64_t random_seed = 0;
  Device device = Device::cpu();
  std::string precision = "fp32";
  int64_t chunk_size = 0;
  bool benchmark = false;
  bool random_params = false;
  uint64_t random_params_seed = 0;
  std::string ranking_by = "plddt";
  std::string model_config;  // YAML for every model; "" → preset file or params inference
  // Templates: with --use_precomputed_msas, hits in msas/pdb70_hits.hhr are featurised from the
  // mmCIF files in template_mmcif_dir (AlphaFold's filters; max_template_date required then).
  std::string template_mmcif_dir;
  std::string max_template_date;
};

// The warning every output carries when the parameters are random.
std::string random_params_warning(uint64_t seed);

// Raw features of one target: FASTA checks (exactly one non-empty protein record), then the
// monomer pipeline on <msa_dir> (precomputed) or the single-sequence features. Errors name the file.
struct TargetFeatures {
  std::string target, description, sequence;
  data::FeatureDict raw;
};
// Templates come from <msa_dir>/pdb70_hits.hhr when `template_mmcif_dir` is given.
TargetFeatures target_features(const std::string& fasta_path, const std::string& msa_dir, bool use_precomputed_msas,
                               const std::string& template_mmcif_dir = "", const std::string& max_template_date = "");

// AlphaFold's inference feature processing of `raw` for `config` (num_iterations = recycles + 1
// per-iteration samples, recycling axis last), written to `npz_path` in the features.npz layout.
void process_features_to_npz(const data::FeatureDict& raw, const af2::Af2Config& config, int64_t num_iterations,
                             uint64_t seed, const std::string& npz_path);

void run_predict(const PredictOptions& options);

}  // namespace foldcore::apps
