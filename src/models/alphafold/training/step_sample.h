// One training sample in train_step's layout, shared by the trainer (af2_trainer.cpp: samples of a
// loader batch) and bench_train (samples drawn straight from a chain): the model features over the
// recycling iterations the sample asks for, and the loss's arrays at the last of them.
#pragma once

#include <map>
#include <set>
#include <string>

#include "core/tensor.h"
#include "data_pipeline/training/training_sample.h"
#include "models/alphafold/model/features.h"

namespace foldcore::af2 {

struct StepSample {
  Af2Features features;                      // iterations = num_recycles + 1
  std::map<std::string, Tensor> last_slice;  // every array at the last iteration (the loss's inputs)
};

// The sample keys that carry the recycling axis (last): the processed features, which
// training_sample_layout lists before num_recycles (the labels follow it).
std::set<std::string> recycled_keys(const data::TrainingSampleConfig& config);

// Splits one sample's host arrays: the recycled keys (`recycled`) keep their first `iterations`
// slices as model features, and every key gives its last slice (the recycled ones) or itself to
// `last_slice`. Copies, so the arrays' buffers can be reused. `origin` names the sample in errors
// (a recycled array with fewer slices than `iterations`).
StepSample split_step_sample(const std::map<std::string, Tensor>& arrays, int64_t iterations,
                             const std::set<std::string>& recycled, const std::string& origin);

}  // namespace foldcore::af2
