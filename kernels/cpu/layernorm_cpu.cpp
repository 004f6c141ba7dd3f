// CPU LayerNorm: OpenMP over rows, fp32 statistics in two-pass form (mean first, then
// Σ(x-mean)², which avoids the cancellation of E[x²]-E[x]²). The fused residual LayerNorm builds
// each row of h = residual + dropout(x + bias) in an fp32 row buffer (rounded through the storage
// dtype, as the unfused op stores it) and normalises that buffer: one pass over x/residual instead
// of writing h and reading it back.
#include "kernels/cpu/layernorm_cpu.h"

#include <omp.h>

#include <cmath>
#include <optional>
#include <vector>

#include "kernels/cpu/dropout_keep_cpu.h"

namespace foldcore::ops::cpu {
namespace {

template <typename T> const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <typename T> T* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Normalises rows whose fp32 values `load(r, buf)` writes into buf[0..c).
template <typename T, typename Load>
void normalise_rows(Load load, const float* gamma, const float* beta, float eps, T* y, float* mean, float* rstd,
                    int64_t rows, int64_t c) {
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(c));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load(r, buf.data());
      float s = 0.f;
      for (int64_t j = 0; j < c; ++j) s += buf[j];
      const float mu = s / static_cast<float>(c);
      float v = 0.f;
      for (int64_t j = 0; j < c; ++j) {
        const float dv = buf[j] - mu;
        v += dv * dv;
      }
      const float rs = 1.f / std::sqrt(v / static_cast<float>(c) + eps);
      T* yr = y + r * c;
      for (int64_t j = 0; j < c; ++j) yr[j] = T((buf[j] - mu) * rs * gamma[j] + beta[j]);
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dh per row (parallel over rows; added to dh's contents, rounded to T first, with acc_dh), then
// the dropout dx from dh rounded to T; dgamma/dbeta/dbias as per-thread partial sums over a fixed
// static row partition, reduced in thread order, so the result is deterministic for a given thread
// count. dy is of type TD (T, or 16-bit for an f32 h).
template <typename T, typename TD>
void backward_typed(const TD* dy, const T* h, const float* gamma, const float* mean, const float* rstd, T* dh, T* dx,
                    float* dbias, const DropoutArgs& d, const DropoutMaskDesc& mask, float* dgamma, float* dbeta,
                    int64_t rows, int64_t c, bool acc_dh) {
  const int nthreads = omp_get_max_threads();
  const int64_t nacc = dbias ? 3 : 2;
  const float keep_scale = dropout_scale(d.p);
  std::optional<DropoutKeep> keeps;
  if (d.p > 0.f && dx) keeps.emplace(d.seed, d.offset, d.p, mask, c);
  std::vector<float> partial(static_cast<size_t>(nacc * c * nthreads), 0.f);
#pragma omp parallel num_threads(nthreads)
  {
    float* pg = partial.data() + static_cast<size_t>(nacc * c * omp_get_thread_num());
    float* pb = pg + c;
    float* pd = dbias ? pg + 2 * c : nullptr;
    std::vector<unsigned char> keep(d.p > 0.f && dx ? static_cast<size_t>(c) : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* hr = h + r * c;
      const TD* dyr = dy + r * c;
      const float mu = mean[r], rs = rstd[r];
      float sum_g = 0.f, sum_gx = 0.f;  // Σ ĝ, Σ ĝ·x̂
      for (int64_t j = 0; j < c; ++j) {
        const float xh = (static_cast<float>(hr[j]) - mu) * rs;
        const float dv = static_cast<float>(dyr[j]);
        const float g = dv * gamma[j];
        sum_g += g;
        sum_gx += g * xh;
        pg[j] += dv * xh;
        pb[j] += dv;
      }
      if (!keep.empty()) keeps->row(r, keep.data());
      const float inv_c = 1.f / static_cast<float>(c);
      for (int64_t j = 0; j < c; ++j) {
        const float xh = (static_cast<float>(hr[j]) - mu) * rs;
        const float g = static_cast<float>(dyr[j]) * gamma[j];
        const T dhv = T(rs * (g - sum_g * inv_c - xh * sum_gx * inv_c));
        if (dh) dh[r * c + j] = acc_dh ? T(static_cast<float>(dh[r * c + j]) + static_cast<float>(dhv)) : dhv;
        if (dx) {
          const float dhf = static_cast<float>(dhv);
          const T dxv = keep.empty() ? dhv : T(keep[j] ? dhf * keep_scale : 0.f);
          dx[r * c + j] = dxv;
          if (pd) pd[j] += static_cast<float>(dxv);
        }
      }
    }
  }
  for (int t = 0; t < nthreads; ++t) {
    const float* pg = partial.data() + static_cast<size_t>(nacc * c * t);
    for (int64_t j = 0; j < c; ++j) {
      dgamma[j] += pg[j];
      dbeta[j] += pg[c + j];
      if (dbias) dbias[j] += pg[2 * c + j];
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    auto load = [&](int64_t r, float* buf) {
      for (int64_t j = 0; j < c; ++j) buf[j] = static_cast<float>(px[r * c + j]);
    };
    dispatch_float(y.dtype(), [&](auto ytag) {  // y: T, or 16-bit for an f32 x (the dispatcher checks)
      using TY = decltype(ytag);
      normalise_rows<TY>(load, gamma.data<float>(), beta.data<float>(), eps, y.data<TY>(), mean.data<float>(),
                         rstd.data<float>(), rows, c);
    });
  });
}

void bias_dropout_residual_layernorm_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                             const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& gamma,
                                             const Tensor& beta, float eps, const Tensor& h, const Tensor& y,
                                             const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  const float keep_scale = dropout_scale(d.p);
  // T: residual and h; TX: x and bias; TY: y (each T, or 16-bit for an f32 T: the dispatcher checks).
  dispatch_float(residual.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(x.dtype(), [&](auto xtag) {
      using TX = decltype(xtag);
      const TX* px = x.data<TX>();
      const TX* pb = ptr_or_null<TX>(bias);
      const T* pr = residual.data<T>();  // h may alias residual: each row is read before it is written
      T* ph = mut_ptr_or_null<T>(h);
      std::optional<DropoutKeep> keeps;
      if (d.p > 0.f) keeps.emplace(d.seed, d.offset, d.p, mask, c);
      auto load = [&](int64_t r, float* buf) {
        thread_local std::vector<unsigned char> keep;
        if (d.p > 0.f) {
          keep.resize(static_cast<size_t>(c));
          keeps->row(r, keep.data());
        }
        for (int64_t j = 0; j < c; ++j) {
          float v = static_cast<float>(px[r * c + j]) + (pb ? static_cast<float>(pb[j]) : 0.f);
          if (d.p > 0.f) v = keep[j] ? v * keep_scale : 0.f;
          const T hv = T(static_cast<float>(pr[r * c + j]) + v);
          buf[j] = static_cast<float>(hv);
          if (ph) ph[r * c + j] = hv;
        }
      };
      dispatch_float(y.dtype(), [&](auto ytag) {
        using TY = decltype(ytag);
        normalise_rows<TY>(load, gamma.data<float>(), beta.data<float>(), eps, y.data<TY>(), mean.data<float>(),
                           rstd.data<float>(), rows, c);
      });
    });
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& h, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dh, const Tensor& dx, const Tensor& dbias,
                        const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& dgamma, const Tensor& dbeta,
                        int64_t rows, int64_t c, bool accumulate_dh) {
  dispatch_float(h.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dy.dtype(), [&](auto dtag) {  // dy: T, 16-bit for an f32 h or f32 for a 16-bit h (checked)
      using TD = decltype(dtag);
      backward_typed<T, TD>(dy.data<TD>(), h.data<T>(), gamma.data<float>(), mean.data<float>(), rstd.data<float>(),
                            mut_ptr_or_null<T>(dh), mut_ptr_or_null<T>(dx),
                            dbias.defined() ? dbias.data<float>() : nullptr, d, mask, dgamma.data<float>(),
                            dbeta.data<float>(), rows, c, accumulate_dh);
    });
  });
}

}  // namespace foldcore::ops::cpu
