// Fused optimizer kernels over one flat fp32 master buffer ("tensor fusion"): every parameter
// tensor is a [offset, offset+size) segment of `params`, with gradients and moments in parallel
// flat buffers of the same length.
//
// Adam (Kingma & Ba) / AdamW (Loshchilov & Hutter), step t ≥ 1, g = grad · grad_scale:
//   m = β1 m + (1−β1) g,   v = β2 v + (1−β2) g²,   m̂ = m/(1−β1ᵗ),   v̂ = v/(1−β2ᵗ)
//   Adam : g += wd·p before the moments (L2);   AdamW: p −= lr·wd·p (decoupled, old p)
//   p −= lr · m̂ / (√v̂ + eps)
// LAMB (You et al. 2020, Algorithm 2; MLPerf BERT), per segment s with its own weight-decay flag:
//   m, v as Adam (bias correction optional), u = m̂/(√v̂+eps) + wd_s·p
//   r_s = ‖p_s‖ / ‖u_s‖ (1 when either norm is 0),  p −= lr · r_s · u
// Global-norm clipping: grad_scale = min(1, max_norm / (‖g‖₂ + 1e-6)).
// EMA: ema = decay·ema + (1−decay)·p.
// All buffers f32 contiguous 1-D of the same length, on the same device.
//
// Segments: ascending by offset, non-overlapping, inside [0, numel). When segments are given,
// only elements inside a segment are touched (gaps are padding); Adam with no segments updates
// every element with decay. Reductions (‖g‖, LAMB's ‖p_s‖, ‖u_s‖) are deterministic: fixed
// chunking (SegmentTable::kChunk elements), partial sums per chunk, then summed in a fixed order,
// so results do not depend on the thread count or the GPU.
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

// Segments validated once for a buffer of `numel` elements, with the chunk table the kernels
// iterate over (each chunk lies inside one segment, ≤ kChunk elements), stored on `device`.
// Optimizers build one per parameter layout; the vector overloads below build a temporary one.
class SegmentTable {
 public:
  static constexpr int64_t kChunk = 4096;

  SegmentTable() = default;
  SegmentTable(std::vector<ParamSegment> segments, int64_t numel, Device device);

  const std::vector<ParamSegment>& segments() const { return segments_; }
  bool empty() const { return segments_.empty(); }
  int64_t numel() const { return numel_; }
  Device device() const { return device_; }
  int64_t num_chunks() const { return num_chunks_; }
  // [num_chunks, 4] i64 on device(): begin, end, segment index, weight-decay flag (0/1).
  const Tensor& chunks() const { return chunks_; }
  // [num_segments, 2] i64 on device(): first chunk, chunk count.
  const Tensor& segment_chunks() const { return segment_chunks_; }

 private:
  std::vector<ParamSegment> segments_;
  int64_t numel_ = 0;
  Device device_ = Device::cpu();
  int64_t num_chunks_ = 0;
  Tensor chunks_, segment_chunks_;
};

struct AdamArgs {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  bool decoupled = true;  // AdamW
  bool bias_correction = true;
  int64_t step = 1;
  float grad_scale = 1.f;
};
// Segments with weight_decay == false skip weight decay; empty segments = decay everywhere.
void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const std::vector<ParamSegment>& segments = {});
void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const SegmentTable& segments);

struct LambArgs {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  bool bias_correction = true;
  int64_t step = 1;
  float grad_scale = 1.f;
};
// At least one segment (the trust ratio is per segment).
void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const std::vector<ParamSegment>& segments);
void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const SegmentTable& segments);

// ‖grads‖₂ (host value; synchronising). Accumulated in double.
double global_grad_norm(const Tensor& grads);
// Returns the grad_scale to pass to the step for clipping at max_norm (1 when within, or when
// max_norm ≤ 0 = clipping off). A non-finite norm gives NaN: the caller must skip the step.
float clip_scale(double grad_norm, float max_norm);

void ema_update(const Tensor& ema, const Tensor& params, float decay);

}  // namespace foldcore::ops
