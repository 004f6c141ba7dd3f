// CPU softmax and softmax cross-entropy: OpenMP over rows, fp32 math, max-subtracted exponentials.
#include "kernels/cpu/softmax_cpu.h"

#include "kernels/cpu/softmax_cpu_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace foldcore::ops::cpu {
namespace {

template <typename T> float max_of(const T* x, int64_t c) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < c; ++j) m = std::max(m, static_cast<float>(x[j]));
  return m;
}

// Each row is copied to fp32 scratch, exponentiated once (the vectorised exp_shift_sum), then
// scaled into y (y may alias x).
template <typename T> void softmax_fwd(const T* x, T* y, int64_t rows, int64_t c) {
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(c));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * c;
      T* yr = y + r * c;
      for (int64_t j = 0; j < c; ++j) buf[j] = static_cast<float>(xr[j]);
      const float m = row_max(buf.data(), c);
      const float inv = 1.f / exp_shift_sum(buf.data(), c, m);
      for (int64_t j = 0; j < c; ++j) yr[j] = T(buf[j] * inv);
    }
  }
}

template <typename T> void softmax_bwd(const T* y, const T* dy, T* dx, int64_t rows, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * c;
    const T* dyr = dy + r * c;
    float dot = 0.f;
    for (int64_t j = 0; j < c; ++j) dot += static_cast<float>(dyr[j]) * static_cast<float>(yr[j]);
    T* dxr = dx + r * c;
    for (int64_t j = 0; j < c; ++j)
      dxr[j] = T(static_cast<float>(yr[j]) * (static_cast<float>(dyr[j]) - dot));
  }
}

// T: logits dtype; TT: soft-target dtype (unused for hard labels); L: label type.
template <typename T, typename TT, typename L>
void cross_entropy(const T* x, const L* labels, const TT* targets, const float* weights, float dscale, float* loss,
                   T* dlogits, int64_t rows, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    T* dr = dlogits ? dlogits + r * c : nullptr;
    const int64_t label = labels ? static_cast<int64_t>(labels[r]) : 0;
    if (labels && label < 0) {  // ignored row
      loss[r] = 0.f;
      if (dr) std::fill(dr, dr + c, T(0.f));
      continue;
    }
    const float w = weights ? weights[r] : 1.f;
    const float m = max_of(xr, c);
    float s = 0.f;
    for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<float>(xr[j]) - m);
    const float lse = m + std::log(s);
    float sum_t = 1.f, sum_tx = 0.f;
    if (labels) {
      sum_tx = static_cast<float>(xr[label]);
    } else {
      const TT* tr = targets + r * c;
      sum_t = 0.f;
      for (int64_t j = 0; j < c; ++j) {
        const float t = static_cast<float>(tr[j]);
        sum_t += t;
        sum_tx += t * static_cast<float>(xr[j]);
      }
    }
    loss[r] = w * (sum_t * lse - sum_tx);
    if (!dr) continue;
    const float g = w * dscale;
    for (int64_t j = 0; j < c; ++j) {
      const float p = std::exp(static_cast<float>(xr[j]) - lse);
      const float t = labels ? (j == label ? 1.f : 0.f) : static_cast<float>(targets[r * c + j]);
      dr[j] = T(g * (p * sum_t - t));
    }
  }
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, int64_t rows, int64_t c) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_fwd<T>(x.data<T>(), y.data<T>(), rows, c);
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t rows, int64_t c) {
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_bwd<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), rows, c);
  });
}

void softmax_cross_entropy(const Tensor& logits, const CrossEntropyArgs& args, const Tensor& loss,
                           const Tensor& dlogits, int64_t rows, int64_t c) {
  const float* w = args.weights.defined() ? args.weights.data<float>() : nullptr;
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dl = dlogits.defined() ? dlogits.data<T>() : nullptr;
    if (args.labels.defined()) {
      auto run = [&](auto* lab) {
        for (int64_t r = 0; r < rows; ++r)
          FC_CHECK(static_cast<int64_t>(lab[r]) < c, "softmax_cross_entropy: label ", static_cast<int64_t>(lab[r]),
                   " at row ", r, " is out of range for ", c, " classes");
        cross_entropy<T, float>(logits.data<T>(), lab, static_cast<const float*>(nullptr), w, args.dscale,
                                loss.data<float>(), dl, rows, c);
      };
      if (args.labels.dtype() == DType::i32)
        run(args.labels.data<int32_t>());
      else
        run(args.labels.data<int64_t>());
    } else if (args.targets.dtype() == DType::f32) {
      cross_entropy<T, float>(logits.data<T>(), static_cast<const int32_t*>(nullptr), args.targets.data<float>(), w,
                              args.dscale, loss.data<float>(), dl, rows, c);
    } else {
      cross_entropy<T, T>(logits.data<T>(), static_cast<const int32_t*>(nullptr), args.targets.data<T>(), w,
                          args.dscale, loss.data<float>(), dl, rows, c);
    }
  });
}

}  // namespace foldcore::ops::cpu
