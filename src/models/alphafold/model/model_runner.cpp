#include "models/alphafold/model/model_runner.h"

#include "autograd/param_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/params/param_table.h"

#ifdef FOLDCORE_HAVE_YAML
#include "models/alphafold/model/config_yaml.h"
#endif

namespace foldcore::af2 {

NamedArrays run_features(const RunFeaturesOptions& o) {
  // Everything that can fail on bad input is read and checked before the model is built.
  Af2Config config;
  if (!o.config_path.empty()) {
#ifdef FOLDCORE_HAVE_YAML
    config = load_af2_config(o.config_path);
#else
    FC_THROW("--config needs yaml-cpp, which this build lacks; omit it to infer the model from ", o.params_path);
#endif
  } else {
    config = infer_af2_config(o.params_path);
  }
  if (!o.precision.empty()) {
    config.precision = o.precision;
    validate_af2_config(config);
  }
  const Af2Features features = Af2Features::read_npz(o.features_path);
  const int64_t available = features.num_iterations() - 1;
  const int64_t recycles = o.num_recycles < 0 ? available : o.num_recycles;
  FC_CHECK(recycles <= available, o.features_path, ": ", recycles, " recycles need ", recycles + 1,
           " iterations on the feature recycling axis, the file holds ", features.num_iterations());
  log::info("run_features: ", config.preset, ", ", config.num_evoformer_blocks, " Evoformer blocks, ",
            features.iteration(0).num_res(), " residues, ", recycles, " recycles");

  autograd::ParamStore params(o.device);
  Generator init_rng(0);
  AlphaFold model(nn::Scope{&params, &init_rng, nullptr, ""}, config);
  model.train(false);
  params.finalize();
  Af2ParamTable table;
  model.add_af2_params(table);
  load_af2_params(table, o.params_path);
  return model.predict(features, recycles, o.device);
}

void run_features_to_file(const RunFeaturesOptions& options, const std::string& output_path) {
  const NamedArrays outputs = run_features(options);
  std::vector<std::pair<std::string, data::NpyArray>> arrays;
  arrays.reserve(outputs.size());
  for (const auto& [name, t] : outputs) arrays.emplace_back(name, data::NpyArray::from_tensor(t));
  data::write_npz(output_path, arrays);
}

}  // namespace foldcore::af2
