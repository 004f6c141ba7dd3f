// CUDA reductions. Every path has a fixed summation order that depends only on the sizes
// (grid shapes are computed from the sizes, never from the device), so results are
// bit-reproducible run to run. fp32 accumulation.
//   [R, K] (reduced axes lead; bias gradients): stage 1 sums row slabs of 32 columns per block
//     into an [S, K] workspace, stage 2 sums the S slabs of each column in order.
//   [K, R] (reduced axes trail): one block per (row, chunk) with a fixed tree, then the chunks of
//     each row in order.
//   anything else: one thread per output, serial over the reduced elements.
// sum_squares / max_abs: fixed-size grid of block partials copied to the host and combined there
// in double (synchronising).
#include "kernels/cuda/reduce_cuda.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cuda/block_counters.cuh"
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vec.cuh"
#include "kernels/cuda/activation_math.cuh"
#include "kernels/reduce.h"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;

template <typename TO>
__device__ __forceinline__ void store_out(TO* out, int64_t o, float sum, float scale, bool accumulate) {
  float v = scale * sum;
  if (accumulate) v += to_f32(out[o]);
  out[o] = from_f32<TO>(v);
}

// Block-wide sum with a fixed tree (warp shuffles, then warp 0 over the warp totals). All
// threads must call it; the result is valid in thread 0.
__device__ __forceinline__ float block_sum(float v) {
  FC_SHARED(float, warp_sums, [kWarps]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = threadIdx.x < kWarps ? warp_sums[threadIdx.x] : 0.f;
  if (warp == 0) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

// NaN-propagating max (fmaxf would drop NaNs, hiding overflow in gradient clipping).
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

__device__ __forceinline__ float block_max(float v) {
  FC_SHARED(float, warp_max, [kWarps]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = threadIdx.x < kWarps ? warp_max[threadIdx.x] : 0.f;
  if (warp == 0) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_down_sync(0xffffffffu, v, o));
  }
  return v;
}

// ---- [R, K]: column sums ----
constexpr int kColTile = 32, kRowLanes = 8;

// The end of a column-sum block (every thread calls it; `active` threads hold column col's sum s
// over their split): one split (S == 1) writes out directly; else each writes ws[s·K + col], and
// the last split of a column tile to finish (block_counters.cuh) adds the tile's S partials in
// order of s into out.
template <typename TO>
__device__ __forceinline__ void finish_column_sums(bool active, int64_t col, float s, int64_t k, float* ws, TO* out,
                                                   float scale, bool accumulate, unsigned* counters) {
  // Batch blockIdx.z (grid z > 1: one [R, K] problem per z, one after another in x, out, the
  // partials and the counters).
  out += static_cast<int64_t>(blockIdx.z) * k;
  if (gridDim.y > 1) {
    ws += static_cast<int64_t>(blockIdx.z) * gridDim.y * k;
    counters += static_cast<int64_t>(blockIdx.z) * gridDim.x;
  }
  if (active) {
    if (gridDim.y == 1)
      store_out(out, col, s, scale, accumulate);
    else
      ws[static_cast<int64_t>(blockIdx.y) * k + col] = s;
  }
  if (gridDim.y == 1 || !last_block_of_group(&counters[blockIdx.x], gridDim.y)) return;
  if (active) {
    float total = 0.f;
    for (unsigned j = 0; j < gridDim.y; ++j) total += read_partial(&ws[static_cast<int64_t>(j) * k + col]);
    store_out(out, col, total, scale, accumulate);
  }
}

// Block (32, 8), grid (ceil(K/32), S): split s sums rows [s·rps, (s+1)·rps) of 32 columns, then
// finish_column_sums.
template <typename TX, typename TO>
__global__ void col_sum_kernel(const TX* x, int64_t r, int64_t k, int64_t rows_per_split, float* ws, TO* out,
                               float scale, bool accumulate, unsigned* counters) {
  FC_SHARED(float, tile, [kRowLanes][kColTile + 1]);
  x += static_cast<int64_t>(blockIdx.z) * r * k;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r1 = min(r, r0 + rows_per_split);
  float acc = 0.f;
  if (col < k)
    for (int64_t row = r0 + threadIdx.y; row < r1; row += kRowLanes) acc += to_f32(x[row * k + col]);
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  const bool active = threadIdx.y == 0 && col < k;
  float s = 0.f;
  if (active) {
    FC_UNROLL
    for (int j = 0; j < kRowLanes; ++j) s += tile[j][threadIdx.x];
  }
  finish_column_sums(active, col, s, k, ws, out, scale, accumulate, counters);
}

// What col_sum_vec_kernel sums, V elements at a time from flat index i: x's elements (PlainRows),
// or dx = act'(in) ⊙ dy, stored into dx as it is made (ActGradRows: an activation's backward and
// its bias gradient in one pass, the bits of the elementwise backward map and a column sum of its
// output).
template <typename TX, int V> struct PlainRows {
  const TX* x;
  __device__ __forceinline__ VecOf<TX, V> load(int64_t i) const { return load_vec<TX, V>(x + i); }
};
template <typename TX, int V, typename Act> struct ActGradRows {
  const TX* in;
  const TX* dy;
  TX* dx;
  Act act;
  __device__ __forceinline__ VecOf<TX, V> load(int64_t i) const {
    const VecOf<TX, V> a = load_vec<TX, V>(in + i), g = load_vec<TX, V>(dy + i);
    VecOf<TX, V> d;
    FC_UNROLL
    for (int e = 0; e < V; ++e) {
      const float v[2] = {to_f32(a.v[e]), to_f32(g.v[e])};
      d.v[e] = from_f32<TX>(act(v, 0));
    }
    store_vec<TX, V>(dx + i, d);
    return d;
  }
};

// The same sums 16 bytes per load (V = 16 / sizeof(TX) columns per thread), for K % V == 0 and
// 16-byte aligned rows (src.load): block (16 column groups, 16 row lanes) covers 16·V columns;
// thread (cg, rl) sums columns [c0, c0 + V), c0 = (blockIdx.x·16 + cg)·V, over rows r0 + rl,
// r0 + rl + 16, … of split blockIdx.y, four rows in flight (four accumulators, added in order at
// the end); the row lanes' sums are added in order of rl through shared memory by thread
// (cg, rl < V) for column c0 + rl, then finish_column_sums. A fixed order from the sizes: the same
// bits every run (not col_sum_kernel's order).
constexpr int kVecGroups = 16, kVecLanes = 16, kVecUnroll = 4;

template <typename TX, typename TO, typename Src>
__global__ void col_sum_vec_kernel(Src src, int64_t r, int64_t k, int64_t rows_per_split, float* ws, TO* out,
                                   float scale, bool accumulate, unsigned* counters) {
  constexpr int V = 16 / static_cast<int>(sizeof(TX));
  FC_SHARED(float, part, [kVecLanes][kVecGroups * V + 1]);
  const int64_t base = static_cast<int64_t>(blockIdx.z) * r * k;
  const int cg = threadIdx.x, rl = threadIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kVecGroups + cg) * V;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r1 = min(r, r0 + rows_per_split);
  float acc[kVecUnroll][V] = {};
  if (c0 < k) {
    int64_t row = r0 + rl;
    for (; row + (kVecUnroll - 1) * kVecLanes < r1; row += kVecUnroll * kVecLanes) {
      VecOf<TX, V> vs[kVecUnroll];
      FC_UNROLL
      for (int u = 0; u < kVecUnroll; ++u) vs[u] = src.load(base + (row + u * kVecLanes) * k + c0);
      FC_UNROLL
      for (int u = 0; u < kVecUnroll; ++u)
        FC_UNROLL
        for (int e = 0; e < V; ++e) acc[u][e] += to_f32(vs[u].v[e]);
    }
    for (; row < r1; row += kVecLanes) {  // the split's last rows (fewer than kVecUnroll per lane)
      const VecOf<TX, V> v = src.load(base + row * k + c0);
      FC_UNROLL
      for (int e = 0; e < V; ++e) acc[0][e] += to_f32(v.v[e]);
    }
  }
  FC_UNROLL
  for (int e = 0; e < V; ++e) {
    float s = acc[0][e];
    FC_UNROLL
    for (int u = 1; u < kVecUnroll; ++u) s += acc[u][e];
    part[rl][cg * V + e] = s;
  }
  __syncthreads();
  // Thread (cg, rl) for rl < V finishes column c0 + rl: the 16 row lanes' sums in order.
  const bool active = rl < V && c0 < k;
  float s = 0.f;
  if (active)
    for (int j = 0; j < kVecLanes; ++j) s += part[j][cg * V + rl];
  finish_column_sums(active, c0 + rl, s, k, ws, out, scale, accumulate, counters);
}

// out[o] (+)= scale · Σ_{s<S} ws[s·stride_s + o·stride_o], in order of s.
template <typename TO>
__global__ void combine_partials(const float* ws, int64_t k, int64_t splits, int64_t stride_s, int64_t stride_o,
                                 TO* out, float scale, bool accumulate) {
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < k;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int64_t j = 0; j < splits; ++j) s += ws[j * stride_s + o * stride_o];
    store_out(out, o, s, scale, accumulate);
  }
}

// ---- [K, R]: row sums; grid (K, S), block kBlock; chunk s of row o covers [s·cps, (s+1)·cps) ----
template <typename TX, typename TO>
__global__ void row_sum_kernel(const TX* x, int64_t r, int64_t chunk, float* ws, TO* out, float scale,
                               bool accumulate) {
  const int64_t o = blockIdx.x;
  const TX* row = x + o * r;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t c1 = min(r, c0 + chunk);
  float acc = 0.f;
  for (int64_t j = c0 + threadIdx.x; j < c1; j += kBlock) acc += to_f32(row[j]);
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    if (gridDim.y == 1)
      store_out(out, o, acc, scale, accumulate);
    else
      ws[o * gridDim.y + blockIdx.y] = acc;
  }
}

// ---- general: one thread per output ----
template <typename TX, typename TO>
__global__ void general_sum_kernel(const TX* x, StridedDesc kept, StridedDesc red, int64_t k, int64_t r, TO* out,
                                   float scale, bool accumulate) {
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < k;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const TX* base = x + kept.offset_of(o);
    float acc = 0.f;
    for (int64_t j = 0; j < r; ++j) acc += to_f32(base[red.offset_of(j)]);
    store_out(out, o, acc, scale, accumulate);
  }
}

StridedDesc desc_of(const ReduceGroup& g) {
  StridedDesc d{};
  d.ndim = g.ndim;
  for (int i = 0; i < g.ndim; ++i) {
    d.shape[i] = g.shape[i];
    d.strides[i] = g.strides[i];
  }
  return d;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The row splits of the column sums of an [R, K]: from R alone, ≥ 256 rows per split, at most 256
// (vector form) or 128 splits.
int64_t column_splits(int64_t r, bool vec) { return std::clamp<int64_t>(ceil_div(r, 256), 1, vec ? 256 : 128); }

// Column sums of `batches` row-major [R, K] problems one after another in x (out [batches, K]), one
// launch: grid (column tiles, row splits, batches). Each batch sums as a launch of its own would.
// src: what the vector form reads (PlainRows of x, or ActGradRows); the element form reads px.
template <typename TX, typename TO, typename Src>
void column_sums(const Src& src, const TX* px, bool vec, int64_t r, int64_t k, int64_t batches, TO* po, float scale,
                 bool accumulate, Device dev) {
  cudaStream_t stream = cuda_stream_of(dev);
  const int64_t splits = column_splits(r, vec);
  const int64_t rps = ceil_div(r, splits);
  Tensor ws;
  if (splits > 1) ws = Tensor::empty({batches * splits, k}, DType::f32, dev);
  float* pws = splits > 1 ? ws.data<float>() : nullptr;
  constexpr int64_t kV = 16 / static_cast<int64_t>(sizeof(TX));
  const dim3 grid(static_cast<unsigned>(ceil_div(k, vec ? kVecGroups * kV : kColTile)), static_cast<unsigned>(splits),
                  static_cast<unsigned>(batches));
  FC_CHECK(grid.x <= 0x7fffffffu && batches <= 65535, "sum: ", k, " columns × ", batches, " batches exceed the CUDA grid");
  unsigned* counters = splits > 1 ? block_counters(dev, static_cast<int64_t>(grid.x) * batches) : nullptr;
  if (vec) {
    launch_kernel<col_sum_vec_kernel<TX, TO, Src>>(grid, dim3(kVecGroups, kVecLanes), 0, stream, src, r, k, rps, pws, po,
                                                   scale, accumulate, counters);
  } else {
    launch_kernel<col_sum_kernel<TX, TO>>(grid, dim3(kColTile, kRowLanes), 0, stream, px, r, k, rps, pws, po, scale,
                                          accumulate, counters);
  }
  FC_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The column sums of x: 16 bytes per load where K and the pointer allow (col_sum_vec_kernel), else
// one element.
template <typename TX, typename TO>
void column_sums(const TX* px, int64_t r, int64_t k, int64_t batches, TO* po, float scale, bool accumulate, Device dev) {
  constexpr int kV = 16 / static_cast<int>(sizeof(TX));
  const bool vec = col_sum_vec() && k % kV == 0 && aligned16(px);
  column_sums(PlainRows<TX, kV>{px}, px, vec, r, k, batches, po, scale, accumulate, dev);
}

}  // namespace

void reduce_sum(const Tensor& x, const ReducePlan& plan, float scale, bool accumulate, const Tensor& out) {
  const int64_t k = plan.kept.numel(), r = plan.reduced.numel();
  cudaStream_t stream = cuda_stream_of(x.device());
  cuda_dispatch_float(x.dtype(), [&](auto xtag) {
    using TX = decltype(xtag);
    cuda_dispatch_float(out.dtype(), [&](auto otag) {
      using TO = decltype(otag);
      const TX* px = static_cast<const TX*>(x.data_ptr());
      TO* po = static_cast<TO*>(out.data_ptr());
      if (plan.layout == ReducePlan::kReducedOuter && r > 0) {
        column_sums(px, r, k, 1, po, scale, accumulate, x.device());
      } else if (plan.layout == ReducePlan::kReducedInner && r >= 64) {  // short rows: thread per output
        // Chunks of ≥ 16384 elements per block, at most 64 per row (only long rows are split).
        const int64_t splits = std::clamp<int64_t>(ceil_div(r, 16384), 1, 64);
        const int64_t chunk = ceil_div(r, splits);
        FC_CHECK(k < (int64_t{1} << 31), "sum: ", k, " output rows exceed the CUDA grid");
        Tensor ws;
        if (splits > 1) ws = Tensor::empty({k, splits}, DType::f32, x.device());
        float* pws = splits > 1 ? ws.data<float>() : nullptr;
        launch_kernel<row_sum_kernel<TX, TO>>(dim3(static_cast<unsigned>(k), static_cast<unsigned>(splits)), kBlock, 0, stream, px, r, chunk, pws, po, scale, accumulate);
        FC_CUDA_CHECK_LAUNCH();
        if (splits > 1) {
          launch_kernel<combine_partials<TO>>(grid_for(k, kBlock), kBlock, 0, stream, pws, k, splits, 1, splits, po, scale,
                                                                             accumulate);
          FC_CUDA_CHECK_LAUNCH();
        }
      } else {
        launch_kernel<general_sum_kernel<TX, TO>>(grid_for(k, kBlock), kBlock, 0, stream,
            px, desc_of(plan.kept), desc_of(plan.reduced), k, r, po, scale, accumulate);
        FC_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

void reduce_sum_batched(const Tensor& x, const ReducePlan& plan, int64_t batches, const Tensor& out) {
  FC_CHECK(plan.layout == ReducePlan::kReducedOuter, "reduce_sum_batched: each batch must be a row-major [R, K]");
  const int64_t k = plan.kept.numel(), r = plan.reduced.numel();
  cuda_dispatch_float(x.dtype(), [&](auto xtag) {
    using TX = decltype(xtag);
    column_sums(static_cast<const TX*>(x.data_ptr()), r, k, batches, out.data<float>(), 1.f, true, x.device());
  });
}

bool activation_backward_sum_rows(Activation act, const Tensor& in, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dbias) {
  const int64_t k = dx.size(-1), r = k > 0 ? dx.numel() / k : 0;
  bool done = false;
  cuda_dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = 16 / static_cast<int>(sizeof(T));
    if (!col_sum_vec() || k % kV != 0 || r == 0 || !aligned16(in.data_ptr()) || !aligned16(dy.data_ptr()) ||
        !aligned16(dx.data_ptr()))
      return;
    const T* pin = static_cast<const T*>(in.data_ptr());
    const T* pdy = static_cast<const T*>(dy.data_ptr());
    T* pdx = static_cast<T*>(dx.data_ptr());
    const auto sums = [&](auto act_bwd) {
      column_sums(ActGradRows<T, kV, decltype(act_bwd)>{pin, pdy, pdx, act_bwd}, pdx, true, r, k, 1,
                  dbias.data<float>(), 1.f, true, dx.device());
    };
    if (act == Activation::relu) sums(ReluBwd{});
    else sums(GeluBwd{});
    done = true;
  });
  return done;
}

namespace {

// Per-block partial Σ x² (kSquares) or max |x| over a grid-stride range; contiguous or strided x.
enum class Stat { kSquares, kMaxAbs };

template <typename T, Stat S, bool kContig>
__global__ void stat_partials(const T* x, StridedDesc d, int64_t n, float* partials) {
  float acc = 0.f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_f32(x[kContig ? i : d.offset_of(i)]);
    if constexpr (S == Stat::kSquares)
      acc += v * v;
    else
      acc = nan_max(acc, fabsf(v));
  }
  if constexpr (S == Stat::kSquares)
    acc = block_sum(acc);
  else
    acc = block_max(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <Stat S> std::vector<float> stat_partials_host(const Tensor& x) {
  const int64_t n = x.numel();
  // Grid from n alone (≥ 8 elements per thread, at most 1024 blocks): deterministic partials.
  const int64_t blocks = std::clamp<int64_t>(ceil_div(n, kBlock * 8), 1, 1024);
  Tensor partials = Tensor::empty({blocks}, DType::f32, x.device());
  cudaStream_t stream = cuda_stream_of(x.device());
  const StridedDesc d = strided_desc(x);
  cuda_dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    if (x.is_contiguous())
      launch_kernel<stat_partials<T, S, true>>(static_cast<unsigned>(blocks), kBlock, 0, stream, px, d, n, partials.data<float>());
    else
      launch_kernel<stat_partials<T, S, false>>(static_cast<unsigned>(blocks), kBlock, 0, stream, px, d, n, partials.data<float>());
    FC_CUDA_CHECK_LAUNCH();
  });
  return partials.to_vector();  // synchronous copy, ordered after the kernel on the same stream
}

}  // namespace

double sum_squares(const Tensor& x) {
  double s = 0;
  for (float v : stat_partials_host<Stat::kSquares>(x)) s += v;
  return s;
}

double max_abs(const Tensor& x) {
  double m = 0;
  for (float v : stat_partials_host<Stat::kMaxAbs>(x)) {
    if (std::isnan(v)) return std::numeric_limits<double>::quiet_NaN();
    m = std::max(m, static_cast<double>(v));
  }
  return m;
}

}  // namespace foldcore::ops::cuda
