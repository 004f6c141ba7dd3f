#include "nn/optimizer.h"

#include <algorithm>
#include <cmath>

namespace foldcore::nn {

// ---------------------------------------------------------------- clipping

bool ClipResult::finite() const { return std::isfinite(norm) && std::isfinite(scale); }

ClipResult clip_grad_norm(const Tensor& grads, float max_norm) {
  ClipResult r;
  r.norm = ops::global_grad_norm(grads);
  r.scale = ops::clip_scale(r.norm, max_norm);
  return r;
}

// ---------------------------------------------------------------- Optimizer

namespace {
Tensor step_tensor() { return Tensor::zeros({}, DType::i64, Device::cpu()); }
}  // namespace

Optimizer::Optimizer(Tensor params, Tensor grads, std::vector<ops::ParamSegment> segments, float lr)
    : params_(std::move(params)), grads_(std::move(grads)), lr_(lr), step_(step_tensor()) {
  FC_CHECK(params_.defined() && grads_.defined(), "Optimizer: params and grads must be defined");
  FC_CHECK(params_.dtype() == DType::f32 && grads_.dtype() == DType::f32 && params_.dim() == 1 &&
               grads_.dim() == 1 && params_.is_contiguous() && grads_.is_contiguous(),
           "Optimizer: params and grads must be contiguous 1-D f32 buffers, got ", params_.str(), " and ",
           grads_.str());
  FC_CHECK(params_.numel() == grads_.numel() && params_.device() == grads_.device(), "Optimizer: params ",
           params_.str(), " and grads ", grads_.str(), " must match in length and device");
  table_ = ops::SegmentTable(std::move(segments), params_.numel(), params_.device());
  set_lr(lr);
}

void Optimizer::step(float grad_scale) {
  FC_CHECK(std::isfinite(grad_scale), "Optimizer::step: non-finite grad_scale ", grad_scale,
           " (non-finite gradients: skip this step)");
  const int64_t t = step_count() + 1;
  apply(grad_scale, t);
  step_.data<int64_t>()[0] = t;
}

int64_t Optimizer::step_count() const { return step_.data<int64_t>()[0]; }

void Optimizer::set_lr(float lr) {
  FC_CHECK(std::isfinite(lr) && lr >= 0.f, "Optimizer: learning rate must be finite and ≥ 0, got ", lr);
  lr_ = lr;
}

Tensor& Optimizer::add_state(const std::string& name) {
  auto [it, inserted] = state_.emplace(name, Tensor::zeros({params_.numel()}, DType::f32, params_.device()));
  FC_CHECK(inserted, "Optimizer: state '", name, "' registered twice");
  return it->second;
}

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> out = state_;
  out["step"] = step_;
  return out;
}

std::map<std::string, std::map<std::string, Tensor>> Optimizer::checkpoint_state(
    const std::vector<std::string>& names, const std::vector<Shape>& shapes) const {
  const auto& segs = table_.segments();
  FC_CHECK(names.size() == segs.size(), "Optimizer::checkpoint_state: ", names.size(), " names for ", segs.size(),
           " segments");
  FC_CHECK(shapes.empty() || shapes.size() == segs.size(), "Optimizer::checkpoint_state: ", shapes.size(),
           " shapes for ", segs.size(), " segments");
  std::map<std::string, std::map<std::string, Tensor>> out;
  for (const auto& [state, flat] : state_) {
    auto& views = out[state];
    for (size_t i = 0; i < segs.size(); ++i) {
      Tensor v = flat.narrow(0, segs[i].offset, segs[i].size);
      if (!shapes.empty()) {
        FC_CHECK(shapes[i].product() == segs[i].size, "Optimizer::checkpoint_state: shape ", shapes[i].str(),
                 " of '", names[i], "' does not hold its segment of ", segs[i].size, " elements");
        v = v.view(shapes[i]);
      }
      FC_CHECK(views.emplace(names[i], v).second, "Optimizer::checkpoint_state: duplicate name '", names[i], "'");
    }
  }
  out["step"]["count"] = step_;
  return out;
}

// ---------------------------------------------------------------- Adam / LAMB

Adam::Adam(Tensor params, Tensor grads, std::vector<ops::ParamSegment> segments, const AdamConfig& config)
    : Optimizer(std::move(params), std::move(grads), std::move(segments), config.lr), config_(config) {
  add_state("m");
  add_state("v");
}

void Adam::apply(float grad_scale, int64_t t) {
  ops::AdamArgs a;
  a.lr = lr_;
  a.beta1 = config_.beta1;
  a.beta2 = config_.beta2;
  a.eps = config_.eps;
  a.weight_decay = config_.weight_decay;
  a.decoupled = config_.decoupled;
  a.bias_correction = config_.bias_correction;
  a.step = t;
  a.grad_scale = grad_scale;
  ops::adam_step(params_, grads_, flat_state("m"), flat_state("v"), a, table_);
}

Lamb::Lamb(Tensor params, Tensor grads, std::vector<ops::ParamSegment> segments, const LambConfig& config)
    : Optimizer(std::move(params), std::move(grads), std::move(segments), config.lr), config_(config) {
  FC_CHECK(!table_.empty(), "Lamb: at least one parameter segment is required (the trust ratio is per segment)");
  add_state("m");
  add_state("v");
}

void Lamb::apply(float grad_scale, int64_t t) {
  ops::LambArgs a;
  a.lr = lr_;
  a.beta1 = config_.beta1;
  a.beta2 = config_.beta2;
  a.eps = config_.eps;
  a.weight_decay = config_.weight_decay;
  a.bias_correction = config_.bias_correction;
  a.step = t;
  a.grad_scale = grad_scale;
  ops::lamb_step(params_, grads_, flat_state("m"), flat_state("v"), a, table_);
}

// ---------------------------------------------------------------- EMA

Ema::Ema(Tensor params, const EmaConfig& config)
    : params_(std::move(params)), step_(step_tensor()), config_(config) {
  FC_CHECK(params_.defined() && params_.dtype() == DType::f32 && params_.dim() == 1 && params_.is_contiguous(),
           "Ema: params must be a contiguous 1-D f32 buffer, got ", params_.str());
  FC_CHECK(config_.decay >= 0.f && config_.decay <= 1.f, "Ema: decay must be in [0, 1], got ", config_.decay);
  ema_ = params_.clone();
}

int64_t Ema::update_count() const { return step_.data<int64_t>()[0]; }

float Ema::current_decay() const {
  if (!config_.warmup) return config_.decay;
  const double t = static_cast<double>(update_count());
  return std::min(config_.decay, static_cast<float>((1.0 + t) / (10.0 + t)));
}

void Ema::update() {
  ops::ema_update(ema_, params_, current_decay());
  step_.data<int64_t>()[0] = update_count() + 1;
}

void Ema::swap_with_params() {
  const Tensor tmp = params_.clone();
  params_.copy_(ema_);
  ema_.copy_(tmp);
}

std::map<std::string, Tensor> Ema::state() const { return {{"ema", ema_}, {"step", step_}}; }

// ---------------------------------------------------------------- schedules

AlphaFoldSchedule::AlphaFoldSchedule(const AlphaFoldScheduleConfig& config) : c_(config) {
  FC_CHECK(c_.warmup_steps >= 0 && c_.decay_every > 0 && c_.decay_start >= c_.warmup_steps,
           "AlphaFoldSchedule: need warmup_steps ≥ 0, decay_every > 0 and decay_start ≥ warmup_steps, got ",
           c_.warmup_steps, ", ", c_.decay_every, ", ", c_.decay_start);
}

float AlphaFoldSchedule::lr(int64_t step) const {
  FC_CHECK(step >= 0, "AlphaFoldSchedule: negative step ", step);
  if (step < c_.warmup_steps)
    return c_.base_lr + (c_.max_lr - c_.base_lr) * static_cast<float>(static_cast<double>(step) / c_.warmup_steps);
  if (step <= c_.decay_start) return c_.max_lr;
  const int64_t exponent = (step - c_.decay_start) / c_.decay_every + 1;
  return static_cast<float>(c_.max_lr * std::pow(static_cast<double>(c_.decay_factor), static_cast<double>(exponent)));
}

BertSchedule::BertSchedule(const BertScheduleConfig& config) : c_(config) {
  FC_CHECK(c_.total_steps > 0 && c_.warmup_steps >= 0 && c_.power > 0.f,
           "BertSchedule: need total_steps > 0, warmup_steps ≥ 0 and power > 0, got ", c_.total_steps, ", ",
           c_.warmup_steps, ", ", c_.power);
}

float BertSchedule::lr(int64_t step) const {
  FC_CHECK(step >= 0, "BertSchedule: negative step ", step);
  if (step < c_.warmup_steps) return static_cast<float>(c_.base_lr * (static_cast<double>(step) / c_.warmup_steps));
  const double progress = static_cast<double>(std::min(step, c_.total_steps)) / static_cast<double>(c_.total_steps);
  return static_cast<float>((c_.base_lr - c_.end_lr) * std::pow(1.0 - progress, static_cast<double>(c_.power)) +
                            c_.end_lr);
}

}  // namespace foldcore::nn
