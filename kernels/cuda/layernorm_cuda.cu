// CUDA LayerNorm.
//  forward / dx: one warp per row (C ≤ 1024) or one block per row, fp32 statistics in two passes
//    (mean, then Σ(x−mean)²) over a row that stays in L1/L2, 16-byte vector loads when aligned.
//  dgamma/dbeta: deterministic two-stage column reduction: stage 1 tiles [32 columns × a chunk of
//    rows] per block and writes per-chunk partial sums to scratch; stage 2 sums the chunks in
//    order and accumulates (+=) into dgamma/dbeta. No atomics, same bits every run.
#include "kernels/cuda/layernorm_cuda.h"

#include <algorithm>

#include "core/cuda/cuda_utils.cuh"
#include "kernels/cuda/softmax_row_reduce.cuh"

namespace foldcore::ops::cuda {
namespace {

template <typename T, int G, int V>
__global__ void ln_forward_kernel(const T* __restrict__ x, const float* __restrict__ gamma,
                                  const float* __restrict__ beta, float eps, T* __restrict__ y, float* mean,
                                  float* rstd, int64_t rows, int c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  const int tid = threadIdx.x % G;
  if (row >= rows) return;  // uniform per group (G = block only when grid == rows)
  const T* xr = x + row * c;
  float s = 0.f;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_pack<T, V>(xr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) s += to_f32(v.v[e]);
  }
  const float mu = group_reduce<G>(s, SumOp{}) / static_cast<float>(c);
  float q = 0.f;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_pack<T, V>(xr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float d = to_f32(v.v[e]) - mu;
      q += d * d;
    }
  }
  const float rs = rsqrtf(group_reduce<G>(q, SumOp{}) / static_cast<float>(c) + eps);
  T* yr = y + row * c;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_pack<T, V>(xr + j);
    Pack<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<T>((to_f32(v.v[e]) - mu) * rs * gamma[j + e] + beta[j + e]);
    store_pack<T, V>(yr + j, o);
  }
  if (tid == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx[r,c] = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)),  ĝ = dy·gamma.
template <typename T, int G, int V>
__global__ void ln_backward_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const float* __restrict__ gamma, const float* __restrict__ mean,
                                      const float* __restrict__ rstd, T* __restrict__ dx, int64_t rows, int c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  const int tid = threadIdx.x % G;
  if (row >= rows) return;
  const T* xr = x + row * c;
  const T* dyr = dy + row * c;
  const float mu = mean[row], rs = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int j = tid * V; j < c; j += G * V) {
    const auto xv = load_pack<T, V>(xr + j);
    const auto dv = load_pack<T, V>(dyr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float g = to_f32(dv.v[e]) * gamma[j + e];
      sg += g;
      sgx += g * (to_f32(xv.v[e]) - mu) * rs;
    }
  }
  const float inv_c = 1.f / static_cast<float>(c);
  const float mg = group_reduce<G>(sg, SumOp{}) * inv_c;
  const float mgx = group_reduce<G>(sgx, SumOp{}) * inv_c;
  T* dxr = dx + row * c;
  for (int j = tid * V; j < c; j += G * V) {
    const auto xv = load_pack<T, V>(xr + j);
    const auto dv = load_pack<T, V>(dyr + j);
    Pack<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float xh = (to_f32(xv.v[e]) - mu) * rs;
      o.v[e] = from_f32<T>(rs * (to_f32(dv.v[e]) * gamma[j + e] - mg - xh * mgx));
    }
    store_pack<T, V>(dxr + j, o);
  }
}

constexpr int kColTile = 32, kRowThreads = 8;

// Stage 1: block (blockIdx.x, blockIdx.y) sums dy·x̂ and dy over rows of chunk blockIdx.y for 32
// columns; partial layout [2][chunks][c].
template <typename T>
__global__ void ln_param_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                        float* __restrict__ partial, int64_t rows, int c, int64_t rows_per_chunk) {
  __shared__ float sg[kRowThreads][kColTile + 1], sb[kRowThreads][kColTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * kColTile + tx;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ag = 0.f, ab = 0.f;
  if (col < c) {
    for (int64_t r = r0 + ty; r < r1; r += kRowThreads) {
      const float d = to_f32(dy[r * c + col]);
      ag += d * (to_f32(x[r * c + col]) - mean[r]) * rstd[r];
      ab += d;
    }
  }
  sg[ty][tx] = ag;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && col < c) {
    for (int k = 1; k < kRowThreads; ++k) {
      ag += sg[k][tx];
      ab += sb[k][tx];
    }
    const int64_t chunks = gridDim.y;
    partial[blockIdx.y * static_cast<int64_t>(c) + col] = ag;
    partial[(chunks + blockIdx.y) * static_cast<int64_t>(c) + col] = ab;
  }
}

// Stage 2: dgamma[c] += Σ_chunk partial[0][chunk][c]; dbeta likewise, chunks in order.
__global__ void ln_param_final_kernel(const float* __restrict__ partial, int chunks, int c, float* dgamma,
                                      float* dbeta) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= c) return;
  float g = 0.f, b = 0.f;
  for (int k = 0; k < chunks; ++k) {
    g += partial[static_cast<int64_t>(k) * c + col];
    b += partial[static_cast<int64_t>(chunks + k) * c + col];
  }
  dgamma[col] += g;
  dbeta[col] += b;
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  FC_CHECK(c < (1ll << 31), "layernorm_forward (cuda): row length ", c, " too large");
  set_device(x.device());
  const cudaStream_t stream = cuda_stream_of(x.device());
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool aligned = can_vectorise(c, sizeof(T), {x.data_ptr(), y.data_ptr(), gamma.data_ptr(), beta.data_ptr()});
    row_switch<T>(c, aligned, [&](auto g, auto v) {
      constexpr int G = decltype(g)::value, V = decltype(v)::value;
      ln_forward_kernel<T, G, V><<<row_blocks<G>(rows), kRowBlock, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), gamma.data<float>(), beta.data<float>(), eps,
          static_cast<T*>(y.data_ptr()), mean.data<float>(), rstd.data<float>(), rows, static_cast<int>(c));
      FC_CUDA_CHECK_LAUNCH();
    });
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, int64_t rows,
                        int64_t c) {
  FC_CHECK(c < (1ll << 31), "layernorm_backward (cuda): row length ", c, " too large");
  const Device dev = x.device();
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);
  // Chunks of ≥ 64 rows, at most 512 of them: enough blocks to fill the GPU for narrow C while
  // keeping stage 2 (chunks × C reads) cheap.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(512, rows / 64));
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  Tensor partial = Tensor::empty({2 * chunks * c}, DType::f32, dev);
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* dyp = static_cast<const T*>(dy.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const bool aligned = can_vectorise(c, sizeof(T), {dy.data_ptr(), x.data_ptr(), dx.data_ptr(), gamma.data_ptr()});
    row_switch<T>(c, aligned, [&](auto g, auto v) {
      constexpr int G = decltype(g)::value, V = decltype(v)::value;
      ln_backward_dx_kernel<T, G, V><<<row_blocks<G>(rows), kRowBlock, 0, stream>>>(
          dyp, xp, gamma.data<float>(), mean.data<float>(), rstd.data<float>(), static_cast<T*>(dx.data_ptr()), rows,
          static_cast<int>(c));
      FC_CUDA_CHECK_LAUNCH();
    });
    const dim3 grid(static_cast<unsigned>((c + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
    ln_param_partial_kernel<T><<<grid, dim3(kColTile, kRowThreads), 0, stream>>>(
        dyp, xp, mean.data<float>(), rstd.data<float>(), partial.data<float>(), rows, static_cast<int>(c),
        rows_per_chunk);
    FC_CUDA_CHECK_LAUNCH();
  });
  ln_param_final_kernel<<<static_cast<unsigned>((c + 255) / 256), 256, 0, stream>>>(
      partial.data<float>(), static_cast<int>(chunks), static_cast<int>(c), dgamma.data<float>(), dbeta.data<float>());
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace foldcore::ops::cuda
