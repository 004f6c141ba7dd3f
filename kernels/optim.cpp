// Validation and device dispatch of the fused optimizer kernels.
#include "kernels/optim.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/optim_cpu.h"

namespace foldcore::ops {

SegmentTable::SegmentTable(std::vector<ParamSegment> segments, int64_t numel, Device device)
    : segments_(std::move(segments)), numel_(numel), device_(device) {
  FC_CHECK(numel >= 0, "SegmentTable: negative buffer length ", numel);
  std::vector<int64_t> chunks, seg_chunks;
  int64_t prev_end = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const ParamSegment& seg = segments_[s];
    FC_CHECK(seg.offset >= 0 && seg.size >= 0 && seg.offset + seg.size <= numel, "SegmentTable: segment ", s,
             " [", seg.offset, ", ", seg.offset + seg.size, ") is outside the buffer of ", numel, " elements");
    FC_CHECK(seg.offset >= prev_end, "SegmentTable: segment ", s, " at offset ", seg.offset,
             " overlaps or precedes the previous segment ending at ", prev_end,
             " (segments must be ascending and disjoint)");
    prev_end = seg.offset + seg.size;
    seg_chunks.push_back(static_cast<int64_t>(chunks.size() / 4));
    int64_t count = 0;
    for (int64_t b = seg.offset; b < seg.offset + seg.size; b += kChunk, ++count) {
      chunks.push_back(b);
      chunks.push_back(std::min(b + kChunk, seg.offset + seg.size));
      chunks.push_back(static_cast<int64_t>(s));
      chunks.push_back(seg.weight_decay ? 1 : 0);
    }
    seg_chunks.push_back(count);
  }
  num_chunks_ = static_cast<int64_t>(chunks.size() / 4);
  if (num_chunks_ > 0) chunks_ = Tensor::from_vector_i64(chunks, {num_chunks_, 4}, DType::i64, device);
  if (!segments_.empty())
    segment_chunks_ = Tensor::from_vector_i64(seg_chunks, {static_cast<int64_t>(segments_.size()), 2}, DType::i64,
                                              device);
}

namespace {

void check_flat(const char* op, const char* name, const Tensor& t, const Tensor& ref) {
  FC_CHECK(t.defined(), op, ": ", name, " is undefined");
  FC_CHECK(t.dtype() == DType::f32, op, ": ", name, " must be f32, got ", dtype_name(t.dtype()));
  FC_CHECK(t.dim() == 1 && t.is_contiguous(), op, ": ", name, " must be a contiguous 1-D buffer, got ", t.str());
  FC_CHECK(t.numel() == ref.numel(), op, ": ", name, " has ", t.numel(), " elements, params has ", ref.numel());
  FC_CHECK(t.device() == ref.device(), op, ": ", name, " is on ", t.device().str(), ", params on ",
           ref.device().str());
}

void check_buffers(const char* op, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v) {
  check_flat(op, "params", p, p);
  check_flat(op, "grads", g, p);
  check_flat(op, "m", m, p);
  check_flat(op, "v", v, p);
}

void check_table(const char* op, const SegmentTable& t, const Tensor& p) {
  if (t.empty()) return;  // no segments: nothing to match (Adam decays everywhere)
  FC_CHECK(t.numel() == p.numel(), op, ": segment table built for ", t.numel(), " elements, params has ",
           p.numel());
  FC_CHECK(t.device() == p.device(), op, ": segment table is on ", t.device().str(), ", params on ",
           p.device().str());
}

void check_step(const char* op, int64_t step, float beta1, float beta2) {
  FC_CHECK(step >= 1, op, ": step must be ≥ 1, got ", step);
  FC_CHECK(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f, op, ": betas must be in [0, 1), got ", beta1,
           ", ", beta2);
}

[[noreturn]] void no_cuda(const char* op) {
  FC_THROW(op, ": CUDA tensor given but this build has no CUDA backend");
}

}  // namespace

void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const std::vector<ParamSegment>& segments) {
  adam_step(params, grads, m, v, a, SegmentTable(segments, params.numel(), params.device()));
}

void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const SegmentTable& segments) {
  check_buffers("adam_step", params, grads, m, v);
  check_table("adam_step", segments, params);
  check_step("adam_step", a.step, a.beta1, a.beta2);
  if (params.numel() == 0) return;
  if (params.device().is_cpu()) return cpu::adam_step(params, grads, m, v, a, segments);
  no_cuda("adam_step");
}

void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const std::vector<ParamSegment>& segments) {
  lamb_step(params, grads, m, v, a, SegmentTable(segments, params.numel(), params.device()));
}

void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const SegmentTable& segments) {
  check_buffers("lamb_step", params, grads, m, v);
  check_table("lamb_step", segments, params);
  check_step("lamb_step", a.step, a.beta1, a.beta2);
  FC_CHECK(!segments.empty(), "lamb_step: at least one parameter segment is required (the trust ratio is per "
           "segment)");
  if (segments.num_chunks() == 0) return;
  if (params.device().is_cpu()) return cpu::lamb_step(params, grads, m, v, a, segments);
  no_cuda("lamb_step");
}

double global_grad_norm(const Tensor& grads) {
  check_flat("global_grad_norm", "grads", grads, grads);
  if (grads.numel() == 0) return 0.0;
  if (grads.device().is_cpu()) return cpu::global_grad_norm(grads);
  no_cuda("global_grad_norm");
}

float clip_scale(double grad_norm, float max_norm) {
  if (!std::isfinite(grad_norm)) return std::numeric_limits<float>::quiet_NaN();
  if (max_norm <= 0.f) return 1.f;
  const double s = static_cast<double>(max_norm) / (grad_norm + 1e-6);
  return s < 1.0 ? static_cast<float>(s) : 1.f;
}

void ema_update(const Tensor& ema, const Tensor& params, float decay) {
  check_flat("ema_update", "params", params, params);
  check_flat("ema_update", "ema", ema, params);
  FC_CHECK(decay >= 0.f && decay <= 1.f, "ema_update: decay must be in [0, 1], got ", decay);
  if (params.numel() == 0) return;
  if (params.device().is_cpu()) return cpu::ema_update(ema, params, decay);
  no_cuda("ema_update");
}

}  // namespace foldcore::ops
