// Optimizers over flat parameter/gradient buffers (one f32 buffer for all parameters, each
// parameter a segment), independent of autograd: they see only the buffers and the segments.
// The math lives in the fused kernels of kernels/optim.h; these classes own the state (moments,
// step count), the learning rate and the segment table.
//
// Typical loop:
//   const ClipResult c = clip_grad_norm(grads, 1.f);
//   if (c.finite()) { opt.set_lr(schedule.lr(opt.step_count())); opt.step(c.scale); ema.update(); }
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/optim.h"

namespace foldcore::nn {

// ---------------------------------------------------------------- clipping

struct ClipResult {
  double norm = 0;   // ‖grads‖₂ before clipping
  float scale = 1;   // grad_scale to pass to Optimizer::step: min(1, max_norm/(norm+1e-6))
  bool finite() const;
};
// Global-norm clipping without touching `grads`: the scale is folded into the optimizer step.
// max_norm ≤ 0 disables clipping (scale 1; the norm is still computed).
ClipResult clip_grad_norm(const Tensor& grads, float max_norm);

// ---------------------------------------------------------------- optimizers

class Optimizer {
 public:
  // params, grads: flat f32 buffers of the same length on one device; segments as in
  // kernels/optim.h (ascending, disjoint; only covered elements are updated).
  Optimizer(Tensor params, Tensor grads, std::vector<ops::ParamSegment> segments, float lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update from the current gradients times grad_scale (clipping, loss-scale removal);
  // increments step_count(). A non-finite grad_scale is an Error: skip the step instead.
  void step(float grad_scale = 1.f);

  // Steps taken so far (0 before the first): the "global step" schedules take.
  int64_t step_count() const;
  float lr() const { return lr_; }
  void set_lr(float lr);  // called by the schedule before each step

  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  const ops::SegmentTable& segments() const { return table_; }

  // The state to checkpoint, as live tensors (loading into them restores the optimizer):
  // flat f32 buffers ("m", "v") and "step", an i64 scalar on the CPU.
  std::map<std::string, Tensor> state() const;
  // The same state in the checkpoint's per-parameter layout (nn/checkpoint.h
  // CheckpointData::optimizer): for each flat buffer, one view per segment named names[i] and
  // shaped shapes[i] (1-D when shapes is empty); the step count as {"step": {"count": …}}.
  std::map<std::string, std::map<std::string, Tensor>> checkpoint_state(const std::vector<std::string>& names,
                                                                         const std::vector<Shape>& shapes = {}) const;

 protected:
  virtual void apply(float grad_scale, int64_t t) = 0;  // t = step number, ≥ 1
  // Flat state buffers of the subclass, zero-initialised, registered under `name`.
  Tensor& add_state(const std::string& name);
  Tensor flat_state(const std::string& name) const { return state_.at(name); }

  Tensor params_, grads_;
  ops::SegmentTable table_;
  float lr_;

 private:
  std::map<std::string, Tensor> state_;
  Tensor step_;  // i64 [] on the CPU
};

struct AdamConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  bool decoupled = true;  // AdamW; false = L2 penalty through the gradient (classic Adam)
  bool bias_correction = true;
};

// Adam / AdamW; segments with weight_decay == false get no decay (empty segments: decay all).
class Adam : public Optimizer {
 public:
  Adam(Tensor params, Tensor grads, std::vector<ops::ParamSegment> segments, const AdamConfig& config = {});
  const AdamConfig& config() const { return config_; }

 private:
  void apply(float grad_scale, int64_t t) override;
  AdamConfig config_;
};

struct LambConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  bool bias_correction = true;
};

// LAMB with a per-segment trust ratio (MLPerf BERT excludes biases and LayerNorm from decay by
// their segments' flags).
class Lamb : public Optimizer {
 public:
  Lamb(Tensor params, Tensor grads, std::vector<ops::ParamSegment> segments, const LambConfig& config = {});
  const LambConfig& config() const { return config_; }

 private:
  void apply(float grad_scale, int64_t t) override;
  LambConfig config_;
};

// ---------------------------------------------------------------- EMA

struct EmaConfig {
  float decay = 0.999f;  // AlphaFold 2 (supplement 1.11.7)
  // Ramp the decay as min(decay, (1+t)/(10+t)) so early averages are not dominated by the init.
  bool warmup = false;
};

// Shadow copy of the parameters: ema = d·ema + (1−d)·params after each update(). Needs no
// gradients or segments (it averages every element).
class Ema {
 public:
  Ema(Tensor params, const EmaConfig& config = {});
  void update();
  int64_t update_count() const;
  float current_decay() const;  // the decay the next update() uses
  const Tensor& shadow() const { return ema_; }
  // Swaps the parameter values with the averaged ones (evaluate with EMA weights, swap back).
  void swap_with_params();
  // Live state for checkpointing: "ema" (flat f32) and "step" (i64 scalar on the CPU).
  std::map<std::string, Tensor> state() const;

 private:
  Tensor params_, ema_, step_;
  EmaConfig config_;
};

// ---------------------------------------------------------------- learning-rate schedules
// Both take the global step (optimizer steps completed, 0 at the first step), as the reference
// implementations do.

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual float lr(int64_t step) const = 0;
};

// AlphaFold 2 (supplement 1.11.3; OpenFold's AlphaFoldLRScheduler): linear warmup from base_lr to
// max_lr over warmup_steps, constant, then ×decay_factor every decay_every steps after
// decay_start:  lr = max_lr · decay_factor^(⌊(step − decay_start)/decay_every⌋ + 1) for step > decay_start.
struct AlphaFoldScheduleConfig {
  float base_lr = 0.f, max_lr = 1e-3f;
  int64_t warmup_steps = 1000;
  int64_t decay_start = 50000, decay_every = 50000;
  float decay_factor = 0.95f;
};
class AlphaFoldSchedule : public LrSchedule {
 public:
  explicit AlphaFoldSchedule(const AlphaFoldScheduleConfig& config = {});
  float lr(int64_t step) const override;

 private:
  AlphaFoldScheduleConfig c_;
};

// MLPerf BERT (reference optimization.py): linear warmup, then polynomial decay over the total:
//   step < warmup: lr = base_lr · step / warmup
//   else:          lr = (base_lr − end_lr) · (1 − min(step, total)/total)^power + end_lr
// (the decay runs on the global step, as tf.train.polynomial_decay in the reference).
struct BertScheduleConfig {
  float base_lr = 4e-4f, end_lr = 0.f;
  int64_t warmup_steps = 0, total_steps = 1;
  float power = 1.f;
};
class BertSchedule : public LrSchedule {
 public:
  explicit BertSchedule(const BertScheduleConfig& config);
  float lr(int64_t step) const override;

 private:
  BertScheduleConfig c_;
};

}  // namespace foldcore::nn
