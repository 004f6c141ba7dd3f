// CUDA LayerNorm and the fused bias + dropout + residual + LayerNorm.
//  forward / dx: one warp per row (C ≤ 1024) or one block per row, fp32 statistics in two passes
//    (mean, then Σ(x−mean)²) over a row that stays in L1/L2, 16-byte vector loads when aligned.
//    The fused forward builds h = residual + dropout(x + bias) in its first pass (writing h, which
//    each thread then re-reads only at the positions it wrote itself, so no barrier is needed) and
//    normalises h in the same kernel; the fused backward writes dh (= dresidual) and the dropout
//    dx = mask ⊙ dh/(1−p) in the same row pass. Dropout keep decisions are whole Philox blocks
//    (dropout_keep4, kernels/dropout_mask.h) on the vector path, per element otherwise: the same
//    mask bias_dropout_residual draws.
//  dgamma/dbeta (and dbias = Σ_rows dx): deterministic two-stage column reduction over chunks of
//    rows: stage 1 writes per-chunk partial sums to scratch, stage 2 sums the chunks in order and
//    accumulates (+=). No atomics, same bits every run. Where a warp's row fits 16 accumulators per
//    lane (C ≤ 512 with 16-byte vectors: every AlphaFold LayerNorm) stage 1 is the dx pass itself
//    (ln_backward_fused_kernel: x and dy read once); otherwise ln_param_kernel reads them again.
//  channel-major (x [c][rows], y [rows][c]: the triangle multiplication's centre LayerNorm):
//    shared-memory tiles of 32 rows, so x and dx keep their layout (ln_cm_forward_kernel,
//    ln_cm_backward_kernel; the parameters' partials as above).
//  LayerNorm and a head-major projection (layernorm_project_heads_*: AlphaFold's pair bias):
//    a warp per row, the row in registers, the heads' dot products reduced over the warp.
#include "kernels/cuda/layernorm_cuda.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/block_counters.cuh"
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/cuda/softmax_row_reduce.cuh"
#include "kernels/layernorm.h"

namespace foldcore::ops::cuda {
namespace {

// Dropout of the fused op (keep_scale = 1/(1−p)); p = 0: no dropout.
struct LnDropout {
  float p, keep_scale;
  uint64_t seed, offset;
  DropoutMaskDesc mask;
};

LnDropout ln_dropout(const DropoutArgs& d, const DropoutMaskDesc& mask) {
  return LnDropout{d.p, dropout_scale(d.p), d.seed, d.offset, mask};
}

// Keep decisions of elements base..base+V-1; V % 4 == 0 only on the vector path, where c % V == 0
// makes base a multiple of 4 (whole Philox blocks).
template <int V> __device__ __forceinline__ void pack_keep(const LnDropout& d, int64_t base, bool keep[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int q = 0; q < V; q += 4) dropout_keep4(d.mask, d.seed, d.offset, d.p, base + q, keep + q);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) keep[e] = philox_keep(d.seed, d.offset, d.mask.mask_index(base + e), d.p);
  }
}

// kFused: h = residual + dropout(x + bias) is built and stored in the first pass, then normalised;
// else x is normalised (h, res, bias unused). h may alias res (no __restrict__ on either). y is
// of type TY: T, or 16-bit for an f32 T, rounded once as it is stored. x and bias are of type TX:
// T, or (fused) 16-bit for an f32 T (a bf16 update of an fp32 stream), exact in fp32. Unfused,
// TX = T (x is what is normalised).
template <typename T, typename TX, typename TY, int G, int V, bool kFused>
__global__ void ln_forward_kernel(const TX* x, const TX* bias, const T* res, T* h, LnDropout d,
                                  const float* __restrict__ gamma, const float* __restrict__ beta, float eps,
                                  TY* __restrict__ y, float* mean, float* rstd, int64_t rows, int c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  const int tid = threadIdx.x % G;
  if (row >= rows) return;  // uniform per group (G = block only when grid == rows)
  const T* hr = reinterpret_cast<const T*>(x) + row * c;  // unfused: TX = T
  float s = 0.f;
  if constexpr (kFused) {
    hr = h + row * c;
    for (int j = tid * V; j < c; j += G * V) {
      const auto xv = load_vec<TX, V>(x + row * c + j);
      const auto rv = load_vec<T, V>(res + row * c + j);
      bool keep[V];
      if (d.p > 0.f) pack_keep<V>(d, row * c + j, keep);
      VecOf<T, V> o;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float v = to_f32(xv.v[e]) + (bias ? to_f32(bias[j + e]) : 0.f);
        if (d.p > 0.f) v = keep[e] ? v * d.keep_scale : 0.f;
        o.v[e] = from_f32<T>(to_f32(rv.v[e]) + v);
        s += to_f32(o.v[e]);
      }
      store_vec<T, V>(h + row * c + j, o);
    }
  } else {
    for (int j = tid * V; j < c; j += G * V) {
      const auto v = load_vec<T, V>(hr + j);
#pragma unroll
      for (int e = 0; e < V; ++e) s += to_f32(v.v[e]);
    }
  }
  const float mu = group_reduce<G>(s, SumOp{}) / static_cast<float>(c);
  float q = 0.f;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_vec<T, V>(hr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float dv = to_f32(v.v[e]) - mu;
      q += dv * dv;
    }
  }
  const float rs = rsqrtf(group_reduce<G>(q, SumOp{}) / static_cast<float>(c) + eps);
  TY* yr = y + row * c;
  for (int j = tid * V; j < c; j += G * V) {
    const auto v = load_vec<T, V>(hr + j);
    VecOf<TY, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<TY>((to_f32(v.v[e]) - mu) * rs * gamma[j + e] + beta[j + e]);
    store_vec<TY, V>(yr + j, o);
  }
  if (tid == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// One row's backward by the G threads of a group (thread tid's elements j = (tid + k·G)·V + e):
//   dh[r,c] = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)),  ĝ = dy·gamma, x̂ = (h − mean)·rstd; dh and the
// dropout dx = mask ⊙ dh/(1−p) (from dh rounded to T) are each written when non-null; with acc_dh
// dh rounded to T is added to what dh holds. dy is of type TD (T, or 16-bit for an f32 h).
// S > 0: the thread has at most S slots k (c ≤ S·G·V), unrolled, and sink(k, e, dy, x̂, dx) sees
// every element (the fused kernel's γ/β sums); S = 0: any number of slots, sink unused.
struct NoSink {};  // for S = 0, where the sink is not called
template <typename T, typename TD, int G, int V, int S, typename Sink>
__device__ __forceinline__ void ln_backward_row(const TD* __restrict__ dy, const T* __restrict__ h,
                                                const float* __restrict__ gamma, float mu, float rs, T* dh, T* dx,
                                                const LnDropout& d, int64_t row, int c, bool acc_dh, Sink& sink) {
  const int tid = threadIdx.x % G;
  const T* hr = h + row * c;
  const TD* dyr = dy + row * c;
  float sg = 0.f, sgx = 0.f;
#pragma unroll
  for (int k = 0; S == 0 || k < S; ++k) {
    const int j = (tid + k * G) * V;
    if (j >= c) break;
    const auto hv = load_vec<T, V>(hr + j);
    const auto dv = load_vec<TD, V>(dyr + j);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float g = to_f32(dv.v[e]) * gamma[j + e];
      sg += g;
      sgx += g * (to_f32(hv.v[e]) - mu) * rs;
    }
  }
  const float inv_c = 1.f / static_cast<float>(c);
  const float mg = group_reduce<G>(sg, SumOp{}) * inv_c;
  const float mgx = group_reduce<G>(sgx, SumOp{}) * inv_c;
#pragma unroll
  for (int k = 0; S == 0 || k < S; ++k) {
    const int j = (tid + k * G) * V;
    if (j >= c) break;
    const auto hv = load_vec<T, V>(hr + j);
    const auto dv = load_vec<TD, V>(dyr + j);
    VecOf<T, V> prev{};
    if (acc_dh) prev = load_vec<T, V>(dh + row * c + j);
    bool keep[V];
#pragma unroll
    for (int e = 0; e < V; ++e) keep[e] = true;
    if (dx && d.p > 0.f) pack_keep<V>(d, row * c + j, keep);
    VecOf<T, V> o, od;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float xh = (to_f32(hv.v[e]) - mu) * rs;
      o.v[e] = from_f32<T>(rs * (to_f32(dv.v[e]) * gamma[j + e] - mg - xh * mgx));
      od.v[e] = d.p > 0.f ? from_f32<T>(keep[e] ? to_f32(o.v[e]) * d.keep_scale : 0.f) : o.v[e];
      if constexpr (S > 0) sink(k, e, to_f32(dv.v[e]), xh, to_f32(od.v[e]));
      if (acc_dh) o.v[e] = from_f32<T>(to_f32(prev.v[e]) + to_f32(o.v[e]));
    }
    if (dh) store_vec<T, V>(dh + row * c + j, o);
    if (dx) store_vec<T, V>(dx + row * c + j, od);
  }
}

// dh (and dx) only; the parameters' sums by ln_param_kernel. A row per group of G threads.
template <typename T, typename TD, int G, int V>
__global__ void ln_backward_dx_kernel(const TD* __restrict__ dy, const T* __restrict__ h,
                                      const float* __restrict__ gamma, const float* __restrict__ mean,
                                      const float* __restrict__ rstd, T* __restrict__ dh, T* __restrict__ dx,
                                      LnDropout d, int64_t rows, int c, bool acc_dh) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / G) + threadIdx.x / G;
  if (row >= rows) return;
  NoSink none;
  ln_backward_row<T, TD, G, V, 0>(dy, h, gamma, mean[row], rstd[row], dh, dx, d, row, c, acc_dh, none);
}

// The backward with the parameters' sums in the same pass, for rows of at most S·32·V elements:
// block b takes the rows of chunk b (rows_per_chunk of them), its 8 warps one row each in turn;
// each lane keeps Σ dy·x̂, Σ dy (and with kSumDx Σ dx, the dbias of the fused op) for its
// columns in registers; the block adds its warps' sums in order (shared memory [8][c]) and writes
// them as the chunk's partials, layout [nacc][chunks][c]. ln_param_finalize_kernel adds the
// chunks. x and dy are read once (ln_param_kernel reads both again), and the sums' order is fixed
// by the shapes alone: the same bits every run.
template <typename T, typename TD, int V, int S, bool kSumDx>
__global__ void __launch_bounds__(kRowBlock) ln_backward_fused_kernel(
    const TD* __restrict__ dy, const T* __restrict__ h, const float* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dh, T* __restrict__ dx,
    LnDropout d, int64_t rows, int c, bool acc_dh, int64_t rows_per_chunk, float* __restrict__ partial) {
  constexpr int G = 32, kWarps = kRowBlock / G, kSums = kSumDx ? 3 : 2;
  FC_DYNAMIC_SHARED(float, sred, 16);  // [kWarps][c]
  const int warp = threadIdx.x / G, lane = threadIdx.x % G;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc[kSums][S][V];
#pragma unroll
  for (int a = 0; a < kSums; ++a)
#pragma unroll
    for (int k = 0; k < S; ++k)
#pragma unroll
      for (int e = 0; e < V; ++e) acc[a][k][e] = 0.f;
  auto sink = [&](int k, int e, float dyv, float xh, float dxv) {
    acc[0][k][e] += dyv * xh;
    acc[1][k][e] += dyv;
    if constexpr (kSumDx) acc[kSums - 1][k][e] += dxv;
  };
  for (int64_t row = r0 + warp; row < r1; row += kWarps)
    ln_backward_row<T, TD, G, V, S>(dy, h, gamma, mean[row], rstd[row], dh, dx, d, row, c, acc_dh, sink);
  const int64_t chunks = gridDim.x;
#pragma unroll
  for (int a = 0; a < kSums; ++a) {  // unrolled: acc stays in registers
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int j = (lane + k * G) * V;
#pragma unroll
      for (int e = 0; e < V; ++e)
        if (j + e < c) sred[warp * c + j + e] = acc[a][k][e];
    }
    __syncthreads();
    for (int col = threadIdx.x; col < c; col += kRowBlock) {
      float t = 0.f;
      for (int w = 0; w < kWarps; ++w) t += sred[w * c + col];
      partial[(a * chunks + blockIdx.x) * static_cast<int64_t>(c) + col] = t;
    }
    __syncthreads();  // sred is rewritten for the next sum
  }
}

// Σ_chunk part[chunk·stride + col] by a 32 × 32 block: row-thread ty adds chunks ty, ty + 32, …,
// then ty = 0 adds the 32 sums in order (a fixed order: the same bits every run). The sum is
// returned to the threads ty = 0; every thread of the block must call it.
__device__ __forceinline__ float sum_chunks_32x32(const float* __restrict__ part, int64_t chunks, int64_t stride,
                                                  int col, bool in_range) {
  FC_SHARED(float, ssum, [32][33]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  float t = 0.f;
  if (in_range) {
#pragma unroll 8
    for (int64_t k = ty; k < chunks; k += 32) t += part[k * stride + col];
  }
  ssum[ty][tx] = t;
  __syncthreads();
  if (ty == 0)
    for (int k = 1; k < 32; ++k) t += ssum[k][tx];
  return t;
}

// dgamma[c] += Σ_chunk partial[0][chunk][c], dbeta from partial[1], dbias (blockIdx.y = 2) from
// partial[2]: block (blockIdx.x, a) adds 32 columns' chunks (sum_chunks_32x32).
__global__ void ln_param_finalize_kernel(const float* __restrict__ partial, int64_t chunks, int c, float* dgamma,
                                         float* dbeta, float* dbias) {
  const int a = blockIdx.y, col = blockIdx.x * 32 + threadIdx.x;
  const float t = sum_chunks_32x32(partial + a * chunks * static_cast<int64_t>(c), chunks, c, col, col < c);
  if (threadIdx.y != 0 || col >= c) return;
  float* out = a == 0 ? dgamma : (a == 1 ? dbeta : dbias);
  out[col] += t;
}

constexpr int kColTile = 32, kRowThreads = 8;

// Block (blockIdx.x, blockIdx.y) sums dy·x̂, dy (and dx when dx != null) over rows of chunk
// blockIdx.y for 32 columns; partial layout [nacc][chunks][c]. The last chunk of a column tile to
// finish (block_counters.cuh) adds the tile's partials, chunks in order: dgamma[c] += Σ_chunk
// partial[0][chunk][c], dbeta (and dbias when non-null) likewise.
template <typename T, typename TD>
__global__ void ln_param_kernel(const TD* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ dx,
                                const float* __restrict__ mean, const float* __restrict__ rstd, float* partial,
                                int64_t rows, int c, int64_t rows_per_chunk, unsigned* counters, float* dgamma,
                                float* dbeta, float* dbias) {
  FC_SHARED(float, sg, [kRowThreads][kColTile + 1]);
  FC_SHARED(float, sb, [kRowThreads][kColTile + 1]);
  FC_SHARED(float, sd, [kRowThreads][kColTile + 1]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * kColTile + tx;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ag = 0.f, ab = 0.f, ad = 0.f;
  if (col < c) {
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += kRowThreads) {
      const float d = to_f32(dy[r * c + col]);
      ag += d * (to_f32(x[r * c + col]) - mean[r]) * rstd[r];
      ab += d;
      if (dx) ad += to_f32(dx[r * c + col]);
    }
  }
  sg[ty][tx] = ag;
  sb[ty][tx] = ab;
  sd[ty][tx] = ad;
  __syncthreads();
  if (ty == 0 && col < c) {
    for (int k = 1; k < kRowThreads; ++k) {
      ag += sg[k][tx];
      ab += sb[k][tx];
      ad += sd[k][tx];
    }
    const int64_t chunks = gridDim.y;
    partial[blockIdx.y * static_cast<int64_t>(c) + col] = ag;
    partial[(chunks + blockIdx.y) * static_cast<int64_t>(c) + col] = ab;
    if (dx) partial[(2 * chunks + blockIdx.y) * static_cast<int64_t>(c) + col] = ad;
  }
  // last_block_of_group's barriers also order the reads of sg/sb/sd above before their reuse here.
  if (!last_block_of_group(&counters[blockIdx.x], gridDim.y)) return;
  // The tile's partials over the chunks: row-thread ty adds chunks ty, ty + 8, …, then ty = 0 adds
  // the 8 sums in order (a fixed order: the same bits every run).
  const int64_t chunks = gridDim.y;
  float g = 0.f, b = 0.f, db = 0.f;
  if (col < c) {
#pragma unroll 4
    for (int64_t k = ty; k < chunks; k += kRowThreads) {
      g += read_partial(&partial[k * c + col]);
      b += read_partial(&partial[(chunks + k) * c + col]);
      if (dx) db += read_partial(&partial[(2 * chunks + k) * c + col]);
    }
  }
  sg[ty][tx] = g;
  sb[ty][tx] = b;
  sd[ty][tx] = db;
  __syncthreads();
  if (ty != 0 || col >= c) return;
  for (int k = 1; k < kRowThreads; ++k) {
    g += sg[k][tx];
    b += sb[k][tx];
    db += sd[k][tx];
  }
  dgamma[col] += g;
  dbeta[col] += b;
  if (dx) dbias[col] += db;
}

// A block's tiles [t0, t1) of tile_rows rows (per_block of them from blockIdx.x's on), and the
// rows of the tile at r0 (the last one may be partial).
struct TileRange {
  int64_t t0, t1;
};
__device__ __forceinline__ TileRange block_tiles(int64_t rows, int tile_rows, int64_t per_block) {
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * per_block;
  return {t0, t0 + per_block < tiles ? t0 + per_block : tiles};
}
__device__ __forceinline__ int tile_row_count(int64_t rows, int64_t r0, int tile_rows) {
  return rows - r0 < tile_rows ? static_cast<int>(rows - r0) : tile_rows;
}

// Channel-major LayerNorm: x [c][rows] (normalised over c), y and dy [rows][c], dx [c][rows]. A
// block takes tiles of kCmRows rows: its 8 warps read x's tile along the rows (a warp per channel
// in turn, 32 consecutive rows: coalesced) into shared memory as fp32 [c][kCmLd] (the padding
// makes both the channel-wise and the row-wise walks conflict-free), then a warp per row forms the
// statistics from it and writes the row's y along the channels (coalesced). So neither the
// forward's transposed copy of x nor the backward's of dx is made. Statistics in fp32 in two
// passes (mean, then Σ(x−mean)²), as the row kernels.
constexpr int kCmRows = 32, kCmLd = kCmRows + 1, kCmMaxC = 128;

template <typename TX, typename TY>
__global__ void __launch_bounds__(kRowBlock) ln_cm_forward_kernel(const TX* __restrict__ x, const float* __restrict__ gamma,
                                                                  const float* __restrict__ beta, float eps,
                                                                  TY* __restrict__ y, float* __restrict__ mean,
                                                                  float* __restrict__ rstd, int64_t rows, int c) {
  constexpr int kWarps = kRowBlock / 32;
  FC_DYNAMIC_SHARED(float, sx, 16);  // [c][kCmLd]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kCmRows;
  const int nr = tile_row_count(rows, r0, kCmRows);
  for (int ch = warp; ch < c; ch += kWarps)
    if (lane < nr) sx[ch * kCmLd + lane] = to_f32(x[ch * rows + r0 + lane]);
  __syncthreads();
  for (int i = warp; i < nr; i += kWarps) {  // uniform per warp
    float s = 0.f;
    for (int ch = lane; ch < c; ch += 32) s += sx[ch * kCmLd + i];
    const float mu = group_reduce<32>(s, SumOp{}) / static_cast<float>(c);
    float q = 0.f;
    for (int ch = lane; ch < c; ch += 32) {
      const float d = sx[ch * kCmLd + i] - mu;
      q += d * d;
    }
    const float rs = rsqrtf(group_reduce<32>(q, SumOp{}) / static_cast<float>(c) + eps);
    TY* yr = y + (r0 + i) * c;
    for (int ch = lane; ch < c; ch += 32) yr[ch] = from_f32<TY>((sx[ch * kCmLd + i] - mu) * rs * gamma[ch] + beta[ch]);
    if (lane == 0) {
      mean[r0 + i] = mu;
      rstd[r0 + i] = rs;
    }
  }
}

// The backward, tiles_per_block consecutive tiles per block: x's tile as in the forward and dy's
// (a warp per row, along the channels) into shared memory as fp32 [c][kCmLd]; a warp per row sums
// ĝ = dy·γ and ĝ·x̂ over the channels; then thread ch (< c) walks its channel's 32 rows, adding dy·x̂
// and dy to its dγ, dβ sums and writing dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) over x in shared
// memory; the warps write dx's tile along the rows (rounded to TX; with acc_dx that rounded value
// added to what dx holds, as the row kernels do). Each thread's sums over its block's rows are the
// block's partials, layout [2][gridDim.x][c], which ln_param_finalize_kernel adds in order: the
// same bits every run.
template <typename TX, typename TD>
__global__ void __launch_bounds__(kRowBlock) ln_cm_backward_kernel(const TD* __restrict__ dy, const TX* __restrict__ x,
                                                                   const float* __restrict__ gamma,
                                                                   const float* __restrict__ mean,
                                                                   const float* __restrict__ rstd, TX* __restrict__ dx,
                                                                   bool acc_dx, int64_t rows, int c,
                                                                   int64_t tiles_per_block, float* __restrict__ partial) {
  constexpr int kWarps = kRowBlock / 32;
  FC_DYNAMIC_SHARED(float, smem, 16);
  float* sx = smem;               // [c][kCmLd]: x, then dx
  float* sdy = sx + c * kCmLd;    // [c][kCmLd]
  float* srow = sdy + c * kCmLd;  // [4][kCmRows]: mean, rstd, mean(ĝ), mean(ĝ·x̂) of the tile's rows
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, ch = threadIdx.x;
  const float gch = ch < c ? gamma[ch] : 0.f;
  const float inv_c = 1.f / static_cast<float>(c);
  float pg = 0.f, pb = 0.f;
  const TileRange tr = block_tiles(rows, kCmRows, tiles_per_block);
  for (int64_t tile = tr.t0; tile < tr.t1; ++tile) {
    const int64_t r0 = tile * kCmRows;
    const int nr = tile_row_count(rows, r0, kCmRows);
    __syncthreads();  // the previous tile's dx is written out
    for (int k = warp; k < c; k += kWarps)
      if (lane < nr) sx[k * kCmLd + lane] = to_f32(x[k * rows + r0 + lane]);
    for (int i = warp; i < nr; i += kWarps) {
      const TD* dr = dy + (r0 + i) * c;
      for (int k = lane; k < c; k += 32) sdy[k * kCmLd + i] = to_f32(dr[k]);
    }
    __syncthreads();
    for (int i = warp; i < nr; i += kWarps) {  // uniform per warp
      const float mu = mean[r0 + i], rs = rstd[r0 + i];
      float a = 0.f, b = 0.f;
      for (int k = lane; k < c; k += 32) {
        const float gh = sdy[k * kCmLd + i] * gamma[k];
        a += gh;
        b += gh * ((sx[k * kCmLd + i] - mu) * rs);
      }
      a = group_reduce<32>(a, SumOp{});
      b = group_reduce<32>(b, SumOp{});
      if (lane == 0) {
        srow[i] = mu;
        srow[kCmRows + i] = rs;
        srow[2 * kCmRows + i] = a * inv_c;
        srow[3 * kCmRows + i] = b * inv_c;
      }
    }
    __syncthreads();
    if (ch < c) {
      for (int i = 0; i < nr; ++i) {
        const float rs = srow[kCmRows + i];
        const float xh = (sx[ch * kCmLd + i] - srow[i]) * rs, d = sdy[ch * kCmLd + i];
        pg += d * xh;
        pb += d;
        sx[ch * kCmLd + i] = rs * (d * gch - srow[2 * kCmRows + i] - xh * srow[3 * kCmRows + i]);
      }
    }
    __syncthreads();
    for (int k = warp; k < c; k += kWarps) {
      if (lane >= nr) continue;
      TX* el = dx + k * rows + r0 + lane;
      const TX v = from_f32<TX>(sx[k * kCmLd + lane]);
      *el = acc_dx ? from_f32<TX>(to_f32(*el) + to_f32(v)) : v;
    }
  }
  if (ch < c) {
    partial[static_cast<int64_t>(blockIdx.x) * c + ch] = pg;
    partial[static_cast<int64_t>(gridDim.x + blockIdx.x) * c + ch] = pb;
  }
}

// LayerNorm and a narrow projection laid out head-major (layernorm_project_heads_*: AlphaFold's
// pair bias, bias[h, r] = Σ_c LN(z)[r, c]·w[c, h]). Blocks of 32 rows; a warp per row holds the
// row in registers (lane k's elements k, k + 32, …: kLpSlots of them), forms the statistics, y
// rounded to TC (the GEMMs' dtype, as the composition stores LN(z)), and the H dot products
// against w (staged in shared memory as fp32 [c][H]), reduced over the warp; the block's outputs
// go through shared memory so each head's 32 rows are stored together. Up to kLpMaxC channels and
// kLpMaxHeads heads; the dispatcher composes LayerNorm and GEMM beyond.
constexpr int kLpSlots = 4, kLpMaxC = 32 * kLpSlots, kLpMaxHeads = 8, kLpRows = 32, kLpLd = kLpRows + 1;

template <typename TX, typename TC, typename TO>
__global__ void __launch_bounds__(kRowBlock) ln_project_forward_kernel(const TX* __restrict__ x, const float* __restrict__ gamma,
                                                                       const float* __restrict__ beta, float eps,
                                                                       const TC* __restrict__ w, TO* __restrict__ out,
                                                                       float* __restrict__ mean, float* __restrict__ rstd,
                                                                       int64_t rows, int c, int heads) {
  constexpr int kWarps = kRowBlock / 32;
  FC_DYNAMIC_SHARED(float, smem, 16);
  float* sw = smem;                         // [heads][c]: a warp's 32 channels in 32 banks
  float* so = sw + c * heads;               // [heads][kLpLd]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kLpRows;
  const int nr = tile_row_count(rows, r0, kLpRows);
  for (int k = threadIdx.x; k < c * heads; k += kRowBlock) sw[(k % heads) * c + k / heads] = to_f32(w[k]);
  __syncthreads();
  for (int i = warp; i < nr; i += kWarps) {  // uniform per warp
    const TX* xr = x + (r0 + i) * c;
    float v[kLpSlots];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kLpSlots; ++j) {
      const int k = lane + 32 * j;
      v[j] = k < c ? to_f32(xr[k]) : 0.f;
      s += v[j];
    }
    const float mu = group_reduce<32>(s, SumOp{}) / static_cast<float>(c);
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < kLpSlots; ++j) {
      const float d = lane + 32 * j < c ? v[j] - mu : 0.f;
      q += d * d;
    }
    const float rs = rsqrtf(group_reduce<32>(q, SumOp{}) / static_cast<float>(c) + eps);
    float acc[kLpMaxHeads];
#pragma unroll
    for (int h = 0; h < kLpMaxHeads; ++h) acc[h] = 0.f;
#pragma unroll
    for (int j = 0; j < kLpSlots; ++j) {
      const int k = lane + 32 * j;
      if (k >= c) continue;
      const float y = to_f32(from_f32<TC>((v[j] - mu) * rs * gamma[k] + beta[k]));
#pragma unroll
      for (int h = 0; h < kLpMaxHeads; ++h)
        if (h < heads) acc[h] += y * sw[h * c + k];
    }
#pragma unroll
    for (int h = 0; h < kLpMaxHeads; ++h) {
      if (h >= heads) break;
      const float t = group_reduce<32>(acc[h], SumOp{});
      if (lane == 0) so[h * kLpLd + i] = t;
    }
    if (lane == 0) {
      mean[r0 + i] = mu;
      rstd[r0 + i] = rs;
    }
  }
  __syncthreads();
  for (int h = warp; h < heads; h += kWarps)
    if (lane < nr) out[h * rows + r0 + lane] = from_f32<TO>(so[h * kLpLd + lane]);
}

// The backward, tiles_per_block tiles of 32 rows per block: dout's tile [heads][32] into shared
// memory (read along the rows); a warp per row recomputes x̂ and y from x and the saved
// statistics, forms dy = Σ_h dout[h, r]·w[c, h] in fp32, adds y·dout to its lanes' dw sums and
// dy·x̂, dy to their dγ, dβ sums, and writes dx = rstd·(dy·γ − mean(dy·γ) − x̂·mean(dy·γ·x̂)) (rounded
// to TX; with acc_dx added to what dx holds). At the end the warps' sums are added in order in
// shared memory and written as the block's partials [gridDim.x][2c + c·heads] (dγ, dβ, dw in w's
// [c][heads] order), which lp_partial_finalize_kernel adds over the blocks in order.
template <typename TX, typename TC, typename TD>
__global__ void __launch_bounds__(kRowBlock) ln_project_backward_kernel(
    const TD* __restrict__ dout, const TX* __restrict__ x, const float* __restrict__ gamma,
    const float* __restrict__ beta, const float* __restrict__ mean, const float* __restrict__ rstd,
    const TC* __restrict__ w, TX* __restrict__ dx, bool acc_dx, int64_t rows, int c, int heads,
    int64_t tiles_per_block, float* __restrict__ partial) {
  constexpr int kWarps = kRowBlock / 32;
  FC_DYNAMIC_SHARED(float, smem, 16);
  float* sw = smem;                   // [heads][c]
  float* sdo = sw + c * heads;        // [heads][kLpLd]
  float* sred = sdo + heads * kLpLd;  // [kWarps][2c + c·heads], at the end
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int width = (2 + heads) * c;
  const float inv_c = 1.f / static_cast<float>(c);
  for (int k = threadIdx.x; k < c * heads; k += kRowBlock) sw[(k % heads) * c + k / heads] = to_f32(w[k]);
  float dg[kLpSlots], db[kLpSlots], dw[kLpSlots][kLpMaxHeads];
#pragma unroll
  for (int j = 0; j < kLpSlots; ++j) {
    dg[j] = db[j] = 0.f;
#pragma unroll
    for (int h = 0; h < kLpMaxHeads; ++h) dw[j][h] = 0.f;
  }
  const TileRange tr = block_tiles(rows, kLpRows, tiles_per_block);
  for (int64_t tile = tr.t0; tile < tr.t1; ++tile) {
    const int64_t r0 = tile * kLpRows;
    const int nr = tile_row_count(rows, r0, kLpRows);
    __syncthreads();  // sw staged; the previous tile's reads of sdo are done
    for (int h = warp; h < heads; h += kWarps)
      if (lane < nr) sdo[h * kLpLd + lane] = to_f32(dout[h * rows + r0 + lane]);
    __syncthreads();
    for (int i = warp; i < nr; i += kWarps) {  // uniform per warp
      const int64_t r = r0 + i;
      const float mu = mean[r], rs = rstd[r];
      float xh[kLpSlots], dy[kLpSlots];
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int j = 0; j < kLpSlots; ++j) {
        const int k = lane + 32 * j;
        xh[j] = dy[j] = 0.f;
        if (k >= c) continue;
        xh[j] = (to_f32(x[r * c + k]) - mu) * rs;
        const float y = to_f32(from_f32<TC>(xh[j] * gamma[k] + beta[k]));
        float d = 0.f;
#pragma unroll
        for (int h = 0; h < kLpMaxHeads; ++h) {
          if (h >= heads) break;
          const float g = sdo[h * kLpLd + i];
          d += g * sw[h * c + k];
          dw[j][h] += y * g;
        }
        dy[j] = d;
        dg[j] += d * xh[j];
        db[j] += d;
        a += d * gamma[k];
        b += d * gamma[k] * xh[j];
      }
      a = group_reduce<32>(a, SumOp{}) * inv_c;
      b = group_reduce<32>(b, SumOp{}) * inv_c;
#pragma unroll
      for (int j = 0; j < kLpSlots; ++j) {
        const int k = lane + 32 * j;
        if (k >= c) continue;
        const TX v = from_f32<TX>(rs * (dy[j] * gamma[k] - a - xh[j] * b));
        TX* el = dx + r * c + k;
        *el = acc_dx ? from_f32<TX>(to_f32(*el) + to_f32(v)) : v;
      }
    }
  }
  // The warps' sums, added in warp order: [dγ | dβ | dw as w's [c][heads]].
  float* mine = sred + warp * width;
#pragma unroll
  for (int j = 0; j < kLpSlots; ++j) {
    const int k = lane + 32 * j;
    if (k >= c) continue;
    mine[k] = dg[j];
    mine[c + k] = db[j];
#pragma unroll
    for (int h = 0; h < kLpMaxHeads; ++h)
      if (h < heads) mine[2 * c + k * heads + h] = dw[j][h];
  }
  __syncthreads();
  for (int col = threadIdx.x; col < width; col += kRowBlock) {
    float t = 0.f;
    for (int wp = 0; wp < kWarps; ++wp) t += sred[wp * width + col];
    partial[static_cast<int64_t>(blockIdx.x) * width + col] = t;
  }
}

// Adds the blocks' partials [chunks][width] over the chunks in order (sum_chunks_32x32): columns
// [0, n0) into d0, [n0, n0 + n1) into d1, the rest into d2 (+=).
__global__ void lp_partial_finalize_kernel(const float* __restrict__ partial, int64_t chunks, int width, float* d0,
                                           int n0, float* d1, int n1, float* d2) {
  const int col = blockIdx.x * 32 + threadIdx.x;
  const float t = sum_chunks_32x32(partial, chunks, width, col, col < width);
  if (threadIdx.y != 0 || col >= width) return;
  if (col < n0) d0[col] += t;
  else if (col < n0 + n1) d1[col - n0] += t;
  else d2[col - n0 - n1] += t;
}

// Tiles of tile_rows rows over at most max_blocks blocks, each block whole tiles: {tiles per
// block, blocks}.
struct TileBlocks {
  int64_t per_block, blocks;
};
TileBlocks tile_blocks(int64_t rows, int tile_rows, int64_t max_blocks) {
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  const int64_t per_block = (tiles + max_blocks - 1) / max_blocks;
  return {per_block, (tiles + per_block - 1) / per_block};
}

template <typename T> T* ptr_or_null(const Tensor& t) { return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr; }

// Calls f(T{}, TO{}) for x's dtype T and the dtype TO of y (forward) or dy (backward): the same
// dtype, or a 16-bit one for an f32 x (the dispatcher has checked the pair).
template <typename F> void dispatch_pair(DType x, DType other, F&& f) {
  cuda_dispatch_float(x, [&](auto t) {
    using T = decltype(t);
    if (other == x) {
      f(T{}, T{});
    } else if constexpr (std::is_same_v<T, float>) {
      cuda_dispatch_float(other, [&](auto o) { f(float{}, o); });
    } else {
      FC_THROW("layernorm (cuda): ", dtype_name(other), " with a ", dtype_name(x), " input");
    }
  });
}

// dispatch_pair's rule, or an f32 `other` for a 16-bit T: the backward's dy (the GEMMs' fp32
// gradient of a bf16 LayerNorm output) and the fused forward's x (an fp32 update of a bf16 stream).
template <typename F> void dispatch_wide_pair(DType t, DType other, F&& f) {
  if (other == DType::f32 && t != DType::f32) {
    cuda_dispatch_float(t, [&](auto tag) { f(decltype(tag){}, float{}); });
    return;
  }
  dispatch_pair(t, other, f);
}

// Launches the forward kernel (kFused as above) for rows × c.
template <bool kFused>
void launch_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, const Tensor& h, const LnDropout& d,
                    const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd, int64_t rows, int64_t c) {
  FC_CHECK(c < (1ll << 31), "layernorm_forward (cuda): row length ", c, " too large");
  set_device(x.device());
  const cudaStream_t stream = cuda_stream_of(x.device());
  // T: the normalised rows' dtype (h fused, x unfused); TX: x's; TY: y's. The vector is sized by T
  // (4 fp32: 8-byte loads of a 16-bit x or y, on 16-byte aligned pointers).
  auto go = [&](auto tag, auto xtag, auto ytag) {
    using T = decltype(tag);
    using TX = decltype(xtag);
    using TY = decltype(ytag);
    // Vectors of 16 bytes of T; an fp32 x beside a 16-bit T is read 32 bytes at a time, aligned so.
    const bool aligned = can_vectorise(c, sizeof(T),
                                       {x.data_ptr(), y.data_ptr(), gamma.data_ptr(), beta.data_ptr(),
                                        ptr_or_null<T>(residual), ptr_or_null<T>(h), ptr_or_null<TX>(bias)}) &&
                         reinterpret_cast<uintptr_t>(x.data_ptr()) % (16 / sizeof(T) * sizeof(TX)) == 0 &&
                         reinterpret_cast<uintptr_t>(ptr_or_null<TX>(bias)) % (16 / sizeof(T) * sizeof(TX)) == 0;
    row_switch<T>(c, aligned, [&](auto g, auto v) {
      constexpr int G = decltype(g)::value, V = decltype(v)::value;
      launch_kernel<ln_forward_kernel<T, TX, TY, G, V, kFused>>(row_blocks<G>(rows), kRowBlock, 0, stream,
          static_cast<const TX*>(x.data_ptr()), ptr_or_null<TX>(bias), ptr_or_null<T>(residual), ptr_or_null<T>(h), d,
          gamma.data<float>(), beta.data<float>(), eps, static_cast<TY*>(y.data_ptr()), mean.data<float>(),
          rstd.data<float>(), rows, static_cast<int>(c));
      FC_CUDA_CHECK_LAUNCH();
    });
  };
  if constexpr (kFused) {
    // residual's dtype with x and y each that one or (for fp32) 16-bit: dispatch_pair's rule, and
    // for x also fp32 beside a 16-bit residual (dispatch_wide_pair).
    dispatch_wide_pair(residual.dtype(), x.dtype(), [&](auto tag, auto xtag) {
      dispatch_pair(residual.dtype(), y.dtype(), [&](auto, auto ytag) { go(tag, xtag, ytag); });
    });
  } else {
    dispatch_pair(x.dtype(), y.dtype(), [&](auto tag, auto ytag) { go(tag, tag, ytag); });
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  launch_forward<false>(x, Tensor(), Tensor(), Tensor(), LnDropout{}, gamma, beta, eps, y, mean, rstd, rows, c);
}

void bias_dropout_residual_layernorm_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                                             const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& gamma,
                                             const Tensor& beta, float eps, const Tensor& h, const Tensor& y,
                                             const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  // The kernel re-reads h for the statistics and y, so an unrequested h still needs scratch.
  const Tensor hh = h.defined() ? h : Tensor::empty(x.shape(), residual.dtype(), x.device());
  launch_forward<true>(x, bias, residual, hh, ln_dropout(d, mask), gamma, beta, eps, y, mean, rstd, rows, c);
}

void layernorm_backward(const Tensor& dy, const Tensor& h, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dh, const Tensor& dx, const Tensor& dbias,
                        const DropoutArgs& d, const DropoutMaskDesc& mask, const Tensor& dgamma, const Tensor& dbeta,
                        int64_t rows, int64_t c, bool accumulate_dh) {
  FC_CHECK(c < (1ll << 31), "layernorm_backward (cuda): row length ", c, " too large");
  const Device dev = h.device();
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);
  // Chunks of rows, each chunk's sums one partial: at most 512 chunks of ≥ 64 rows for
  // ln_param_kernel (its last block adds them); at most 1,024 of ≥ 32 rows for the one-pass kernel,
  // a block per chunk, whose blocks hold 3-4 per SM: several waves, so the last one's idle SMs cost
  // little, and ln_param_finalize_kernel adds 32 partials per thread. Fixed by the shape alone.
  const int64_t chunks2 = std::max<int64_t>(1, std::min<int64_t>(512, rows / 64));
  const int64_t chunks1 = std::max<int64_t>(1, std::min<int64_t>(1024, rows / 32));
  const int64_t nacc = dbias.defined() ? 3 : 2;
  Tensor partial = Tensor::empty({nacc * std::max(chunks1, chunks2) * c}, DType::f32, dev);
  const LnDropout drop = ln_dropout(d, mask);
  dispatch_wide_pair(h.dtype(), dy.dtype(), [&](auto tag, auto dtag) {
    using T = decltype(tag);
    using TD = decltype(dtag);
    const TD* dyp = static_cast<const TD*>(dy.data_ptr());
    const T* hp = static_cast<const T*>(h.data_ptr());
    // Vectors of 16 bytes of T; an fp32 dy beside a 16-bit h is read 32 bytes at a time, aligned so.
    const bool aligned =
        can_vectorise(c, sizeof(T), {dy.data_ptr(), h.data_ptr(), gamma.data_ptr(), ptr_or_null<T>(dh), ptr_or_null<T>(dx)}) &&
        reinterpret_cast<uintptr_t>(dy.data_ptr()) % (16 / sizeof(T) * sizeof(TD)) == 0;
    bool fused = false;
    row_switch<T>(c, aligned, [&](auto g, auto v) {
      constexpr int G = decltype(g)::value, V = decltype(v)::value;
      // One pass with the parameters' sums where a warp's row fits S·32·V elements, S·V ≤ 16
      // accumulators of each sum per lane (c ≤ 512 with 16-byte vectors, ≤ 128 element by element).
      const int64_t slots = (c + 32 * V - 1) / (32 * V);
      auto fused_launch = [&](auto s) {
        constexpr int S = decltype(s)::value;
        auto go = [&](auto sum_dx) {
          launch_kernel<ln_backward_fused_kernel<T, TD, V, S, decltype(sum_dx)::value>>(static_cast<unsigned>(chunks1),
              kRowBlock, sizeof(float) * (kRowBlock / 32) * static_cast<size_t>(c), stream, dyp, hp,
              gamma.data<float>(), mean.data<float>(), rstd.data<float>(), ptr_or_null<T>(dh), ptr_or_null<T>(dx),
              drop, rows, static_cast<int>(c), accumulate_dh, (rows + chunks1 - 1) / chunks1, partial.data<float>());
        };
        if (dbias.defined()) go(std::true_type{});
        else go(std::false_type{});
        FC_CUDA_CHECK_LAUNCH();
        fused = true;
      };
      if constexpr (G == 32) {
        constexpr int kMaxSlots = 16 / V < 4 ? 16 / V : 4;
        if (!layernorm_backward_one_pass()) {
          // the two-pass form, by choice
        } else if (slots == 1) {
          fused_launch(std::integral_constant<int, 1>{});
        } else if (slots == 2 && kMaxSlots >= 2) {
          fused_launch(std::integral_constant<int, 2>{});
        } else if constexpr (kMaxSlots >= 4) {
          if (slots <= 4) fused_launch(std::integral_constant<int, 4>{});
        }
      }
      if (fused) return;
      launch_kernel<ln_backward_dx_kernel<T, TD, G, V>>(row_blocks<G>(rows), kRowBlock, 0, stream,
          dyp, hp, gamma.data<float>(), mean.data<float>(), rstd.data<float>(), ptr_or_null<T>(dh), ptr_or_null<T>(dx),
          drop, rows, static_cast<int>(c), accumulate_dh);
      FC_CUDA_CHECK_LAUNCH();
    });
    if (fused) {
      launch_kernel<ln_param_finalize_kernel>(dim3(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(nacc)),
          dim3(32, 32), 0, stream, static_cast<const float*>(partial.data<float>()), chunks1, static_cast<int>(c),
          dgamma.data<float>(), dbeta.data<float>(), dbias.defined() ? dbias.data<float>() : nullptr);
      FC_CUDA_CHECK_LAUNCH();
      return;
    }
    const dim3 grid(static_cast<unsigned>((c + kColTile - 1) / kColTile), static_cast<unsigned>(chunks2));
    launch_kernel<ln_param_kernel<T, TD>>(grid, dim3(kColTile, kRowThreads), 0, stream,
        dyp, hp, dbias.defined() ? ptr_or_null<T>(dx) : nullptr, mean.data<float>(), rstd.data<float>(),
        partial.data<float>(), rows, static_cast<int>(c), (rows + chunks2 - 1) / chunks2, block_counters(dev, grid.x),
        dgamma.data<float>(), dbeta.data<float>(), dbias.defined() ? dbias.data<float>() : nullptr);
    FC_CUDA_CHECK_LAUNCH();
  });
}

bool layernorm_channel_major_tiled(int64_t c) { return c > 0 && c <= kCmMaxC; }

void layernorm_channel_major_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t c) {
  FC_CHECK(layernorm_channel_major_tiled(c), "layernorm_channel_major_forward (cuda): ", c, " channels (at most ",
           kCmMaxC, ")");
  set_device(x.device());
  const cudaStream_t stream = cuda_stream_of(x.device());
  const unsigned blocks = static_cast<unsigned>((rows + kCmRows - 1) / kCmRows);
  dispatch_pair(x.dtype(), y.dtype(), [&](auto tag, auto ytag) {
    using T = decltype(tag);
    using TY = decltype(ytag);
    launch_kernel<ln_cm_forward_kernel<T, TY>>(blocks, kRowBlock, sizeof(float) * kCmLd * static_cast<size_t>(c), stream,
        static_cast<const T*>(x.data_ptr()), gamma.data<float>(), beta.data<float>(), eps, static_cast<TY*>(y.data_ptr()),
        mean.data<float>(), rstd.data<float>(), rows, static_cast<int>(c));
    FC_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_channel_major_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      int64_t rows, int64_t c, bool accumulate_dx) {
  FC_CHECK(layernorm_channel_major_tiled(c), "layernorm_channel_major_backward (cuda): ", c, " channels (at most ",
           kCmMaxC, ")");
  const Device dev = x.device();
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);
  // At most 1,024 blocks (partials), each of whole tiles; fixed by the shape alone.
  const auto [per_block, blocks] = tile_blocks(rows, kCmRows, 1024);
  const Tensor partial = Tensor::empty({2 * blocks * c}, DType::f32, dev);
  const size_t smem = sizeof(float) * (2 * kCmLd * static_cast<size_t>(c) + 4 * kCmRows);
  dispatch_wide_pair(x.dtype(), dy.dtype(), [&](auto tag, auto dtag) {
    using T = decltype(tag);
    using TD = decltype(dtag);
    launch_kernel<ln_cm_backward_kernel<T, TD>>(static_cast<unsigned>(blocks), kRowBlock, smem, stream,
        static_cast<const TD*>(dy.data_ptr()), static_cast<const T*>(x.data_ptr()), gamma.data<float>(),
        mean.data<float>(), rstd.data<float>(), static_cast<T*>(dx.data_ptr()), accumulate_dx, rows,
        static_cast<int>(c), per_block, partial.data<float>());
    FC_CUDA_CHECK_LAUNCH();
  });
  launch_kernel<ln_param_finalize_kernel>(dim3(static_cast<unsigned>((c + 31) / 32), 2u), dim3(32, 32), 0, stream,
      static_cast<const float*>(partial.data<float>()), blocks, static_cast<int>(c), dgamma.data<float>(),
      dbeta.data<float>(), static_cast<float*>(nullptr));
  FC_CUDA_CHECK_LAUNCH();
}

bool layernorm_project_heads_fused(int64_t c, int64_t heads) {
  return c > 0 && c <= kLpMaxC && heads > 0 && heads <= kLpMaxHeads;
}

void layernorm_project_heads_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     const Tensor& w, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                     int64_t rows, int64_t c, int64_t heads) {
  FC_CHECK(layernorm_project_heads_fused(c, heads), "layernorm_project_heads_forward (cuda): ", c, " channels, ",
           heads, " heads (at most ", kLpMaxC, ", ", kLpMaxHeads, ")");
  set_device(x.device());
  const cudaStream_t stream = cuda_stream_of(x.device());
  const unsigned blocks = static_cast<unsigned>((rows + kLpRows - 1) / kLpRows);
  const size_t smem = sizeof(float) * static_cast<size_t>(c * heads + heads * kLpLd);
  cuda_dispatch_float(x.dtype(), [&](auto xtag) {
    cuda_dispatch_float(w.dtype(), [&](auto ctag) {
      using TX = decltype(xtag);
      using TC = decltype(ctag);
      launch_kernel<ln_project_forward_kernel<TX, TC, TC>>(blocks, kRowBlock, smem, stream,
          static_cast<const TX*>(x.data_ptr()), gamma.data<float>(), beta.data<float>(), eps,
          static_cast<const TC*>(w.data_ptr()), static_cast<TC*>(out.data_ptr()), mean.data<float>(),
          rstd.data<float>(), rows, static_cast<int>(c), static_cast<int>(heads));
      FC_CUDA_CHECK_LAUNCH();
    });
  });
}

void layernorm_project_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& w, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta, const Tensor& dw, int64_t rows,
                                      int64_t c, int64_t heads, bool accumulate_dx) {
  FC_CHECK(layernorm_project_heads_fused(c, heads), "layernorm_project_heads_backward (cuda): ", c, " channels, ",
           heads, " heads (at most ", kLpMaxC, ", ", kLpMaxHeads, ")");
  const Device dev = x.device();
  set_device(dev);
  const cudaStream_t stream = cuda_stream_of(dev);
  // At most 256 blocks of whole tiles (a block's partials are 2c + c·heads floats), fixed by the
  // shape alone.
  const auto [per_block, blocks] = tile_blocks(rows, kLpRows, 256);
  const int64_t width = (2 + heads) * c;
  const Tensor partial = Tensor::empty({blocks * width}, DType::f32, dev);
  const size_t smem = sizeof(float) * static_cast<size_t>(c * heads + heads * kLpLd + (kRowBlock / 32) * width);
  cuda_dispatch_float(x.dtype(), [&](auto xtag) {
    cuda_dispatch_float(w.dtype(), [&](auto ctag) {
      using TX = decltype(xtag);
      using TC = decltype(ctag);
      auto go = [&](auto dtag) {
        using TD = decltype(dtag);
        launch_kernel<ln_project_backward_kernel<TX, TC, TD>>(static_cast<unsigned>(blocks), kRowBlock, smem, stream,
            static_cast<const TD*>(dout.data_ptr()), static_cast<const TX*>(x.data_ptr()), gamma.data<float>(),
            beta.data<float>(), mean.data<float>(), rstd.data<float>(), static_cast<const TC*>(w.data_ptr()),
            static_cast<TX*>(dx.data_ptr()), accumulate_dx, rows, static_cast<int>(c), static_cast<int>(heads),
            per_block, partial.data<float>());
        FC_CUDA_CHECK_LAUNCH();
      };
      if (dout.dtype() == DType::f32) go(float{});
      else go(TC{});
    });
  });
  launch_kernel<lp_partial_finalize_kernel>(dim3(static_cast<unsigned>((width + 31) / 32)), dim3(32, 32), 0, stream,
      static_cast<const float*>(partial.data<float>()), blocks, static_cast<int>(width), dgamma.data<float>(),
      static_cast<int>(c), dbeta.data<float>(), static_cast<int>(c), dw.data<float>());
  FC_CUDA_CHECK_LAUNCH();
}

}  // namespace foldcore::ops::cuda
