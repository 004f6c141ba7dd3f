// CPU optimizer kernels: OpenMP over elements or over the segment table's chunks. Reductions
// keep one double partial per fixed chunk and sum the partials in order, so the result does not
// depend on the number of threads.
#include "kernels/cpu/optim_cpu.h"

#include <cmath>
#include <vector>

#include "kernels/optim_math.h"

namespace foldcore::ops::cpu {

using detail::MomentCoeffs;

// Below this many elements a parallel region costs more than it saves (and on a loaded machine
// idle-spinning threads cost far more): run serially.
constexpr int64_t kParallelMin = 1 << 15;

void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const SegmentTable& segments) {
  const MomentCoeffs c =
      detail::make_moment_coeffs(a.beta1, a.beta2, a.eps, a.grad_scale, a.step, a.bias_correction);
  float* p = params.data<float>();
  const float* g = grads.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  const float lr = a.lr, wd = a.weight_decay;
  const bool decoupled = a.decoupled;
  if (segments.empty()) {
    const int64_t n = params.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) detail::adam_element(p[i], g[i], mm[i], vv[i], c, lr, wd, decoupled);
    return;
  }
  const int64_t* chunks = segments.chunks().data<int64_t>();
  const int64_t nc = segments.num_chunks();
#pragma omp parallel for schedule(static) if (segments.numel() >= kParallelMin)
  for (int64_t k = 0; k < nc; ++k) {
    const int64_t* ch = chunks + 4 * k;
    const float w = ch[3] ? wd : 0.f;
    for (int64_t i = ch[0]; i < ch[1]; ++i) detail::adam_element(p[i], g[i], mm[i], vv[i], c, lr, w, decoupled);
  }
}

void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const SegmentTable& segments) {
  const MomentCoeffs c =
      detail::make_moment_coeffs(a.beta1, a.beta2, a.eps, a.grad_scale, a.step, a.bias_correction);
  float* p = params.data<float>();
  const float* g = grads.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  const int64_t* chunks = segments.chunks().data<int64_t>();
  const int64_t* seg_chunks = segments.segment_chunks().data<int64_t>();
  const int64_t nc = segments.num_chunks();
  const int64_t ns = static_cast<int64_t>(segments.segments().size());

  // Pass 1: moments, and per-chunk partial ‖p‖², ‖u‖² with u = m̂/(√v̂+eps) + wd_s·p.
  std::vector<double> partial(static_cast<size_t>(2 * nc), 0.0);
#pragma omp parallel for schedule(static) if (segments.numel() >= kParallelMin)
  for (int64_t k = 0; k < nc; ++k) {
    const int64_t* ch = chunks + 4 * k;
    const float wd = ch[3] ? a.weight_decay : 0.f;
    double pp = 0, uu = 0;
    for (int64_t i = ch[0]; i < ch[1]; ++i) {
      const float u = detail::update_moments(g[i] * c.grad_scale, mm[i], vv[i], c) + wd * p[i];
      pp += static_cast<double>(p[i]) * p[i];
      uu += static_cast<double>(u) * u;
    }
    partial[2 * k] = pp;
    partial[2 * k + 1] = uu;
  }
  // Pass 2: per-segment trust ratio from its chunks' partials, summed in chunk order.
  std::vector<float> ratio(static_cast<size_t>(ns), 1.f);
  for (int64_t s = 0; s < ns; ++s) {
    double pp = 0, uu = 0;
    for (int64_t k = seg_chunks[2 * s]; k < seg_chunks[2 * s] + seg_chunks[2 * s + 1]; ++k) {
      pp += partial[2 * k];
      uu += partial[2 * k + 1];
    }
    ratio[s] = detail::lamb_trust_ratio(pp, uu);
  }
  // Pass 3: p −= lr·r_s·u, u recomputed from the updated moments and the old p.
#pragma omp parallel for schedule(static) if (segments.numel() >= kParallelMin)
  for (int64_t k = 0; k < nc; ++k) {
    const int64_t* ch = chunks + 4 * k;
    const float wd = ch[3] ? a.weight_decay : 0.f;
    const float step = a.lr * ratio[ch[2]];
    for (int64_t i = ch[0]; i < ch[1]; ++i) {
      const float u = detail::moment_direction(mm[i], vv[i], c) + wd * p[i];
      p[i] = p[i] - step * u;
    }
  }
}

double global_grad_norm(const Tensor& grads) {
  const float* g = grads.data<float>();
  const int64_t n = grads.numel();
  const int64_t chunk = SegmentTable::kChunk;
  const int64_t nc = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<size_t>(nc), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t k = 0; k < nc; ++k) {
    const int64_t end = std::min(n, (k + 1) * chunk);
    double s = 0;
    for (int64_t i = k * chunk; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
    partial[k] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

void ema_update(const Tensor& ema, const Tensor& params, float decay) {
  float* e = ema.data<float>();
  const float* p = params.data<float>();
  const int64_t n = ema.numel();
  const float keep = decay, take = 1.f - decay;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) e[i] = keep * e[i] + take * p[i];
}

}  // namespace foldcore::ops::cpu
