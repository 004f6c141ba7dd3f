// Opt-in gradient pass for biases shared by the batch rows (AlphaFold's pair bias [1, H, L, L],
// used by every MSA row / pair row b): instead of one fp32 atomicAdd per element per b from the
// backward's CTAs (B·H·Lq·Lk atomics), one CTA per (64 keys, 64 queries, h) loops over b,
// recomputes Pᵀ and dPᵀ for the tile (as the backward does, mma.sync m16n8k16), sums dSᵀ over b
// in registers and writes each element once (atomically only where the bias is also broadcast
// over h or over keys). Enabled by ops::set_attention_dbias_pass(true) /
// FOLDCORE_ATTENTION_DBIAS=pass; the backward's main kernel then leaves those biases to it.
#include <cmath>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_mma.cuh"

namespace foldcore::ops::cuda {
namespace detail {
namespace {

template <int Dp> struct DbiasLayout {
  static constexpr int kLd = mma_ld_rows<Dp>();
  static constexpr size_t kTile = 2 * kMmaBlockM * kLd;  // [64][kLd] bf16
  static constexpr size_t kK = 0, kV = kTile, kQ = 2 * kTile, kDA = 3 * kTile;
  static constexpr size_t kRows = 4 * kTile;  // lse, delta, lo, hi of the 64 queries
  static constexpr size_t kBytes = kRows + 4 * 4 * kMmaBlockM;
};

// p.dbias holds only the batch-shared biases' gradients (the others are null here).
template <int Dp> __global__ void __launch_bounds__(kThreads) attention_dbias_mma_kernel(const AttnParams p) {
  using L = DbiasLayout<Dp>;
  constexpr int kKSteps = Dp / 16;
  constexpr int kNTiles = kMmaBlockM / 8;
  FC_DYNAMIC_SHARED(unsigned char, smem, 16);
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem + L::kK);
  uint16_t* sv = reinterpret_cast<uint16_t*>(smem + L::kV);
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem + L::kQ);
  uint16_t* sda = reinterpret_cast<uint16_t*>(smem + L::kDA);
  float* s_lse = reinterpret_cast<float*>(smem + L::kRows);
  float* s_delta = s_lse + kMmaBlockM;
  int* row_lo = reinterpret_cast<int*>(s_delta + kMmaBlockM);
  int* row_hi = row_lo + kMmaBlockM;

  const int j0 = blockIdx.x * kMmaBlockN, i0 = blockIdx.y * kMmaBlockM, h = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  int key[2];
  for (int rr = 0; rr < 2; ++rr) key[rr] = j0 + 16 * warp + g + 8 * rr;

  MmaFragC acc[kNTiles];  // Σ_b dSᵀ, [16 keys × 64 queries] per warp
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
    for (int e = 0; e < 4; ++e) acc[nt].r[e] = 0.f;

  for (int b = 0; b < p.B; ++b) {
    __syncthreads();  // the previous batch row's reads are done
    const int64_t bh_row = (static_cast<int64_t>(b) * p.H + h) * p.Lq;
    bwd_load_query_rows<kMmaBlockM>(p, b, h, i0, p.Lq, bh_row, row_lo, row_hi, s_lse, s_delta);
    mma_load_tile<kMmaBlockN, Dp>(sk, L::kLd, head_slice<uint16_t>(p.k, p.k_s, b, h), p.k_s[2], j0, p.Lk, p.D,
                                         p.vec8);
    mma_load_tile<kMmaBlockN, Dp>(sv, L::kLd, head_slice<uint16_t>(p.v, p.v_s, b, h), p.v_s[2], j0, p.Lk, p.D,
                                         p.vec8);
    mma_load_tile<kMmaBlockM, Dp>(sq, L::kLd, head_slice<uint16_t>(p.q, p.q_s, b, h), p.q_s[2], i0, p.Lq, p.D,
                                         p.vec8);
    // dA from the preprocess's bf16 scratch (contiguous [Lq][D] per (b, h))
    mma_load_tile<kMmaBlockM, Dp>(sda, L::kLd, p.da + bh_row * p.D, p.D, i0, p.Lq, p.D, p.D % 8 == 0);
    __syncthreads();
    MmaFragC s[kNTiles], dp[kNTiles];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      for (int e = 0; e < 4; ++e) s[nt].r[e] = dp[nt].r[e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const MmaFragA ka = mma_lds_a(sk, L::kLd, 16 * warp, 16 * ks, lane);
      const MmaFragA va = mma_lds_a(sv, L::kLd, 16 * warp, 16 * ks, lane);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        mma_m16n8k16_bf16(s[nt], ka, mma_lds_b(sq, L::kLd, 8 * nt, 16 * ks, lane), s[nt]);
        mma_m16n8k16_bf16(dp[nt], va, mma_lds_b(sda, L::kLd, 8 * nt, 16 * ks, lane), dp[nt]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int rr = e / 2, r = 8 * nt + 2 * t + e % 2, j = key[rr];
        if (j < p.Lk && j >= row_lo[r] && j < row_hi[r]) {
          const float pv = __expf(s[nt].r[e] * p.scale + bias_sum<__nv_bfloat16>(p, b, h, i0 + r, j) - s_lse[r]);
          acc[nt].r[e] += pv * (dp[nt].r[e] - s_delta[r]);
        }
      }
  }

  // Each element (h, i, j) once per bias; atomically where another CTA (other h) or lane (keys
  // broadcast) adds to it too.
#pragma unroll
  for (int bt = 0; bt < kMaxBiases; ++bt) {
    const DbiasDesc& db = p.dbias[bt];
    if (!db.ptr) continue;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = i0 + 8 * nt + 2 * t + e % 2, j = key[e / 2];
        if (i >= p.Lq || j >= p.Lk) continue;
        float* el = db.ptr + h * db.s[1] + i * db.s[2] + j * db.s[3];
        if (db.shared) atomicAdd(el, acc[nt].r[e]);
        else *el += acc[nt].r[e];
      }
  }
}

}  // namespace

void launch_attention_dbias_mma(const AttnParams& p, cudaStream_t stream) {
  FC_CHECK(p.cu == nullptr, "attention dbias pass: packed segments have B = 1, nothing to reduce over the batch");
  FC_CHECK(p.Lq <= 65535 * kMmaBlockM, "attention dbias pass: Lq = ", p.Lq, " needs more than 65535 query tiles");
  dispatch_head_dim(p.D, "attention_backward (CUDA, dbias pass)", [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    const size_t bytes = DbiasLayout<Dp>::kBytes;
    constexpr auto kernel = &attention_dbias_mma_kernel<Dp>;
    FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    const dim3 grid((p.Lk + kMmaBlockN - 1) / kMmaBlockN, (p.Lq + kMmaBlockM - 1) / kMmaBlockM, p.H);
    launch_kernel<kernel>(grid, kThreads, bytes, stream, p);
    FC_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace detail
}  // namespace foldcore::ops::cuda
