// ops::gemm_sum_nt's one kernel (kernels/gemm.h): out[M, N] (fp32 or bf16) = beta·out + Σ_i a_i·b_iᵀ
// with bf16 a_i [M, K_i] and b_i [N, K_i], the K of every pair walked as one.
//
// Why: the input gradient of a projection run (autograd::linears: the attentions' q, k, v and gate,
// the triangle multiplication's five, the outer product mean's two) was one cuBLASLt product per
// projection, each reading and writing the whole fp32 gradient (beta = 1): at crop 256 a
// [65,536, 128] fp32 gradient is 32 MiB, so five products moved 320 MiB of it for 80 MiB of bf16
// operands. Here each output tile is read and written once, the sum stays in fp32 registers.
//
// The kernel: a CTA computes a 128 × 128 tile of out with 8 warps (4 along M × 2 along N, 32 × 64
// each: 2 × 8 mma.m16n8k16 tiles, 64 fp32 accumulators per lane). The K of all pairs is cut into
// chunks of 32 (the last chunk of a pair zero-filled past K_i, in both operands) and streamed
// through a 3-stage cp.async ring of [128][32] bf16 tiles of a and b (rows padded to 40 elements:
// the 8 rows of an ldmatrix land in distinct banks); fragments through ldmatrix. Rows past M and N
// load zeros and store nothing. The grid's x runs over N's tiles, so the CTAs sharing an a tile are
// neighbours (its second read hits L2). A bf16 out gets the fp32 sum (plus beta·out) rounded once,
// two elements per store. A pair off the 16-byte grid with K_i <= 32 (the triangle attention's
// [R, 4] pair-bias gradient beside its q, k, v and gate) is loaded element by element into the same
// tiles (load_tile_elems).
//
// Column sums of the a_i (the run's bias gradients, Σ_r dy_i[r, :]), where asked for: the CTAs of
// the first column tile sum each chunk's a tile from shared memory as it passes (warp w its columns
// 4w..4w+3, a lane 16 rows 8 apart — conflict-free banks — then three shuffles), one partial row
// per CTA, and gemm_sum_col_finalize_kernel adds the CTAs' partials in order (deterministic) to the
// destinations. So each a_i is read once for its product and its column sums, not again by a
// column-sum kernel.
#include "kernels/cuda/gemm_cuda.h"

#include <cstdint>
#include <string>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/vec.cuh"
#include "core/tensor.h"
#include "kernels/cuda/attention_mma.cuh"

namespace foldcore::ops::cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 3, kThreads = 256;
constexpr int kLd = kBK + 8;                         // smem row stride in bf16 (80 bytes ≡ 20 words)
constexpr int kTileElems = kBM * kLd;                // one operand's tile (kBM == kBN)
constexpr int kStageElems = 2 * kTileElems;          // a then b
constexpr size_t kSmemBytes = sizeof(uint16_t) * kStageElems * kStages;  // 61,440
static_assert(kBM == kBN, "a and b tiles share one layout");

struct SumPair {
  const uint16_t* a;
  const uint16_t* b;
  int64_t lda, ldb;
  int k;         // > 0: the host leaves out pairs with K = 0
  int part_off;  // this pair's first column in a partial row; -1: no column sums
  bool vec;      // a and b on the 16-byte grid (K, row strides, bases); else K <= 32, element loads
};
struct SumParams {
  SumPair pair[kGemmSumMaxPairs];
  int n_pairs;
  int chunks;  // Σ ceil(k_i / 32)
  int m, n;
  void* out;  // float or __nv_bfloat16 (the kernel's OutT)
  int64_t ldo;
  float beta;
  float* partials;  // [ceil(m / 128), part_ld]: each CTA row's column sums (kColSums)
  int part_ld;
};

// Pair p of the parameters by constant indices only: a runtime index into a kernel parameter's
// array would copy the whole array to local memory first.
__device__ __forceinline__ SumPair pair_at(const SumParams& s, int p) {
  SumPair q = s.pair[0];
#pragma unroll
  for (int i = 1; i < kGemmSumMaxPairs; ++i)
    if (i == p) q = s.pair[i];
  return q;
}

// The next chunk to load: columns [k0, k0 + 32) of pair p (q: that pair).
struct Cursor {
  int p = 0, k0 = 0;
  SumPair q;
  __device__ void advance(const SumParams& s) {
    k0 += kBK;
    if (k0 >= q.k) {
      k0 = 0;
      if (++p < s.n_pairs) q = pair_at(s, p);
    }
  }
};

// Rows [r0, r0 + 128) × columns [k0, k0 + 32) of a row-major [rows, k] bf16 matrix into a [128][kLd]
// smem tile, 16 bytes per cp.async: 512 vectors, two per thread. Past `rows` or k: zeros.
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t ld, int r0, int rows, int k0,
                                          int k, int tid) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int v = tid + kThreads * q, r = v / 4, c = 8 * (v % 4);
    const bool ok = r0 + r < rows && k0 + c < k;
    const uint16_t* g = ok ? src + static_cast<int64_t>(r0 + r) * ld + k0 + c : src;
    detail::cp_async16(dst + r * kLd + c, g, ok);
  }
}

// The same for a pair off the 16-byte grid (K or a row stride not a multiple of 8, or a base off
// it: the triangle attention's [R, 4] pair-bias gradient beside its q, k, v and gate), which the
// host allows only for K <= 32, one chunk: element loads through registers, one 16-byte smem store
// per 8 (the zeros too). The stage was last read in the chunk before last, which every warp has
// finished at the __syncthreads before this store; the loop's next barriers publish it.
__device__ __forceinline__ void load_tile_elems(uint16_t* dst, const uint16_t* src, int64_t ld, int r0, int rows,
                                                int k0, int k, int tid) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int v = tid + kThreads * q, r = v / 4, c = 8 * (v % 4);
    VecOf<uint16_t, 8> x;
    const bool row_ok = r0 + r < rows;
    const uint16_t* g = row_ok ? src + static_cast<int64_t>(r0 + r) * ld + k0 + c : src;
#pragma unroll
    for (int e = 0; e < 8; ++e) x.v[e] = row_ok && k0 + c + e < k ? g[e] : uint16_t{0};
    store_vec<uint16_t, 8>(dst + r * kLd + c, x);
  }
}

__device__ __forceinline__ void load_stage(uint16_t* stage, const SumParams& s, const Cursor& cur, int m0, int n0,
                                           int tid) {
  if (cur.q.vec) {
    load_tile(stage, cur.q.a, cur.q.lda, m0, s.m, cur.k0, cur.q.k, tid);
    load_tile(stage + kTileElems, cur.q.b, cur.q.ldb, n0, s.n, cur.k0, cur.q.k, tid);
  } else {
    load_tile_elems(stage, cur.q.a, cur.q.lda, m0, s.m, cur.k0, cur.q.k, tid);
    load_tile_elems(stage + kTileElems, cur.q.b, cur.q.ldb, n0, s.n, cur.k0, cur.q.k, tid);
  }
}

// out[row, col..col + 1] = (x, y) + beta·out in fp32, then in OutT (beta = 0: out's values are not
// read); one store of two elements (8 bytes of fp32, 4 of bf16).
template <typename OutT>
__device__ __forceinline__ void store2(OutT* p, float x, float y, float beta) {
  if (beta != 0.f) {
    const VecOf<OutT, 2> old = load_vec<OutT, 2>(p);
    x += beta * to_f32(old.v[0]);
    y += beta * to_f32(old.v[1]);
  }
  VecOf<OutT, 2> v;
  v.v[0] = from_f32<OutT>(x);
  v.v[1] = from_f32<OutT>(y);
  store_vec<OutT, 2>(p, v);
}

// Column sums of chunk `cur` of the a tile in smem (rows past M and columns past K_i are zeros):
// warp w sums columns 4w..4w+3, lane (c = lane % 4, r = lane / 4) rows r, r + 8, …, r + 120 of
// column 4w + c (a row is 20 words, so the 8 r land in 8 distinct bank pairs), then the 8 r of a
// column are added by xor shuffles in a fixed order; lanes with r = 0 write the partial.
__device__ __forceinline__ void col_sums_of_chunk(const uint16_t* sa, const SumParams& s, const Cursor& cur,
                                                  int warp, int lane) {
  if (cur.q.part_off < 0) return;
  const int c = 4 * warp + lane % 4, r = lane / 4;
  float v = 0.f;
#pragma unroll
  for (int j = 0; j < kBM / 8; ++j) v += __uint_as_float(static_cast<unsigned>(sa[(r + 8 * j) * kLd + c]) << 16);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  if (r == 0 && cur.k0 + c < cur.q.k)
    s.partials[static_cast<int64_t>(blockIdx.y) * s.part_ld + cur.q.part_off + cur.k0 + c] = v;
}

template <typename OutT, bool kColSums>
__global__ void __launch_bounds__(kThreads, 2) gemm_sum_nt_kernel(const SumParams s) {
  FC_DYNAMIC_SHARED(uint16_t, smem, 16);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n0 = blockIdx.x * kBN, m0 = blockIdx.y * kBM;
  const int wm = 32 * (warp % 4), wn = 64 * (warp / 4);

  const int chunks = s.chunks;

  MmaFragC acc[2][8];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni].r[e] = 0.f;

  Cursor load, comp;  // the next chunk to load, the chunk being multiplied
  load.q = s.pair[0];
  comp.q = s.pair[0];
  const bool sums = kColSums && blockIdx.x == 0;  // one column tile's CTAs see every a row once
  // Prologue: the first kStages - 1 chunks in flight (a group committed per stage even when empty,
  // so that wait<kStages - 2> always means "chunk t has landed").
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < chunks) {
      load_stage(smem + st * kStageElems, s, load, m0, n0, tid);
      load.advance(s);
    }
    detail::cp_async_commit();
  }

  for (int t = 0; t < chunks; ++t) {
    detail::cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk t visible to all; every warp done with chunk t - 1's stage
    const int pre = t + kStages - 1;
    if (pre < chunks) {
      load_stage(smem + (pre % kStages) * kStageElems, s, load, m0, n0, tid);
      load.advance(s);
    }
    detail::cp_async_commit();

    const uint16_t* sa = smem + (t % kStages) * kStageElems;
    const uint16_t* sb = sa + kTileElems;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      MmaFragA fa[2];
      MmaFragB fb[8];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) fa[mi] = detail::mma_ldsm_a(sa, kLd, wm + 16 * mi, kk, lane);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) detail::mma_ldsm_b2(sb, kLd, wn + 16 * nj, kk, lane, fb[2 * nj], fb[2 * nj + 1]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) mma_m16n8k16_bf16(acc[mi][ni], fa[mi], fb[ni], acc[mi][ni]);
    }
    if (sums) col_sums_of_chunk(sa, s, comp, warp, lane);
    comp.advance(s);
  }
  detail::cp_async_wait<0>();

  // Epilogue: lane (g, t) holds rows g and g + 8 of each 16-row tile, columns 2t and 2t + 1 of each
  // 8-column tile; N is even, so a pair of columns is all in or all out.
  const int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm + 16 * mi + g + 8 * h;
      if (row >= s.m) continue;
      OutT* orow = static_cast<OutT*>(s.out) + static_cast<int64_t>(row) * s.ldo;
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) {
        const int col = n0 + wn + 8 * ni + 2 * tq;
        if (col >= s.n) continue;
        store2(orow + col, acc[mi][ni].r[2 * h], acc[mi][ni].r[2 * h + 1], s.beta);
      }
    }
}

// dst_i[j] += Σ_t partials[t, off_i + j] over the CTA rows t in order: a block sums 32 columns, its
// 8 warps every 8th row each, then warp 0 adds the 8 in order.
struct ColSumDests {
  float* dst[kGemmSumMaxPairs];
  int off[kGemmSumMaxPairs];
  int k[kGemmSumMaxPairs];
  int n;
};
__global__ void __launch_bounds__(256) gemm_sum_col_finalize_kernel(const float* partials, int rows, int ld,
                                                                    const ColSumDests d) {
  FC_SHARED(float, part, [8][32]);
  const int c = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x) % 32;
  const int w = static_cast<int>(threadIdx.x) / 32;
  float v = 0.f;
  if (c < ld)
    for (int t = w; t < rows; t += 8) v += partials[static_cast<int64_t>(t) * ld + c];
  part[w][threadIdx.x % 32] = v;
  __syncthreads();
  if (w != 0 || c >= ld) return;
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) total += part[i][threadIdx.x];
  for (int i = 0; i < d.n; ++i)
    if (c >= d.off[i] && c < d.off[i] + d.k[i]) d.dst[i][c - d.off[i]] += total;
}

// Named in the kernel profile as the one GEMM it equals, with the pairs it sums: "gemm bf16->f32
// 65536x128x640 NT sum of 5", "gemm bf16->bf16 …" for a bf16 out (scripts/gemm_floor.py bounds it
// as that GEMM: a and b read once, out read and written once).
const char* profile_name(const GemmSumProblem& p, int pairs) {
  if (!kernel_profile::enabled()) return "gemm_sum_nt_kernel";
  int64_t k = 0;
  for (int i = 0; i < p.n_pairs; ++i) k += p.pair[i].k;
  std::string name = p.out_dtype == DType::f32 ? "gemm bf16->f32 " : "gemm bf16->bf16 ";
  name.append(std::to_string(p.m)).append("x").append(std::to_string(p.n)).append("x").append(std::to_string(k));
  name.append(" NT sum of ").append(std::to_string(pairs));
  return kernel_profile::detail::intern(name);
}

}  // namespace

void gemm_sum_nt(const GemmSumProblem& p, Device dev) {
  SumParams s{};
  ColSumDests dests{};
  int64_t chunks = 0;
  for (int i = 0; i < p.n_pairs; ++i) {
    const GemmSumPair& q = p.pair[i];
    if (q.k == 0) continue;  // adds nothing
    chunks += (q.k + kBK - 1) / kBK;
    FC_CHECK(chunks <= INT32_MAX, "gemm_sum_nt: K ", q.k, " of pair ", i, " exceeds the kernel's 32-bit range");
    FC_CHECK(q.vec16 || q.k <= kBK, "gemm_sum_nt: pair ", i, " (K ", q.k, ") is off the 16-byte grid and longer than ", kBK);
    s.pair[s.n_pairs++] = {static_cast<const uint16_t*>(q.a), static_cast<const uint16_t*>(q.b), q.lda, q.ldb,
                           static_cast<int>(q.k), -1, q.vec16};
    if (q.a_col_sum != nullptr) {
      s.pair[s.n_pairs - 1].part_off = s.part_ld;
      dests.dst[dests.n] = q.a_col_sum;
      dests.off[dests.n] = s.part_ld;
      dests.k[dests.n++] = static_cast<int>(q.k);
      s.part_ld += static_cast<int>(q.k);
    }
  }
  s.chunks = static_cast<int>(chunks);
  FC_CHECK(p.m <= INT32_MAX && p.n <= INT32_MAX, "gemm_sum_nt: out [", p.m, ", ", p.n,
           "] exceeds the kernel's 32-bit range");
  s.m = static_cast<int>(p.m);
  s.n = static_cast<int>(p.n);
  s.out = p.out;
  s.ldo = p.ldo;
  s.beta = p.beta;
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN), static_cast<unsigned>((p.m + kBM - 1) / kBM));
  // The CTA rows' column sums: a scratch of the caching allocator, alive until the finalize has
  // been queued behind the kernel on this stream.
  Tensor partials;
  if (dests.n > 0) {
    partials = Tensor::empty({static_cast<int64_t>(grid.y), s.part_ld}, DType::f32, dev);
    s.partials = partials.data<float>();
  }
  const auto launch = [&]<typename OutT, bool kColSums>() {
    constexpr auto kernel = &gemm_sum_nt_kernel<OutT, kColSums>;
    FC_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)));
    launch_kernel_as<gemm_sum_nt_kernel<OutT, kColSums>>(profile_name(p, s.n_pairs), grid, dim3(kThreads), kSmemBytes,
                                                         cuda_stream_of(dev), s);
  };
  FC_CHECK(p.out_dtype == DType::f32 || p.out_dtype == DType::bf16, "gemm_sum_nt: the one kernel writes f32 or bf16, not ",
           dtype_name(p.out_dtype));
  const bool f32 = p.out_dtype == DType::f32, sums = dests.n > 0;
  if (f32 && sums) launch.template operator()<float, true>();
  else if (f32) launch.template operator()<float, false>();
  else if (sums) launch.template operator()<__nv_bfloat16, true>();
  else launch.template operator()<__nv_bfloat16, false>();
  FC_CUDA_CHECK_LAUNCH();
  if (sums) {
    launch_kernel<gemm_sum_col_finalize_kernel>(dim3(static_cast<unsigned>((s.part_ld + 31) / 32)), dim3(256), 0,
                                                cuda_stream_of(dev), static_cast<const float*>(s.partials),
                                                static_cast<int>(grid.y), s.part_ld, dests);
    FC_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace foldcore::ops::cuda
