// Shared pieces of the CUDA attention kernels: the params struct (explicit strides), tile
// geometry, tile loads, segment lookup, warp reductions, and a shared-memory tile GEMM that uses
// tensor cores (WMMA m16n16k16, fp32 accumulate) for bf16/f16 and plain FMA for f32.
#pragma once

#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "kernels/attention.h"

namespace foldcore::ops::cuda::detail {

constexpr int kThreads = 128;  // 4 warps per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kBlockM = 64;  // query rows per tile
constexpr int kBlockN = 64;  // key rows per tile

struct BiasDesc {
  const void* ptr = nullptr;
  int64_t s[4] = {0, 0, 0, 0};  // stride 0 on broadcast (size-1) dims
  bool vec8 = false;            // mma kernels: keys unit-stride and every row 16-byte aligned (8 bf16 per load)
};

struct DbiasDesc {
  float* ptr = nullptr;          // nullptr: gradient not wanted
  int64_t s[4] = {0, 0, 0, 0};   // stride 0 on reduced (size-1) dims
  bool sum_i = false;            // reduced over query rows: summed inside the CTA first
  bool shared = false;           // element also written by other CTAs/threads: atomicAdd
  bool off32 = false;            // (Lq - 1)·s[2] + (Lk - 1)·s[3] fits an int: a (b, h) slice indexed in 32 bits
};

struct AttnParams {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr;
  void *o = nullptr, *a = nullptr;
  float* lse = nullptr;
  int64_t q_s[3]{}, k_s[3]{}, v_s[3]{}, g_s[3]{}, o_s[3]{}, a_s[3]{}, lse_s[3]{};
  int B = 0, H = 0, Lq = 0, Lk = 0, D = 0;
  int b0 = 0;  // first batch row of this launch (launch_over_batch): b = b0 + blockIdx.z
  float scale = 1.f;
  int n_bias = 0;
  BiasDesc bias[kMaxBiases];
  const int* cu = nullptr;  // cu_seqlens (B == 1), or nullptr
  int n_seg = 0;
  bool vec8 = false;  // mma kernels: q, k, v rows may be read 8 bf16 (16 bytes) at a time
  // backward only
  const void* d_o = nullptr;
  int64_t do_s[3]{};
  void *dk = nullptr, *dv = nullptr, *dg = nullptr;
  int64_t dk_s[3]{}, dv_s[3]{}, dg_s[3]{};
  float* dq_acc = nullptr;  // [B,H,Lq,D] contiguous f32 scratch, or nullptr (dq not wanted)
  float* delta = nullptr;   // [B,H,Lq] contiguous f32: Σ_d dA·a
  uint16_t* da = nullptr;   // mma kernels: [B,H,Lq,D] contiguous bf16 scratch of dA = dO ⊙ σ(g) (the preprocess writes it)
  DbiasDesc dbias[kMaxBiases];
};

// Launches `Kernel` (kThreads threads, `smem` dynamic shared bytes, on `stream`) over the grid
// (grid_x, H, batch rows). A grid's z extent is at most 65,535, and the pair stacks' row-chunked
// attention at long lengths has more batch rows than that (chunk 16 × N = 4,096 gives 65,536), so
// the batch goes in slices of at most attention_batch_slice() rows (65,535 unless a test sets
// fewer), one launch each, in order on the same stream; each slice's kernels index rows from p.b0.
constexpr int kMaxGridZ = 65535;
template <auto Kernel>
void launch_over_batch(const AttnParams& p, unsigned grid_x, size_t smem, cudaStream_t stream) {
  const int slice_rows = std::min(kMaxGridZ, attention_batch_slice());
  AttnParams slice = p;
  for (int b0 = 0; b0 < p.B; b0 += slice_rows) {
    slice.b0 = b0;
    const dim3 grid(grid_x, static_cast<unsigned>(p.H), static_cast<unsigned>(std::min(slice_rows, p.B - b0)));
    launch_kernel<Kernel>(grid, kThreads, smem, stream, slice);
    FC_CUDA_CHECK_LAUNCH();
  }
}

// Head dims are padded to a multiple of 16 (the WMMA k) with zeros.
constexpr int padded_dim(int d) { return d <= 16 ? 16 : (d + 15) / 16 * 16; }

template <typename T> constexpr int ld_tile(int dp) { return dp + (sizeof(T) == 4 ? 4 : 8); }

// Segment [lo, hi) of row i: the s with cu[s] <= i < cu[s+1] (binary search over cu[0..n_seg]).
__device__ __forceinline__ void segment_of(const int* cu, int n_seg, int i, int& lo, int& hi) {
  int a = 0, b = n_seg + 1;  // first index with cu[idx] > i
  while (a < b) {
    const int mid = (a + b) >> 1;
    if (cu[mid] <= i) a = mid + 1; else b = mid;
  }
  a = a < 1 ? 1 : (a > n_seg ? n_seg : a);  // malformed cu: stay in bounds
  lo = cu[a - 1];
  hi = cu[a];
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

// Rows [r0, r0 + R) of a [L, D] slice (row stride rs) into smem [R][ld]; rows >= rend and
// columns >= D are zero.
template <int R, int Dp, typename T>
__device__ __forceinline__ void load_tile(T* dst, int ld, const T* base, int64_t rs, int r0, int rend, int D) {
  for (int idx = threadIdx.x; idx < R * Dp; idx += kThreads) {
    const int r = idx / Dp, c = idx % Dp;
    T v = from_f32<T>(0.f);
    if (r0 + r < rend && c < D) v = base[static_cast<int64_t>(r0 + r) * rs + c];
    dst[r * ld + c] = v;
  }
}

// C[M×N] (+)= op(A)·op(B) over K, all in shared memory; op(A)[m][k] = TA ? A[k·lda+m] : A[m·lda+k],
// op(B)[k][n] = TB ? B[n·ldb+k] : B[k·ldb+n]. All threads of the CTA call it.
template <int M, int N, int K, bool TA, bool TB, bool Acc, typename T>
__device__ __forceinline__ void smem_gemm(const T* A, int lda, const T* B, int ldb, float* C, int ldc) {
  static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0, "tile dims must be multiples of 16");
  if constexpr (std::is_same_v<T, float>) {
    for (int idx = threadIdx.x; idx < M * N; idx += kThreads) {
      const int m = idx / N, n = idx % N;
      float acc = Acc ? C[m * ldc + n] : 0.f;
#pragma unroll 8
      for (int kk = 0; kk < K; ++kk) {
        const float av = TA ? A[kk * lda + m] : A[m * lda + kk];
        const float bv = TB ? B[n * ldb + kk] : B[kk * ldb + n];
        acc = fmaf(av, bv, acc);
      }
      C[m * ldc + n] = acc;
    }
  } else {
    namespace wmma = nvcuda::wmma;
    using LA = std::conditional_t<TA, wmma::col_major, wmma::row_major>;
    using LB = std::conditional_t<TB, wmma::col_major, wmma::row_major>;
    constexpr int TN = N / 16;
    const int warp = threadIdx.x / 32;
    for (int t = warp; t < (M / 16) * TN; t += kWarps) {
      const int m0 = (t / TN) * 16, n0 = (t % TN) * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      if constexpr (Acc) wmma::load_matrix_sync(c, C + m0 * ldc + n0, ldc, wmma::mem_row_major);
      else wmma::fill_fragment(c, 0.f);
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
        wmma::load_matrix_sync(fa, TA ? A + k0 * lda + m0 : A + m0 * lda + k0, lda);
        wmma::load_matrix_sync(fb, TB ? B + n0 * ldb + k0 : B + k0 * ldb + n0, ldb);
        wmma::mma_sync(c, fa, fb, c);
      }
      wmma::store_matrix_sync(C + m0 * ldc + n0, c, ldc, wmma::mem_row_major);
    }
  }
}

// Bias sum Σ_t bias_t[b,h,i,j] (biases have the kernel's element type T).
template <typename T>
__device__ __forceinline__ float bias_sum(const AttnParams& p, int b, int h, int i, int j) {
  float s = 0.f;
  for (int t = 0; t < p.n_bias; ++t) {
    const BiasDesc& d = p.bias[t];
    s += to_f32(static_cast<const T*>(d.ptr)[b * d.s[0] + h * d.s[1] + i * d.s[2] + j * d.s[3]]);
  }
  return s;
}

// The [L, D] slice of head (b, h) of a [B, H, L, D] tensor with strides s.
template <typename T> __device__ __forceinline__ const T* head_slice(const void* base, const int64_t* s, int b, int h) {
  return static_cast<const T*>(base) + b * s[0] + h * s[1];
}

// Backward: the queries [i_begin, i_end) that can see keys [j0, j_last] (all of them without
// segments; segments are symmetric, so with them the segments of j0 and j_last).
__device__ __forceinline__ void bwd_query_range(const AttnParams& p, int j0, int j_last, int& i_begin, int& i_end) {
  i_begin = 0;
  i_end = p.Lq;
  if (p.cu) {
    int lo, hi;
    segment_of(p.cu, p.n_seg, j0, i_begin, hi);
    segment_of(p.cu, p.n_seg, j_last, lo, i_end);
  }
}

// Backward: per query row r of the tile at i0 (rows ≥ i_end see nothing), its key range
// [lo, hi) (empty for a fully masked row, whose gradient is zero), lse and delta, into shared
// memory. All threads of the CTA call it; bh_row: the first row of (b, h) in delta.
template <int R>
__device__ __forceinline__ void bwd_load_query_rows(const AttnParams& p, int b, int h, int i0, int i_end, int64_t bh_row,
                                                    int* row_lo, int* row_hi, float* s_lse, float* s_delta) {
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    const int i = i0 + r;
    int lo = 0, hi = 0;
    float l = 0.f, dl = 0.f;
    if (i < i_end) {
      if (p.cu) segment_of(p.cu, p.n_seg, i, lo, hi);
      else hi = p.Lk;
      l = p.lse[b * p.lse_s[0] + h * p.lse_s[1] + i * p.lse_s[2]];
      dl = p.delta[bh_row + i];
      if (l == -INFINITY) hi = lo;
    }
    row_lo[r] = lo;
    row_hi[r] = hi;
    s_lse[r] = l;
    s_delta[r] = dl;
  }
}

// Backward: dA = dO ⊙ σ(g) at query i, column c (0 outside the rows and columns), in fp32.
template <typename T>
__device__ __forceinline__ float bwd_da(const T* dO, const T* g, const AttnParams& p, int i, int i_end, int c) {
  if (i >= i_end || c >= p.D) return 0.f;
  float val = to_f32(dO[static_cast<int64_t>(i) * p.do_s[2] + c]);
  if (g) val *= sigmoidf_(to_f32(g[static_cast<int64_t>(i) * p.g_s[2] + c]));
  return val;
}

// Fills the parts of AttnParams common to forward and backward.
AttnParams make_params(const AttentionInputs& in);

// Runs f(std::integral_constant<int, Dp>) for the supported head dims; otherwise throws.
template <typename F> void dispatch_head_dim(int D, const char* op, F&& f) {
  if (D <= 16) return f(std::integral_constant<int, 16>{});
  if (D <= 32) return f(std::integral_constant<int, 32>{});
  if (D <= 64) return f(std::integral_constant<int, 64>{});
  FC_THROW(op, ": CUDA kernel supports head dims up to 64 (instantiated 16, 32, 64 after padding), got D = ", D);
}

}  // namespace foldcore::ops::cuda::detail
