// The AlphaFold2 training loop of `foldcore train`: feature store → threaded loader
// (data_pipeline/training/loader.h) → per-sample training step (train_step.h: forward over recycling,
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
//
// Data parallelism (TrainRunOptions::parallel, docs/distributed.md): dp ranks split each global
// batch of B samples (B a multiple of dp); rank r's loader shard (data_pipeline/training/loader.h) gives it
// B/dp of exactly the samples one process's batch holds. Each rank clips each of its examples on
// its own and accumulates clip_i·g_i/B; the dp ranks' sums are added: one process's
// Σ_i clip_i·g_i/B up to fp32 summation order. Dropout masks are keyed by the sample (its epoch and
// position in the epoch's global order), not by how many samples this process ran before, so they
// are the same on any number of ranks. Overlap: the last local example's gradient g goes out
// bucket by bucket during its backward, as the autograd engine reports parameters final
// (autograd/engine.h GradReadyHook), unscaled, since its clipping factor needs the norm of the
// whole g; the factor is applied by the receiving rank once every rank's factor is known
// (dist::ScaledGradReducer: all-to-all during the backward, scale and sum, all-gather). The
// earlier local examples' clipped sum is added as the reduction's base. Rank 0 alone writes checkpoints and metrics;
// every rank loads the checkpoint on --resume; its position is in global steps (step·B samples),
// so a run resumes with any dp that divides B.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/optim.h"
#include "models/alphafold/training/train_config.h"

namespace foldcore::af2 {

// The data-parallel group of a run. The trainer is built with and without MPI; the caller
// implements this over the dist layer (apps/train_command.cpp: dist::ProcessGrid's dp()
// communicator and a dist::GradReducer). Every rank makes the same calls in the same order.
class AlphaFold;

class TrainParallel {
 public:
  virtual ~TrainParallel() = default;
  virtual int dp_rank() const = 0;  // this rank's loader shard
  virtual int dp_size() const = 0;
  virtual bool writes_outputs() const = 0;  // world rank 0: checkpoints, metrics.jsonl, progress
  // Once, before the first step: `buffer` (flat f32, the ParamStore's layout: `segments`) is the
  // buffer whose scaled sum over the dp ranks the calls below compute, bucket by bucket
  // (dist/scaled_grad_reducer.h).
  virtual void attach(const Tensor& buffer, const std::vector<ops::ParamSegment>& segments) = 0;
  // Optional, once per step before mark_ready: this rank's unscaled addend (buffer's layout).
  virtual void add_base(const Tensor& base) = 0;
  // The segments covering [offset, offset + length) of the buffer are final: may go out now.
  virtual void mark_ready(int64_t offset, int64_t length) = 0;
  // Launches the unmarked rest, waits: buffer = Σ over the dp ranks of scale · buffer + base,
  // where each rank gives its own scale only now.
  virtual void finish(double scale) = 0;
  // Buckets of the reduction, and how many of them are launched so far in this step.
  virtual int64_t num_buckets() const = 0;
  virtual int64_t buckets_launched() const = 0;
  // Element-wise sum over the dp ranks; the same values (bit for bit) on every rank.
  virtual std::vector<double> sum(const std::vector<double>& values) = 0;
  virtual void barrier() = 0;  // every rank of the world
  // The largest `value` over every rank of the world; the same on every rank.
  virtual int64_t world_max(int64_t value) = 0;
  // Model parallelism (DAP / BP, models/alphafold/parallel/model_parallel.h): hands the grid's groups to
  // the model, once, before the first step. Returns true when the model then runs split: its
  // step sums the split stacks' gradients over the groups (ModelParallelGradReducer, in buckets
  // started during the backward), and a split parameter's gradient is final — may go to the dp
  // reduction — once its bucket's sum has completed.
  virtual bool setup_model(AlphaFold& model) { return false; }
  // Gradient bucket size of the reductions (--dp_bucket_mb; 0: one bucket per parameter).
  virtual int64_t bucket_bytes() const { return int64_t{25} << 20; }
};

struct TrainRunOptions {
  TrainConfig config;
  std::string store_path;  // HDF5 feature store (foldcore preprocess)
  std::string out_dir;     // run folder: metrics.jsonl, checkpoint.h5
  int64_t max_steps = 0;   // 0: config.run.max_steps
  Device device = Device::cpu();
  std::string precision = "fp32";
  bool resume = false;
  // Fine-tuning from another run (AlphaFold2's fine-tuning stage starts from the initial
  // training's weights): a checkpoint of the same architecture whose weights (its EMA with
  // init_from_ema) start this run; the optimiser, EMA, step, loader position and dropout stream
  // start afresh. Not with resume.
  std::string init_from;
  bool init_from_ema = false;
  TrainParallel* parallel = nullptr;  // null: one process
  // Polled after every step: a non-zero value (a signal's number: apps/stop_signals.h) ends the
  // run there, with its checkpoint written; with `parallel`, every rank ends after the same step
  // (the largest value over the ranks). Null: never.
  std::function<int()> stop_requested;
};

struct TrainSummary {
  int64_t steps = 0;          // steps taken in total (including before a resume)
  int64_t skipped = 0;        // non-finite steps skipped in total
  double last_loss = 0;
  std::string checkpoint;     // path of the last checkpoint written
  int stopped_by = 0;         // the stop_requested value that ended the run before max_steps, or 0
};

TrainSummary run_af2_training(const TrainRunOptions& options);

// acc += min(1, max_norm / (norm + 1e-6)) · grads / batch_size: one example's share of the step's
// gradient, clipped to global norm max_norm on its own before averaging (AlphaFold2 clips per
// example); max_norm ≤ 0 disables clipping. `grads` is the flat f32 gradient (any device).
// The factor of one example's gradient in the step's: min(1, max_norm / (norm + 1e-6)) / batch_size
// (max_norm ≤ 0: 1 / batch_size).
double clipped_example_scale(double norm, double max_norm, int64_t batch_size);

void accumulate_clipped_gradient(std::vector<float>& acc, const Tensor& grads, double norm, double max_norm,
                                 int64_t batch_size);

// A training checkpoint's meta JSON: {"architecture": "<the model config's YAML>",
// "num_parameters": N}, with the settings a run may change on resume (recompute_blocks,
// recompute_keep_blocks, recompute_keep_extra_msa_blocks, bf16_training_streams) at fixed values.
std::string architecture_meta(const Af2Config& model, int64_t num_params);
// Whether a checkpoint with meta `stored` holds this architecture: architecture_meta's text, or
// its YAML read back (keys a checkpoint written before they existed lacks take config.h's
// defaults) equal to `model` once both are normalised so, and the same parameter count. Anything
// unreadable is another architecture.
bool same_architecture(const std::string& stored, const Af2Config& model, int64_t num_params);

// The checkpoint's file name inside a run folder.
inline const char* kTrainCheckpointName = "checkpoint.h5";
inline const char* kTrainMetricsName = "metrics.jsonl";

}  // namespace foldcore::af2
