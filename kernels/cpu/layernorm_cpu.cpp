// CPU LayerNorm: OpenMP over rows, fp32 statistics in two-pass form (mean first,
// then Σ(x-mean)², which avoids the cancellation of E[x²]-E[x]²).
#include "kernels/cpu/layernorm_cpu.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace foldcore::ops::cpu {
namespace {

template <typename T>
void forward_typed(const T* x, const float* gamma, const float* beta, float eps, T* y, float* mean, float* rstd,
                   int64_t rows, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    float s = 0.f;
    for (int64_t j = 0; j < c; ++j) s += static_cast<float>(xr[j]);
    const float mu = s / static_cast<float>(c);
    float v = 0.f;
    for (int64_t j = 0; j < c; ++j) {
      const float d = static_cast<float>(xr[j]) - mu;
      v += d * d;
    }
    const float rs = 1.f / std::sqrt(v / static_cast<float>(c) + eps);
    T* yr = y + r * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = T((static_cast<float>(xr[j]) - mu) * rs * gamma[j] + beta[j]);
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dx per row (parallel over rows); dgamma/dbeta as per-thread partial sums over a fixed static
// row partition, reduced in thread order, so the result is deterministic for a given thread count.
template <typename T>
void backward_typed(const T* dy, const T* x, const float* gamma, const float* mean, const float* rstd, T* dx,
                    float* dgamma, float* dbeta, int64_t rows, int64_t c) {
  const int nthreads = omp_get_max_threads();
  std::vector<float> partial(static_cast<size_t>(2 * c * nthreads), 0.f);
#pragma omp parallel num_threads(nthreads)
  {
    float* pg = partial.data() + static_cast<size_t>(2 * c * omp_get_thread_num());
    float* pb = pg + c;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * c;
      const T* dyr = dy + r * c;
      const float mu = mean[r], rs = rstd[r];
      float sum_g = 0.f, sum_gx = 0.f;  // Σ ĝ, Σ ĝ·x̂
      for (int64_t j = 0; j < c; ++j) {
        const float xh = (static_cast<float>(xr[j]) - mu) * rs;
        const float d = static_cast<float>(dyr[j]);
        const float g = d * gamma[j];
        sum_g += g;
        sum_gx += g * xh;
        pg[j] += d * xh;
        pb[j] += d;
      }
      const float inv_c = 1.f / static_cast<float>(c);
      T* dxr = dx + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const float xh = (static_cast<float>(xr[j]) - mu) * rs;
        const float g = static_cast<float>(dyr[j]) * gamma[j];
        dxr[j] = T(rs * (g - sum_g * inv_c - xh * sum_gx * inv_c));
      }
    }
  }
  for (int t = 0; t < nthreads; ++t) {
    const float* pg = partial.data() + static_cast<size_t>(2 * c * t);
    for (int64_t j = 0; j < c; ++j) {
      dgamma[j] += pg[j];
      dbeta[j] += pg[c + j];
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward_typed<T>(x.data<T>(), gamma.data<float>(), beta.data<float>(), eps, y.data<T>(), mean.data<float>(),
                     rstd.data<float>(), rows, c);
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, int64_t rows,
                        int64_t c) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward_typed<T>(dy.data<T>(), x.data<T>(), gamma.data<float>(), mean.data<float>(), rstd.data<float>(),
                      dx.data<T>(), dgamma.data<float>(), dbeta.data<float>(), rows, c);
  });
}

}  // namespace foldcore::ops::cpu
