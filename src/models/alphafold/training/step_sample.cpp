#include "models/alphafold/training/step_sample.h"

#include "core/error.h"

namespace foldcore::af2 {

std::set<std::string> recycled_keys(const data::TrainingSampleConfig& config) {
  std::set<std::string> out;
  for (const data::TrainingFeatureSpec& spec : data::training_sample_layout(config)) {
    if (spec.name == "num_recycles") break;
    out.insert(spec.name);
  }
  return out;
}

StepSample split_step_sample(const std::map<std::string, Tensor>& arrays, int64_t iterations,
                             const std::set<std::string>& recycled, const std::string& origin) {
  FC_CHECK(iterations >= 1, origin, ": ", iterations, " recycling iterations (at least 1)");
  std::map<std::string, Tensor> features;
  StepSample s;
  for (const auto& [name, t] : arrays) {
    if (recycled.count(name) == 0) {
      s.last_slice[name] = t.contiguous().clone();
      continue;
    }
    FC_CHECK(t.dim() >= 1 && t.size(-1) >= iterations, origin, ": feature '", name, "' ", t.shape().str(),
             " has fewer than the ", iterations, " recycling iterations the sample asks for");
    const Tensor x = t.narrow(-1, 0, iterations);
    s.last_slice[name] = x.select(-1, iterations - 1).contiguous().clone();
    features[name] = x.contiguous().clone();
  }
  s.features = Af2Features::from_arrays(features, origin);
  return s;
}

}  // namespace foldcore::af2
