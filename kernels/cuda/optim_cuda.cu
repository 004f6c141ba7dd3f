// CUDA fused optimizer kernels. Element-wise updates are grid-stride loops over the flat buffer
// (or one block per chunk of the segment table when per-segment flags matter). Reductions are
// deterministic two-stage reductions: fixed partitions (chunks, or a grid size that depends only on
// n), a fixed-order block reduction in double, then a fixed-order combine, so the result never
// depends on scheduling or on the GPU model.
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/cuda/optim_cuda.h"
#include "kernels/optim_math.h"

namespace foldcore::ops::cuda {

namespace {

using detail::MomentCoeffs;

constexpr int kBlock = 256;  // threads per block in every kernel below (a multiple of 32)
constexpr int kWarps = kBlock / 32;
constexpr int kNormBlocksMax = 1024;     // stage-1 blocks of the global norm
constexpr int kNormElemsPerThread = 16;  // before the grid is capped

// Sum of `x` over the block in a fixed order (warp shuffle tree, then warp 0 over the warp sums).
// Returns the total in thread 0. `scratch` holds kWarps doubles.
__device__ double block_sum(double x, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  double total = 0;
  if (warp == 0) {
    total = lane < kWarps ? scratch[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) total += __shfl_down_sync(0xffffffffu, total, o);
  }
  __syncthreads();  // scratch may be reused by the caller
  return total;
}

__global__ void adam_flat_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                 float* __restrict__ v, int64_t n, MomentCoeffs c, float lr, float wd,
                                 bool decoupled) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float pi = p[i], mi = m[i], vi = v[i];
    detail::adam_element(pi, g[i], mi, vi, c, lr, wd, decoupled);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// One block per chunk: chunks[4k..4k+3] = begin, end, segment, decay flag.
__global__ void adam_chunk_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                  float* __restrict__ v, const int64_t* __restrict__ chunks, MomentCoeffs c,
                                  float lr, float wd, bool decoupled) {
  const int64_t* ch = chunks + 4 * static_cast<int64_t>(blockIdx.x);
  const int64_t end = ch[1];
  const float w = ch[3] ? wd : 0.f;
  for (int64_t i = ch[0] + threadIdx.x; i < end; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    detail::adam_element(pi, g[i], mi, vi, c, lr, w, decoupled);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// LAMB stage 1, one block per chunk: update the moments and write the chunk's partial ‖p‖², ‖u‖²
// (u = m̂/(√v̂+eps) + wd_s·p, old p) to partial[2k], partial[2k+1].
__global__ void lamb_moments_kernel(const float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                    float* __restrict__ v, const int64_t* __restrict__ chunks, MomentCoeffs c,
                                    float wd, double* __restrict__ partial) {
  FC_SHARED(double, scratch, [kWarps]);
  const int64_t* ch = chunks + 4 * static_cast<int64_t>(blockIdx.x);
  const int64_t end = ch[1];
  const float w = ch[3] ? wd : 0.f;
  double pp = 0, uu = 0;
  for (int64_t i = ch[0] + threadIdx.x; i < end; i += blockDim.x) {
    const float pi = p[i];
    float mi = m[i], vi = v[i];
    const float u = detail::update_moments(g[i] * c.grad_scale, mi, vi, c) + w * pi;
    m[i] = mi;
    v[i] = vi;
    pp += static_cast<double>(pi) * pi;
    uu += static_cast<double>(u) * u;
  }
  pp = block_sum(pp, scratch);
  uu = block_sum(uu, scratch);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = pp;
    partial[2 * blockIdx.x + 1] = uu;
  }
}

// LAMB stage 2, one warp per segment: sum its chunks' partials (lane-strided, then a shuffle tree)
// and write the trust ratio r_s. seg_chunks[2s..2s+1] = first chunk, chunk count.
__global__ void lamb_ratio_kernel(const double* __restrict__ partial, const int64_t* __restrict__ seg_chunks,
                                  int64_t num_segments, float* __restrict__ ratio) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (s >= num_segments) return;  // whole warps exit together: the shuffles below stay full-warp
  const int64_t first = seg_chunks[2 * s], count = seg_chunks[2 * s + 1];
  double pp = 0, uu = 0;
  for (int64_t k = first + lane; k < first + count; k += 32) {
    pp += partial[2 * k];
    uu += partial[2 * k + 1];
  }
  for (int o = 16; o > 0; o >>= 1) {
    pp += __shfl_down_sync(0xffffffffu, pp, o);
    uu += __shfl_down_sync(0xffffffffu, uu, o);
  }
  if (lane == 0) ratio[s] = detail::lamb_trust_ratio(pp, uu);
}

// LAMB stage 3, one block per chunk: p −= lr·r_s·u with u recomputed from the updated moments.
__global__ void lamb_update_kernel(float* __restrict__ p, const float* __restrict__ m, const float* __restrict__ v,
                                   const int64_t* __restrict__ chunks, const float* __restrict__ ratio,
                                   MomentCoeffs c, float lr, float wd) {
  const int64_t* ch = chunks + 4 * static_cast<int64_t>(blockIdx.x);
  const int64_t end = ch[1];
  const float w = ch[3] ? wd : 0.f;
  const float step = lr * ratio[ch[2]];
  for (int64_t i = ch[0] + threadIdx.x; i < end; i += blockDim.x) {
    const float u = detail::moment_direction(m[i], v[i], c) + w * p[i];
    p[i] = p[i] - step * u;
  }
}

// Global norm stage 1: block b sums g² over its grid-stride share into partial[b].
__global__ void sumsq_partial_kernel(const float* __restrict__ g, int64_t n, double* __restrict__ partial) {
  FC_SHARED(double, scratch, [kWarps]);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double s = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    s += static_cast<double>(g[i]) * g[i];  // exact: a float product fits in a double
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Global norm stage 2: one block combines the partials in a fixed order.
__global__ void sum_partials_kernel(const double* __restrict__ partial, int count, double* __restrict__ out) {
  FC_SHARED(double, scratch, [kWarps]);
  double s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

__global__ void ema_kernel(float* __restrict__ e, const float* __restrict__ p, int64_t n, float keep, float take) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    e[i] = keep * e[i] + take * p[i];
}

// Device scratch of `count` doubles. There is no f64 DType: i64 storage has the same size and
// alignment, and only these kernels read it.
Tensor double_scratch(int64_t count, Device d) { return Tensor::empty({count}, DType::i64, d); }
double* as_double(const Tensor& t) { return reinterpret_cast<double*>(t.data<int64_t>()); }

unsigned chunk_grid(const SegmentTable& t) {
  FC_CHECK(t.num_chunks() <= 0x7fffffff, "optimizer: too many chunks (", t.num_chunks(), ") for one launch");
  return static_cast<unsigned>(t.num_chunks());
}

}  // namespace

void adam_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const AdamArgs& a,
               const SegmentTable& segments) {
  set_device(params.device());
  const cudaStream_t stream = cuda_stream_of(params.device());
  const MomentCoeffs c =
      detail::make_moment_coeffs(a.beta1, a.beta2, a.eps, a.grad_scale, a.step, a.bias_correction);
  if (segments.empty()) {
    const int64_t n = params.numel();
    launch_kernel<adam_flat_kernel>(grid_for(n, kBlock), kBlock, 0, stream, params.data<float>(), grads.data<float>(),
                                                                  m.data<float>(), v.data<float>(), n, c, a.lr,
                                                                  a.weight_decay, a.decoupled);
  } else {
    if (segments.num_chunks() == 0) return;
    launch_kernel<adam_chunk_kernel>(chunk_grid(segments), kBlock, 0, stream,
        params.data<float>(), grads.data<float>(), m.data<float>(), v.data<float>(),
        segments.chunks().data<int64_t>(), c, a.lr, a.weight_decay, a.decoupled);
  }
  FC_CUDA_CHECK_LAUNCH();
}

void lamb_step(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v, const LambArgs& a,
               const SegmentTable& segments) {
  const Device dev = params.device();
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);
  const MomentCoeffs c =
      detail::make_moment_coeffs(a.beta1, a.beta2, a.eps, a.grad_scale, a.step, a.bias_correction);
  const int64_t ns = static_cast<int64_t>(segments.segments().size());
  const Tensor partial = double_scratch(2 * segments.num_chunks(), dev);
  const Tensor ratio = Tensor::empty({ns}, DType::f32, dev);
  const int64_t* chunks = segments.chunks().data<int64_t>();

  launch_kernel<lamb_moments_kernel>(chunk_grid(segments), kBlock, 0, stream, params.data<float>(), grads.data<float>(),
                                                                    m.data<float>(), v.data<float>(), chunks, c,
                                                                    a.weight_decay, as_double(partial));
  FC_CUDA_CHECK_LAUNCH();
  const auto ratio_blocks = static_cast<unsigned>((ns + kWarps - 1) / kWarps);
  launch_kernel<lamb_ratio_kernel>(ratio_blocks, kBlock, 0, stream, as_double(partial),
                                                          segments.segment_chunks().data<int64_t>(), ns,
                                                          ratio.data<float>());
  FC_CUDA_CHECK_LAUNCH();
  launch_kernel<lamb_update_kernel>(chunk_grid(segments), kBlock, 0, stream, params.data<float>(), m.data<float>(),
                                                                   v.data<float>(), chunks, ratio.data<float>(), c,
                                                                   a.lr, a.weight_decay);
  FC_CUDA_CHECK_LAUNCH();
}

double global_grad_norm(const Tensor& grads) {
  const Device dev = grads.device();
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);
  const int64_t n = grads.numel();
  // The partition depends on n only (not on the device), so the sum is reproducible everywhere.
  const int64_t per_block = static_cast<int64_t>(kBlock) * kNormElemsPerThread;
  const int blocks = static_cast<int>(std::min<int64_t>((n + per_block - 1) / per_block, kNormBlocksMax));
  const Tensor partial = double_scratch(blocks + 1, dev);
  double* part = as_double(partial);
  launch_kernel<sumsq_partial_kernel>(blocks, kBlock, 0, stream, grads.data<float>(), n, part);
  FC_CUDA_CHECK_LAUNCH();
  launch_kernel<sum_partials_kernel>(1, kBlock, 0, stream, part, blocks, part + blocks);
  FC_CUDA_CHECK_LAUNCH();
  double total = 0;
  FC_CUDA_CHECK(cudaMemcpyAsync(&total, part + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  FC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(total);
}

void ema_update(const Tensor& ema, const Tensor& params, float decay) {
  set_device(params.device());
  const cudaStream_t stream = cuda_stream_of(params.device());
  const int64_t n = params.numel();
  launch_kernel<ema_kernel>(grid_for(n, kBlock), kBlock, 0, stream, ema.data<float>(), params.data<float>(), n, decay,
                                                          1.f - decay);
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace foldcore::ops::cuda
