// CPU reference for AlphaFold2 global attention (supplement Alg. 19), see attention.h.
// OpenMP over the batch (columns); everything in fp32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_cpu.h"

namespace foldcore::ops::cpu {
namespace {

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// Pointer to the last-dim row of `t` at the leading coordinates idx (last-dim stride 1).
template <typename T> T* row_ptr(const Tensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0;
  int a = 0;
  for (int64_t i : idx) off += i * t.stride(a++);
  return static_cast<T*>(t.data_ptr()) + off;
}

// Global-attention probabilities p[h, j] for column b (rows of `p` are S long).
template <typename T>
void global_probs(const Tensor& q, const std::vector<float>& kf, const Tensor& bias, float scale, int64_t b,
                  int64_t H, int64_t S, int64_t D, std::vector<float>& qf, std::vector<float>& p) {
  qf.resize(static_cast<size_t>(H * D));
  p.resize(static_cast<size_t>(H * S));
  for (int64_t h = 0; h < H; ++h) {
    const T* qr = row_ptr<const T>(q, {b, h});
    for (int64_t d = 0; d < D; ++d) qf[h * D + d] = static_cast<float>(qr[d]);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < S; ++j) {
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += qf[h * D + d] * kf[j * D + d];
      float s = scale * dot;
      if (bias.defined()) s += static_cast<float>(static_cast<const T*>(bias.data_ptr())[b * bias.stride(0) + j * bias.stride(1)]);
      p[h * S + j] = s;
      mx = std::max(mx, s);
    }
    float sum = 0.f;
    for (int64_t j = 0; j < S; ++j) {
      const float e = mx == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(p[h * S + j] - mx);
      p[h * S + j] = e;
      sum += e;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int64_t j = 0; j < S; ++j) p[h * S + j] *= inv;
  }
}

template <typename T> void load_kv(const Tensor& t, int64_t b, int64_t S, int64_t D, std::vector<float>& out) {
  out.resize(static_cast<size_t>(S * D));
  for (int64_t j = 0; j < S; ++j) {
    const T* r = row_ptr<const T>(t, {b, j});
    for (int64_t d = 0; d < D; ++d) out[j * D + d] = static_cast<float>(r[d]);
  }
}

template <typename T>
void global_forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& g,
                         float scale, const Tensor& o, const Tensor& a) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = k.size(1);
#pragma omp parallel
  {
    std::vector<float> kf, vf, qf, p, af(static_cast<size_t>(H * D));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      load_kv<T>(k, b, S, D, kf);
      load_kv<T>(v, b, S, D, vf);
      global_probs<T>(q, kf, bias, scale, b, H, S, D, qf, p);
      std::fill(af.begin(), af.end(), 0.f);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < S; ++j)
          for (int64_t d = 0; d < D; ++d) af[h * D + d] += p[h * S + j] * vf[j * D + d];
      for (int64_t h = 0; h < H; ++h) {
        T* ar = row_ptr<T>(a, {b, h});
        for (int64_t d = 0; d < D; ++d) ar[d] = T(af[h * D + d]);
      }
      for (int64_t j = 0; j < S; ++j)
        for (int64_t h = 0; h < H; ++h) {
          const T* gr = row_ptr<const T>(g, {b, j, h});
          T* orow = row_ptr<T>(o, {b, j, h});
          for (int64_t d = 0; d < D; ++d) orow[d] = T(sigmoid(static_cast<float>(gr[d])) * af[h * D + d]);
        }
    }
  }
}

// dA[h] = Σ_j dO[j,h] ⊙ σ(g[j,h]);  dg = dO ⊙ a ⊙ σ(1−σ);  delta[h] = dA[h]·a[h];
// ds[h,j] = p[h,j] (dA[h]·v_j − delta[h]);  dq[h] = scale Σ_j ds k_j;
// dk_j = scale Σ_h ds[h,j] q[h];  dv_j = Σ_h p[h,j] dA[h].
template <typename T>
void global_backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& g,
                          float scale, const Tensor& a, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, const Tensor& dg) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), S = k.size(1);
#pragma omp parallel
  {
    std::vector<float> kf, vf, qf, p, da(static_cast<size_t>(H * D)), af(static_cast<size_t>(H * D)),
        dqf(static_cast<size_t>(H * D)), delta(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      load_kv<T>(k, b, S, D, kf);
      load_kv<T>(v, b, S, D, vf);
      global_probs<T>(q, kf, bias, scale, b, H, S, D, qf, p);
      for (int64_t h = 0; h < H; ++h) {
        const T* ar = row_ptr<const T>(a, {b, h});
        for (int64_t d = 0; d < D; ++d) af[h * D + d] = static_cast<float>(ar[d]);
      }
      std::fill(da.begin(), da.end(), 0.f);
      for (int64_t j = 0; j < S; ++j)
        for (int64_t h = 0; h < H; ++h) {
          const T* gr = row_ptr<const T>(g, {b, j, h});
          const T* dor = row_ptr<const T>(d_o, {b, j, h});
          T* dgr = row_ptr<T>(dg, {b, j, h});
          for (int64_t d = 0; d < D; ++d) {
            const float sg = sigmoid(static_cast<float>(gr[d])), dov = static_cast<float>(dor[d]);
            da[h * D + d] += dov * sg;
            dgr[d] = T(dov * af[h * D + d] * sg * (1.f - sg));
          }
        }
      for (int64_t h = 0; h < H; ++h) {
        delta[h] = 0.f;
        for (int64_t d = 0; d < D; ++d) delta[h] += da[h * D + d] * af[h * D + d];
      }
      std::fill(dqf.begin(), dqf.end(), 0.f);
      for (int64_t j = 0; j < S; ++j) {
        T* dkr = row_ptr<T>(dk, {b, j});
        T* dvr = row_ptr<T>(dv, {b, j});
        std::vector<float> dkj(static_cast<size_t>(D), 0.f), dvj(static_cast<size_t>(D), 0.f);
        for (int64_t h = 0; h < H; ++h) {
          const float pj = p[h * S + j];
          float dp = 0.f;
          for (int64_t d = 0; d < D; ++d) dp += da[h * D + d] * vf[j * D + d];
          const float ds = pj * (dp - delta[h]);
          for (int64_t d = 0; d < D; ++d) {
            dqf[h * D + d] += ds * kf[j * D + d];
            dkj[d] += ds * qf[h * D + d];
            dvj[d] += pj * da[h * D + d];
          }
        }
        for (int64_t d = 0; d < D; ++d) {
          dkr[d] = T(scale * dkj[d]);
          dvr[d] = T(dvj[d]);
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        T* dqr = row_ptr<T>(dq, {b, h});
        for (int64_t d = 0; d < D; ++d) dqr[d] = T(scale * dqf[h * D + d]);
      }
    }
  }
}

}  // namespace

void global_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& g, float scale, const Tensor& o, const Tensor& a) {
  dispatch_float(q.dtype(), [&](auto tag) { global_forward_impl<decltype(tag)>(q, k, v, bias, g, scale, o, a); });
}

void global_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                               const Tensor& g, float scale, const Tensor& a, const Tensor& d_o, const Tensor& dq,
                               const Tensor& dk, const Tensor& dv, const Tensor& dg) {
  dispatch_float(q.dtype(), [&](auto tag) {
    global_backward_impl<decltype(tag)>(q, k, v, bias, g, scale, a, d_o, dq, dk, dv, dg);
  });
}

}  // namespace foldcore::ops::cpu
