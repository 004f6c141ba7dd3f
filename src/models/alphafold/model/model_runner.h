// Running the AlphaFold2 model on a processed feature file with a parameter file: the engine of
// `foldcore run_features` (and of the parity test, which calls it directly).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "models/alphafold/params/alphafold_params.h"
#include "models/alphafold/model/config.h"

namespace foldcore::af2 {

struct RunFeaturesOptions {
  std::string features_path;
  std::string params_path;
  std::string config_path;    // "" → infer_af2_config(params_path)
  int64_t num_recycles = -1;  // < 0: every iteration the feature file holds (its recycling extent − 1)
  Device device = Device::cpu();
  std::string precision;  // "" → the config's; "fp32" / "bf16" override it (e.g. bf16 on a GPU)
};

using NamedArrays = std::vector<std::pair<std::string, Tensor>>;

// Builds the model, loads every parameter (no key missing, none unused), runs it on the
// features (num_recycles + 1 iterations, inference mode) and returns the outputs (CPU tensors)
// under the names of the reference outputs.npz. Nothing is written.
NamedArrays run_features(const RunFeaturesOptions& options);

// run_features, then writes the outputs to `output_path` (.npz, atomically: a failure at any
// point leaves no output file).
void run_features_to_file(const RunFeaturesOptions& options, const std::string& output_path);

}  // namespace foldcore::af2
