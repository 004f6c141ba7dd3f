// Fused optimizer kernels over one flat fp32 master buffer ("tensor fusion"): every parameter
// tensor is a [offset, offset+size) segment of `params`, with gradients and moments in parallel
// flat buffers of the same length.
//
// Adam (Kingma & Ba) / AdamW (Loshchilov & Hutter), step t ≥ 1, g = grad · grad_scale:
//   m = β1 m + (1−β1) g,   v = β2 v + (1−β2) g²,   m̂ = m/(1−β1ᵗ),   v̂ = v/(1−β2ᵗ)
//   Adam : g += wd·p before the moments (L2);   AdamW: p −= lr·wd·p (decoupled)
//   p −= lr · m̂ / (√v̂ + eps)
// LAMB (You et al. 2020; MLPerf BERT), per segment s with its own weight-decay flag:
//   m, v as Adam (bias correction optional), u = m̂/(√v̂+eps) + wd_s·p
//   r_s = ‖p_s‖ / ‖u_s‖ (1 when either norm is 0),  p −= lr · r_s · u
// Global-norm clipping: grad_scale = min(1, max_norm / (‖g‖₂ + 1e-6)).
// EMA: ema = decay·ema + (1−decay)·p.
// All buffers f32 contiguous 1-D of the same length, on the same device.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace foldcore::ops {

struct ParamSegment {
  int64_t offset = 0;
  int64_t size = 0;
  bool weight_decay = true;  // false for biases and LayerNorm parameters
};

struct AdamArgs {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  bool decoupled = true;  // AdamW
  int64_t step = 1;
  float grad_scale = 1.f;
};
// Segments with weight_decay == false skip weight decay; empty segments = decay everywhere.
void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const std::vector<ParamSegment>& segments = {});

struct LambArgs {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  bool bias_correction = true;
  int64_t step = 1;
  float grad_scale = 1.f;
};
void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const std::vector<ParamSegment>& segments);

// ‖grads‖₂ (host value; synchronising).
double global_grad_norm(const Tensor& grads);
// Returns the grad_scale to pass to the step for clipping at max_norm (1 when within).
float clip_scale(double grad_norm, float max_norm);

void ema_update(const Tensor& ema, const Tensor& params, float decay);

}  // namespace foldcore::ops
