// One AlphaFold2 training step without the optimizer: the training forward over recycling
// (AlphaFold::forward_train), every loss term (losses_total.h) on the last iteration's outputs, the
// backward of `loss` through the whole model into the ParamStore's flat gradient buffer, and the
// gradient mapped back onto the official AlphaFold2 parameter keys and layout (stacked per-block
// arrays on axis 0, as in params_<model>.npz). The engine of `foldcore train_step`.
//
// The batch is a training feature file in the layout of ../shared/af2/ref/train/batch.npz: model
// features and labels under AlphaFold/OpenFold's names, RECYCLING AXIS LAST; the number of
// iterations is the recycling extent, the loss reads the last slice. Dropout is off (the step is
// deterministic, as the parity fixture).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/param_store.h"
#include "core/device.h"
#include "core/tensor.h"
#include "models/alphafold/losses/losses_total.h"
#include "models/alphafold/parallel/model_parallel.h"
#include "models/alphafold/params/param_table.h"

namespace foldcore::af2 {

class AlphaFold;
class Af2Features;

struct TrainStepOptions {
  std::string batch_path;   // training features + labels (.npz, recycling axis last)
  std::string params_path;  // official-format parameters (.npz); the architecture is inferred from it
  std::string stage = "initial";  // loss weights: "initial" or "finetune" (suppl. Table 4)
  std::optional<LossWeights> weights;  // when set, these weights instead of the stage's
  // AF2 detaches the backbone rotation between structure-module layers; false differentiates
  // through every rotation (finite-difference checks of the whole step).
  bool stop_rotation_gradient = true;
  Device device = Device::cpu();
  // Model parallelism (model_parallel.h; `train_step --dap N`): every rank of the groups runs the
  // same step and gets the same result.
  ModelParallel model_parallel;
  // "fp32" or "bf16": bf16 autocast of the trunk's and heads' GEMMs/attention over fp32 master
  // weights (af2_train_step's `precision`).
  std::string precision = "fp32";
  int64_t recompute_blocks = 0;  // Af2Config::recompute_blocks (blocks per recomputation segment)
  int64_t recompute_keep_blocks = 0;  // Af2Config::recompute_keep_blocks
};

struct TrainStepResult {
  Af2Loss loss;         // every term (unweighted), unscaled_loss, loss
  LossWeights weights;  // the weights `loss` was summed with
  // d loss / d parameter under the full official key, official shape, f32 CPU; in the order of
  // the parameter file.
  std::vector<std::pair<std::string, Tensor>> grads;
  double grad_norm = 0;  // L2 over every gradient
};

// The step on an already built model whose parameters live in `params` (their gradients are zeroed
// first). `table` maps the model's parameters to official keys; `official_shapes` gives each key's
// shape in the parameter file (stacked arrays: [blocks, …]).
// precision DType::bf16: the forward over every iteration runs under bf16 autocast — the GEMMs and
// attention of the trunk and heads in bf16 (fp32 accumulation), LayerNorm statistics, softmax,
// residual streams and the recycled state in fp32 — while the structure module runs in fp32
// (autocast off, its inputs cast up), the losses are computed in fp32 (f64 sums) on fp32 copies of
// the logits, and every gradient lands in the fp32 flat buffer beside the fp32 master weights.
// DType::f32: everything fp32.
// report_grads = false (the trainer, bench_train): no per-key gradient copies on the host
// (result.grads empty; 0.59 s of a 3.5 s full-model step on an H200) and grad_norm taken over the
// flat gradient buffer on the device (ops::global_grad_norm) — the same values, summed in another
// order.
// Under model parallelism the split stacks' gradients are summed over their groups after the
// backward (reduce_model_parallel_grads), or — with `model_parallel_grads`, begun by the caller,
// whose gradient-ready hook feeds it during the backward — completed by its finish().
TrainStepResult af2_train_step(const AlphaFold& model, autograd::ParamStore& params, const Af2ParamTable& table,
                               const std::map<std::string, std::vector<int64_t>>& official_shapes,
                               const Af2Features& features, const std::map<std::string, Tensor>& last_slice,
                               const Af2LossConfig& config, Device device, DType precision = DType::f32,
                               bool report_grads = true, ModelParallelGradReducer* model_parallel_grads = nullptr);

// "fp32" → f32, "bf16" → bf16; anything else throws foldcore::Error naming `what` (the option).
DType train_precision(const std::string& name, const std::string& what);

// Reads the batch and the parameters, builds the model (architecture inferred from the parameter
// file), runs the step. Bad input (missing feature or label, wrong shapes, unknown stage, a
// parameter file that does not fit) throws foldcore::Error naming the file and the array.
TrainStepResult run_train_step(const TrainStepOptions& options);

// Writes the gradients (.npz, official keys) and the losses (JSON with "terms" — every term plus
// unscaled_loss and loss, as ../shared/af2/ref/train/losses.json — "weights" and "grad_norm"),
// each to a temporary name renamed into place, so a failure leaves no half file.
void write_train_step(const TrainStepResult& result, const std::string& grads_path, const std::string& losses_path);

}  // namespace foldcore::af2
