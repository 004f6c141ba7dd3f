// CUDA softmax and fused softmax cross-entropy: one warp per row (C ≤ 1024) or one block per row
// (e.g. BERT's 30522-way vocabulary), fp32 math, deterministic fixed-order reductions
// (softmax_row_reduce.cuh), 16-byte vector loads for softmax when rows are aligned.
#include "kernels/cuda/softmax_cuda.h"

#include <cmath>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/cuda/softmax_row_reduce.cuh"

namespace foldcore::ops::cuda {
namespace {

template <typename T, int G, int V>
__global__ void softmax_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  const int tid = threadIdx.x % G;
  if (row >= rows) return;
  const T* xr = x + row * c;
  float m = -INFINITY;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_vec<T, V>(xr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) m = fmaxf(m, to_f32(v.v[e]));
  }
  m = group_reduce<G>(m, MaxOp{});
  float s = 0.f;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_vec<T, V>(xr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) s += __expf(to_f32(v.v[e]) - m);
  }
  const float inv = 1.f / group_reduce<G>(s, SumOp{});
  T* yr = y + row * c;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_vec<T, V>(xr + j);
    VecOf<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<T>(__expf(to_f32(v.v[e]) - m) * inv);
    store_vec<T, V>(yr + j, o);
  }
}

// dx = y ⊙ (dy − Σ dy·y)
template <typename T, int G, int V>
__global__ void softmax_backward_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                        int64_t rows, int c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  const int tid = threadIdx.x % G;
  if (row >= rows) return;
  const T* yr = y + row * c;
  const T* dyr = dy + row * c;
  float dot = 0.f;
  for (int j = tid * V; j < c; j += G * V) {
    const auto yv = load_vec<T, V>(yr + j);
    const auto dv = load_vec<T, V>(dyr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) dot += to_f32(yv.v[e]) * to_f32(dv.v[e]);
  }
  dot = group_reduce<G>(dot, SumOp{});
  T* dxr = dx + row * c;
  for (int j = tid * V; j < c; j += G * V) {
    const auto yv = load_vec<T, V>(yr + j);
    const auto dv = load_vec<T, V>(dyr + j);
    VecOf<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<T>(to_f32(yv.v[e]) * (to_f32(dv.v[e]) - dot));
    store_vec<T, V>(dxr + j, o);
  }
}

// loss[r] = w·(Σt·lse − Σ t·x);  dlogits = w·dscale·(softmax·Σt − t). labels (L) or targets (TT).
template <typename T, typename TT, typename L, int G>
__global__ void cross_entropy_kernel(const T* __restrict__ x, const L* __restrict__ labels,
                                     const TT* __restrict__ targets, const float* __restrict__ weights, float dscale,
                                     float* __restrict__ loss, T* __restrict__ dlogits, int64_t rows, int c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  const int tid = threadIdx.x % G;
  if (row >= rows) return;
  const T* xr = x + row * c;
  T* dr = dlogits ? dlogits + row * c : nullptr;
  const int64_t label = labels ? static_cast<int64_t>(labels[row]) : 0;
  if (labels && label < 0) {  // ignored row: zero loss and gradient
    if (tid == 0) loss[row] = 0.f;
    if (dr)
      for (int j = tid; j < c; j += G) dr[j] = from_f32<T>(0.f);
    return;
  }
  float m = -INFINITY;
  for (int j = tid; j < c; j += G) m = fmaxf(m, to_f32(xr[j]));
  m = group_reduce<G>(m, MaxOp{});
  float s = 0.f, st = 0.f, stx = 0.f;
  for (int j = tid; j < c; j += G) {
    const float v = to_f32(xr[j]);
    s += __expf(v - m);
    if (!labels) {
      const float t = to_f32(targets[row * c + j]);
      st += t;
      stx += t * v;
    }
  }
  const float lse = m + __logf(group_reduce<G>(s, SumOp{}));
  if (labels) {
    st = 1.f;
    // Out-of-range labels are not checked on the device: they give a NaN loss (see softmax.h).
    stx = label < c ? to_f32(xr[label]) : NAN;
  } else {
    st = group_reduce<G>(st, SumOp{});
    stx = group_reduce<G>(stx, SumOp{});
  }
  const float w = weights ? weights[row] : 1.f;
  if (tid == 0) loss[row] = w * (st * lse - stx);
  if (!dr) return;
  const float g = w * dscale;
  for (int j = tid; j < c; j += G) {
    const float p = __expf(to_f32(xr[j]) - lse);
    const float t = labels ? (j == label ? 1.f : 0.f) : to_f32(targets[row * c + j]);
    dr[j] = from_f32<T>(g * (p * st - t));
  }
}

template <typename T, typename TT, typename L>
void launch_ce(const T* x, const L* labels, const TT* targets, const float* w, float dscale, float* loss, T* dl,
               int64_t rows, int64_t c, cudaStream_t stream) {
  if (c <= kWarpRowMax) {
    launch_kernel<cross_entropy_kernel<T, TT, L, 32>>(row_blocks<32>(rows), kRowBlock, 0, stream,
        x, labels, targets, w, dscale, loss, dl, rows, static_cast<int>(c));
  } else {
    launch_kernel<cross_entropy_kernel<T, TT, L, kRowBlock>>(row_blocks<kRowBlock>(rows), kRowBlock, 0, stream,
        x, labels, targets, w, dscale, loss, dl, rows, static_cast<int>(c));
  }
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, int64_t rows, int64_t c) {
  FC_CHECK(c < (1ll << 31), "softmax_forward (cuda): row length ", c, " too large");
  set_device(x.device());
  const cudaStream_t stream = cuda_stream_of(x.device());
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    row_switch<T>(c, can_vectorise(c, sizeof(T), {x.data_ptr(), y.data_ptr()}), [&](auto g, auto v) {
      constexpr int G = decltype(g)::value, V = decltype(v)::value;
      launch_kernel<softmax_forward_kernel<T, G, V>>(row_blocks<G>(rows), kRowBlock, 0, stream,
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), rows, static_cast<int>(c));
      FC_CUDA_CHECK_LAUNCH();
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t rows, int64_t c) {
  FC_CHECK(c < (1ll << 31), "softmax_backward (cuda): row length ", c, " too large");
  set_device(y.device());
  const cudaStream_t stream = cuda_stream_of(y.device());
  cuda_dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    row_switch<T>(c, can_vectorise(c, sizeof(T), {y.data_ptr(), dy.data_ptr(), dx.data_ptr()}), [&](auto g, auto v) {
      constexpr int G = decltype(g)::value, V = decltype(v)::value;
      launch_kernel<softmax_backward_kernel<T, G, V>>(row_blocks<G>(rows), kRowBlock, 0, stream,
          static_cast<const T*>(y.data_ptr()), static_cast<const T*>(dy.data_ptr()), static_cast<T*>(dx.data_ptr()),
          rows, static_cast<int>(c));
      FC_CUDA_CHECK_LAUNCH();
    });
  });
}

void softmax_cross_entropy(const Tensor& logits, const CrossEntropyArgs& args, const Tensor& loss,
                           const Tensor& dlogits, int64_t rows, int64_t c) {
  FC_CHECK(c < (1ll << 31), "softmax_cross_entropy (cuda): row length ", c, " too large");
  set_device(logits.device());
  const cudaStream_t stream = cuda_stream_of(logits.device());
  const float* w = args.weights.defined() ? args.weights.data<float>() : nullptr;
  float* lp = loss.data<float>();
  cuda_dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits.data_ptr());
    T* dl = dlogits.defined() ? static_cast<T*>(dlogits.data_ptr()) : nullptr;
    if (args.labels.defined()) {
      if (args.labels.dtype() == DType::i32)
        launch_ce<T, float>(x, args.labels.data<int32_t>(), nullptr, w, args.dscale, lp, dl, rows, c, stream);
      else
        launch_ce<T, float>(x, args.labels.data<int64_t>(), nullptr, w, args.dscale, lp, dl, rows, c, stream);
    } else if (args.targets.dtype() == DType::f32) {
      launch_ce<T, float, int32_t>(x, nullptr, args.targets.data<float>(), w, args.dscale, lp, dl, rows, c, stream);
    } else {
      launch_ce<T, T, int32_t>(x, nullptr, static_cast<const T*>(args.targets.data_ptr()), w, args.dscale, lp, dl,
                               rows, c, stream);
    }
  });
}

}  // namespace foldcore::ops::cuda
