// CUDA elementwise family: grid-stride kernels, fp32 math, 16-bit storage. Contiguous maps load
// and store 16-byte packs when every pointer is 16-byte aligned (4 f32 or 8 bf16/f16 per access).
// Dropout draws one Philox block per 4 consecutive elements when the mask is not shared (the
// block holds exactly the 4 words philox_keep would compute for them one by one).
#include "kernels/cuda/elementwise_cuda.h"

#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/philox.h"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T> struct alignas(16) Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};

template <typename T, int N> struct Ptrs {
  const T* p[N];
};

// out[i] = T(f(x, i)) with x[j] = float(in_j[i]). out may alias an input: every element is read
// and written by the same thread, reads first.
template <typename T, int NIN, typename F>
__global__ void map_kernel(int64_t n, Ptrs<T, NIN> in, T* out, bool vec, F f) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vec) {
    constexpr int kN = Pack<T>::kN;
    const int64_t nv = n / kN;
    for (int64_t v = tid; v < nv; v += stride) {
      Pack<T> a[NIN];
#pragma unroll
      for (int j = 0; j < NIN; ++j) a[j] = reinterpret_cast<const Pack<T>*>(in.p[j])[v];
      Pack<T> o;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        float x[NIN];
#pragma unroll
        for (int j = 0; j < NIN; ++j) x[j] = to_f32(a[j].v[k]);
        o.v[k] = from_f32<T>(f(x, v * kN + k));
      }
      reinterpret_cast<Pack<T>*>(out)[v] = o;
    }
    start = nv * kN;
  }
  for (int64_t i = start + tid; i < n; i += stride) {
    float x[NIN];
#pragma unroll
    for (int j = 0; j < NIN; ++j) x[j] = to_f32(in.p[j][i]);
    out[i] = from_f32<T>(f(x, i));
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Launches map_kernel over contiguous tensors of CUDA type T (all of out's dtype).
template <typename T, int NIN, typename F> void launch_map(const Tensor (&ins)[NIN], const Tensor& out, F f) {
  Ptrs<T, NIN> p{};
  bool vec = aligned16(out.data_ptr());
  for (int j = 0; j < NIN; ++j) {
    p.p[j] = static_cast<const T*>(ins[j].data_ptr());
    vec = vec && aligned16(p.p[j]);
  }
  const int64_t n = out.numel();
  const int64_t work = vec ? (n + Pack<T>::kN - 1) / Pack<T>::kN : n;
  launch_kernel<map_kernel<T, NIN, F>>(grid_for(work, kBlock), kBlock, 0, cuda_stream_of(out.device()),
      n, p, static_cast<T*>(out.data_ptr()), vec, f);
  FC_CUDA_CHECK_LAUNCH();
}

// ---- functors (fp32 math; same formulas as the CPU reference) ----
struct Affine2 {  // alpha·a + beta·b + gamma·a·b
  float alpha, beta, gamma;
  __device__ float operator()(const float* x, int64_t) const { return alpha * x[0] + beta * x[1] + gamma * x[0] * x[1]; }
};
struct Scale {
  float s;
  __device__ float operator()(const float* x, int64_t) const { return s * x[0]; }
};
struct ReciprocalShift {  // IEEE division (no fast-math): the host's 1 / (x + eps) bit for bit
  float eps;
  __device__ float operator()(const float* x, int64_t) const { return 1.0f / (x[0] + eps); }
};
__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float gelu_cdf(float v) { return 0.5f * (1.0f + erff(v * 0.70710678118654752f)); }
struct ReluFwd {
  __device__ float operator()(const float* x, int64_t) const { return x[0] > 0.f ? x[0] : 0.f; }
};
struct ReluBwd {  // x[0] = x, x[1] = dy
  __device__ float operator()(const float* x, int64_t) const { return x[0] > 0.f ? x[1] : 0.f; }
};
struct GeluFwd {
  __device__ float operator()(const float* x, int64_t) const { return x[0] * gelu_cdf(x[0]); }
};
struct GeluBwd {  // dy · (Φ(x) + x·φ(x))
  __device__ float operator()(const float* x, int64_t) const {
    const float pdf = 0.39894228040143268f * expf(-0.5f * x[0] * x[0]);
    return x[1] * (gelu_cdf(x[0]) + x[0] * pdf);
  }
};
struct SigmoidFwd {
  __device__ float operator()(const float* x, int64_t) const { return sigmoidf(x[0]); }
};
struct SigmoidBwd {  // x[0] = y, x[1] = dy
  __device__ float operator()(const float* x, int64_t) const { return x[1] * x[0] * (1.f - x[0]); }
};
struct SigmoidGate {  // x[0] = g, x[1] = x
  __device__ float operator()(const float* x, int64_t) const { return sigmoidf(x[0]) * x[1]; }
};

template <typename F> void unary(const Tensor& x, const Tensor& out, F f) {
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor ins[1] = {x};
    launch_map<T, 1>(ins, out, f);
  });
}
template <typename F> void binary_map(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  cuda_dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor ins[2] = {a, b};
    launch_map<T, 2>(ins, out, f);
  });
}

// a, out contiguous; b strided (broadcast views have stride 0), its dims merged (strided_desc) and
// indexed in 32 bits where they fit.
template <typename T, typename I>
__global__ void strided_binary_kernel(I n, const T* a, const T* b, StridedDescT<I> bd, T* out, Affine2 f) {
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < n;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const float x[2] = {to_f32(a[i]), to_f32(b[bd.offset_of(i)])};
    out[i] = from_f32<T>(f(x, i));
  }
}

template <typename T>
__global__ void sigmoid_gate_backward_kernel(int64_t n, const T* g, const T* x, const T* dout, T* dg, T* dx) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = sigmoidf(to_f32(g[i])), d = to_f32(dout[i]), xv = to_f32(x[i]);
    dg[i] = from_f32<T>(d * xv * s * (1.f - s));
    dx[i] = from_f32<T>(d * s);
  }
}

// ---- dropout ----
struct DropoutParams {
  float p, keep_scale;
  uint64_t seed, offset;
  DropoutMaskDesc mask;
};

// Keep decisions for elements base..base+3 (base % 4 == 0), kernels/dropout_mask.h.
__device__ __forceinline__ void keep4(const DropoutParams& d, int64_t base, bool keep[4]) {
  dropout_keep4(d.mask, d.seed, d.offset, d.p, base, keep);
}

// Grid-stride loop over groups of 4 elements (one Philox block each): calls f(i, keep_i) for
// every element i < n, with keep_i the dropout decision (true everywhere when p = 0).
template <typename F> __device__ __forceinline__ void for_each_dropout_element(int64_t n, const DropoutParams& d, F f) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = g * 4;
    bool keep[4] = {true, true, true, true};
    if (d.p > 0.f) keep4(d, base, keep);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = base + k;
      if (i >= n) break;
      f(i, keep[k]);
    }
  }
}

// out = residual + dropout(x + bias); bias/residual may be null; out may alias residual. x and
// bias in T, residual and out in O (T, or fp32 for a 16-bit update of an fp32 stream).
template <typename T, typename O>
__global__ void bias_dropout_residual_kernel(int64_t n, int64_t c, const T* x, const T* bias, const O* res, O* out,
                                             DropoutParams d) {
  for_each_dropout_element(n, d, [&](int64_t i, bool keep) {
    float v = to_f32(x[i]) + (bias ? to_f32(bias[i % c]) : 0.f);
    if (d.p > 0.f) v = keep ? v * d.keep_scale : 0.f;
    out[i] = from_f32<O>((res ? to_f32(res[i]) : 0.f) + v);
  });
}

// dx (X: dout's T, or 16-bit from an fp32 dout) = mask ⊙ dout / (1 − p).
template <typename T, typename X>
__global__ void dropout_backward_kernel(int64_t n, const T* dout, X* dx, DropoutParams d) {
  for_each_dropout_element(n, d, [&](int64_t i, bool keep) {
    const float v = to_f32(dout[i]);
    dx[i] = from_f32<X>(d.p > 0.f ? (keep ? v * d.keep_scale : 0.f) : v);
  });
}

template <typename T> const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

}  // namespace

void binary(float alpha, const Tensor& a, float beta, const Tensor& b, float gamma, const Tensor& out) {
  const Affine2 f{alpha, beta, gamma};
  if (b.is_contiguous()) {
    binary_map(a, b, out, f);
    return;
  }
  cuda_dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = out.numel();
    const StridedDesc bd = strided_desc(b);
    bool small = false;
    const StridedDescT<int32_t> bd32 = strided_desc32(bd, n, small);
    if (small)
      launch_kernel<strided_binary_kernel<T, int32_t>>(grid_for(n, kBlock), kBlock, 0, cuda_stream_of(out.device()),
          static_cast<int32_t>(n), static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), bd32,
          static_cast<T*>(out.data_ptr()), f);
    else
      launch_kernel<strided_binary_kernel<T, int64_t>>(grid_for(n, kBlock), kBlock, 0, cuda_stream_of(out.device()),
          n, static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), bd,
          static_cast<T*>(out.data_ptr()), f);
    FC_CUDA_CHECK_LAUNCH();
  });
}

// dst[i] = f(dst[i], float(src[i])) with add's Affine2 (1, 1, 0): the values of a conversion
// kernel followed by add, in one pass (engine.cpp adds bf16 gradient contributions to fp32 ones).
template <typename S>
__global__ void add_into_f32_kernel(int64_t n, float* dst, const S* src, Affine2 f) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x[2] = {dst[i], to_f32(src[i])};
    dst[i] = f(x, i);
  }
}

void add_into_f32(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  cuda_dispatch_float(src.dtype(), [&](auto tag) {
    using S = decltype(tag);
    launch_kernel<add_into_f32_kernel<S>>(grid_for(n, kBlock), kBlock, 0, cuda_stream_of(dst.device()), n,
                                          static_cast<float*>(dst.data_ptr()), static_cast<const S*>(src.data_ptr()),
                                          Affine2{1.f, 1.f, 0.f});
    FC_CUDA_CHECK_LAUNCH();
  });
}

void scale(const Tensor& x, float s, const Tensor& out) { unary(x, out, Scale{s}); }
void reciprocal_shift(const Tensor& x, float eps, const Tensor& out) { unary(x, out, ReciprocalShift{eps}); }
void relu_forward(const Tensor& x, const Tensor& y) { unary(x, y, ReluFwd{}); }
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) { binary_map(x, dy, dx, ReluBwd{}); }
void gelu_forward(const Tensor& x, const Tensor& y) { unary(x, y, GeluFwd{}); }
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) { binary_map(x, dy, dx, GeluBwd{}); }
void sigmoid_forward(const Tensor& x, const Tensor& y) { unary(x, y, SigmoidFwd{}); }
void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) { binary_map(y, dy, dx, SigmoidBwd{}); }
void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& out) {
  binary_map(g, x, out, SigmoidGate{});
}

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dout, const Tensor& dg,
                           const Tensor& dx) {
  cuda_dispatch_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = g.numel();
    launch_kernel<sigmoid_gate_backward_kernel<T>>(grid_for(n, kBlock), kBlock, 0, cuda_stream_of(g.device()),
        n, static_cast<const T*>(g.data_ptr()), static_cast<const T*>(x.data_ptr()),
        static_cast<const T*>(dout.data_ptr()), static_cast<T*>(dg.data_ptr()), static_cast<T*>(dx.data_ptr()));
    FC_CUDA_CHECK_LAUNCH();
  });
}

void bias_dropout_residual_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, float p,
                                   uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                                   const Tensor& out) {
  const DropoutParams d{p, dropout_scale(p), seed, offset, mask};
  const int64_t n = x.numel();
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto run = [&](auto otag) {
      using O = decltype(otag);
      launch_kernel<bias_dropout_residual_kernel<T, O>>(grid_for((n + 3) / 4, kBlock), kBlock, 0,
          cuda_stream_of(x.device()), n, x.size(-1), static_cast<const T*>(x.data_ptr()), ptr_or_null<T>(bias),
          ptr_or_null<O>(residual), static_cast<O*>(out.data_ptr()), d);
    };
    if (out.dtype() == x.dtype()) {
      run(T{});
    } else {
      run(float{});  // a 16-bit update into an fp32 stream (elementwise.cpp checked the mix)
    }
    FC_CUDA_CHECK_LAUNCH();
  });
}

void dropout_backward(const Tensor& dout, float p, uint64_t seed, uint64_t offset, const DropoutMaskDesc& mask,
                      const Tensor& dx) {
  const DropoutParams d{p, dropout_scale(p), seed, offset, mask};
  const int64_t n = dout.numel();
  cuda_dispatch_float(dx.dtype(), [&](auto tag) {
    using X = decltype(tag);
    const auto run = [&](auto dtag) {
      using T = decltype(dtag);
      launch_kernel<dropout_backward_kernel<T, X>>(grid_for((n + 3) / 4, kBlock), kBlock, 0,
          cuda_stream_of(dout.device()), n, static_cast<const T*>(dout.data_ptr()), static_cast<X*>(dx.data_ptr()), d);
    };
    if (dout.dtype() == dx.dtype()) {
      run(X{});
    } else {
      run(float{});  // the mixed forward's fp32 dout into a 16-bit dx
    }
    FC_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace foldcore::ops::cuda
