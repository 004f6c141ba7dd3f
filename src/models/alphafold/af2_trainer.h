// The AlphaFold2 training loop of `foldcore train`: feature store → threaded loader
// (data_pipeline/loader.h) → per-sample training step (train_step.h: forward over recycling,
// af2_loss, backward) → per-example clipping at global norm 0.1 and gradient accumulation over
// the global batch → Adam under AlphaFold's learning-rate schedule → parameter EMA.
//
// Outputs in the run folder:
//   metrics.jsonl   one JSON object per step: step, loss, every loss term, lr, grad_norm (mean of
//                   the per-example norms before clipping), step_seconds, samples_per_second,
//                   peak_memory_bytes, skipped (non-finite step), epoch, chains (the batch's
//                   samples); on validation steps also val_lddt_ca, val_gdt_ts, val_rmsd_ca,
//                   val_seconds and per chain val_<metric>/<chain> (af2_validation.h); with
//                   validation, a line {"step": 0, val_…} before the first step (untrained model)
//   checkpoint.h5   weights, EMA, Adam moments and step, trainer position (steps taken = loader
//                   batches consumed), dropout RNG offset, skip counters; written atomically
//                   (nn/checkpoint.h) every run.checkpoint_every steps and after the last step.
// --resume reloads checkpoint.h5, drops metrics lines past its step, starts the loader at its
// position (LoaderOptions::start_batch) and continues: a run killed at any point and resumed
// gives the same per-step losses as an uninterrupted one (the loader's order, the samples and the
// dropout masks depend only on the seed and the position).
//
// A step whose loss or gradient is not finite is skipped (no update, no EMA) and counted, as
// OpenFold does; run.max_nonfinite_in_a_row consecutive ones stop the run with an Error, the
// last checkpoint and metrics intact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "models/alphafold/train_config.h"

namespace foldcore::af2 {

struct TrainRunOptions {
  TrainConfig config;
  std::string store_path;  // HDF5 feature store (foldcore preprocess)
  std::string out_dir;     // run folder: metrics.jsonl, checkpoint.h5
  int64_t max_steps = 0;   // 0: config.run.max_steps
  Device device = Device::cpu();
  std::string precision = "fp32";
  bool resume = false;
};

struct TrainSummary {
  int64_t steps = 0;          // steps taken in total (including before a resume)
  int64_t skipped = 0;        // non-finite steps skipped in total
  double last_loss = 0;
  std::string checkpoint;     // path of the last checkpoint written
};

TrainSummary run_af2_training(const TrainRunOptions& options);

// acc += min(1, max_norm / (norm + 1e-6)) · grads / batch_size: one example's share of the step's
// gradient, clipped to global norm max_norm on its own before averaging (AlphaFold2 clips per
// example); max_norm ≤ 0 disables clipping. `grads` is the flat f32 gradient (any device).
void accumulate_clipped_gradient(std::vector<float>& acc, const Tensor& grads, double norm, double max_norm,
                                 int64_t batch_size);

// The checkpoint's file name inside a run folder.
inline const char* kTrainCheckpointName = "checkpoint.h5";
inline const char* kTrainMetricsName = "metrics.jsonl";

}  // namespace foldcore::af2
