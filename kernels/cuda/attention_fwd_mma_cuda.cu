// Register-tiled bf16 attention forward (FlashAttention-2 layout on mma.sync m16n8k16): one CTA
// per (64 query rows, h, b), 4 warps of 16 query rows each. Q's fragments are loaded once; for
// every tile of 64 keys, K and V go row-major through shared memory (16-byte loads; fragments by
// ldmatrix, V's by ldmatrix.trans) and the biases' sum over the tile as fp32 (mma_load_bias_tile),
// and each warp
// computes its S = Q·Kᵀ [16 × 64] in registers (fp32 accumulators), adds scale, biases and the
// segment mask, runs the online softmax on those registers (row max/sum over the 4 lanes that
// share a row), and feeds P, rounded to bf16, straight back as the A operand of O += P·V. S, P and
// O never touch shared memory; the gate is fused into the epilogue. Same results as the
// shared-memory kernel (attention_fwd_cuda.cu) up to fp32 summation order.
// Pipelined form (kAsync, the usual case: 16-byte rows, every bias read 8 keys at a time or
// broadcast over the rows, no segments): Q, K, V and the biases' raw bf16 tiles go (cp.async,
// mma_async_bias) into two stages of shared memory, so tile j + 1's loads fly while the warps
// compute on tile j (the synchronous form
// waits for every tile's loads with the whole CTA, and a CTA has only Lk / 64 tiles to spread that
// latency over). A score adds its biases from the staged bf16 in the same order from 0 as the
// synchronous form's fp32 sum: both forms give the same bits.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_mma.cuh"

namespace foldcore::ops::cuda {
namespace detail {
namespace {

template <int Dp> struct FwdMmaLayout {
  static constexpr int kLd = mma_ld_rows<Dp>();
  static constexpr size_t kQ = 0;                                   // [64][kLd]
  static constexpr size_t kK = kQ + 2 * kMmaBlockM * kLd;           // [64 keys][kLd]
  static constexpr size_t kV = kK + 2 * kMmaBlockN * kLd;           // [64 keys][kLd]
  static constexpr size_t kBias = kV + 2 * kMmaBlockN * kLd;        // [64 rows][kLdBias] fp32, with biases only
  // 72 floats ≡ 8 banks: a warp's 8-byte reads (lane 4g + t: row g, keys 2t and 2t + 1) are
  // conflict-free in each half-warp.
  static constexpr int kLdBias = kMmaBlockN + 8;
  static constexpr size_t kBytesNoBias = kBias;
  static constexpr size_t kBytes = kBias + 4 * kMmaBlockM * kLdBias;
  static_assert(kK % 16 == 0 && kBias % 16 == 0 && (2 * kLd) % 16 == 0, "ldmatrix rows 16-byte aligned");
  // Pipelined form: Q, then stages 0 and 1 of K and V, then the two stages' raw bias tiles
  // (stage_bias_rows · kMmaLdBiasRaw bf16 each: 144 bytes a row, so every row is 16-byte aligned).
  static constexpr size_t kTile = 2 * kMmaBlockM * kLd;  // bytes of one [64][kLd] bf16 tile
  static constexpr __host__ __device__ size_t stage_k(int s) { return (1 + 2 * size_t(s)) * kTile; }
  static constexpr __host__ __device__ size_t stage_v(int s) { return (2 + 2 * size_t(s)) * kTile; }
  static constexpr size_t kAsyncBias = 5 * kTile;
  static size_t async_bytes(int stage_bias_rows) { return kAsyncBias + 2 * 2 * size_t(stage_bias_rows) * kMmaLdBiasRaw; }
};

// Rows of all biases' staged tiles (mma_bias_stage_rows summed).
inline int stage_bias_rows(const AttnParams& p) {
  int rows = 0;
  for (int t = 0; t < p.n_bias; ++t) rows += mma_bias_stage_rows(p.bias[t]);
  return rows;
}

template <int Dp, bool kAsync, bool kPairOut>
__global__ void __launch_bounds__(kThreads) attention_fwd_mma_kernel(const AttnParams p) {
  using L = FwdMmaLayout<Dp>;
  constexpr int kKSteps = Dp / 16;  // k steps of Q·Kᵀ
  constexpr int kDTiles = Dp / 8;   // n tiles of O
  constexpr int kNTiles = kMmaBlockN / 8;
  FC_DYNAMIC_SHARED(unsigned char, smem, 16);
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem + L::kQ);
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem + L::kK);
  uint16_t* sv = reinterpret_cast<uint16_t*>(smem + L::kV);
  float* sbias = reinterpret_cast<float*>(smem + L::kBias);  // only with biases (launch size)

  const int i0 = blockIdx.x * kMmaBlockM, h = blockIdx.y, b = p.b0 + static_cast<int>(blockIdx.z);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const uint16_t* q = head_slice<uint16_t>(p.q, p.q_s, b, h);
  const uint16_t* k = head_slice<uint16_t>(p.k, p.k_s, b, h);
  const uint16_t* v = head_slice<uint16_t>(p.v, p.v_s, b, h);

  // This lane's two query rows (g and g + 8 of the warp's 16) and their key ranges; rows past Lq
  // attend to nothing.
  int row[2], lo[2], hi[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    row[rr] = i0 + 16 * warp + g + 8 * rr;
    lo[rr] = hi[rr] = 0;
    if (row[rr] < p.Lq) {
      if (p.cu) segment_of(p.cu, p.n_seg, row[rr], lo[rr], hi[rr]);
      else hi[rr] = p.Lk;
    }
  }
  // Segments are contiguous and ordered: the CTA's keys are [lo(first row), hi(last row)).
  int j_begin = 0, j_end = p.Lk;
  if (p.cu) {
    int l0, h0, l1, h1;
    segment_of(p.cu, p.n_seg, i0, l0, h0);
    segment_of(p.cu, p.n_seg, min(i0 + kMmaBlockM, p.Lq) - 1, l1, h1);
    j_begin = l0;
    j_end = h1;
  }

  MmaFragA qa[kKSteps];
  // Pipelined form: this lane's two rows in each staged bias tile (element offsets in a stage),
  // and the stage size; Q and tile 0 go out as the first group.
  int boff[kMaxBiases][2] = {};
  int bias_stage_elems = 0;
  uint16_t* sbias_raw = reinterpret_cast<uint16_t*>(smem + L::kAsyncBias);
  if constexpr (kAsync) {
#pragma unroll
    for (int u = 0; u < kMaxBiases; ++u) {  // unrolled: boff stays in registers
      if (u >= p.n_bias) break;
      const int rows = mma_bias_stage_rows(p.bias[u]);
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) boff[u][rr] = bias_stage_elems + (rows == 1 ? 0 : 16 * warp + g + 8 * rr) * kMmaLdBiasRaw;
      bias_stage_elems += rows * kMmaLdBiasRaw;
    }
    mma_async_tile<kMmaBlockM, Dp>(sq, L::kLd, q, p.q_s[2], i0, p.Lq, p.D);
    if (j_begin < j_end) {
      mma_async_tile<kMmaBlockN, Dp>(reinterpret_cast<uint16_t*>(smem + L::stage_k(0)), L::kLd, k, p.k_s[2], j_begin,
                                     j_end, p.D);
      mma_async_tile<kMmaBlockN, Dp>(reinterpret_cast<uint16_t*>(smem + L::stage_v(0)), L::kLd, v, p.v_s[2], j_begin,
                                     j_end, p.D);
      if (p.n_bias > 0) mma_async_bias(sbias_raw, p, b, h, i0, j_begin);
    }
    cp_async_commit();
  } else {
    mma_load_tile<kMmaBlockM, Dp>(sq, L::kLd, q, p.q_s[2], i0, p.Lq, p.D, p.vec8);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) qa[ks] = mma_ldsm_a(sq, L::kLd, 16 * warp, 16 * ks, lane);
  }

  MmaFragC o[kDTiles];
#pragma unroll
  for (int dn = 0; dn < kDTiles; ++dn)
    for (int e = 0; e < 4; ++e) o[dn].r[e] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_part[2] = {0.f, 0.f};  // this lane's share of the row sums (its 2 columns per n tile)

  for (int j0 = j_begin, tile = 0; j0 < j_end; j0 += kMmaBlockN, ++tile) {
    const uint16_t* sbias_tile = sbias_raw;
    if constexpr (kAsync) {
      const int cur = tile & 1, nxt = cur ^ 1;
      sk = reinterpret_cast<uint16_t*>(smem + L::stage_k(cur));
      sv = reinterpret_cast<uint16_t*>(smem + L::stage_v(cur));
      sbias_tile = sbias_raw + cur * bias_stage_elems;
      // Tile j0 + 64 into the other stage (whose last readers, tile j0 - 64's, finished at the
      // barrier that closed the previous iteration), then wait for this tile's group only.
      if (j0 + kMmaBlockN < j_end) {
        mma_async_tile<kMmaBlockN, Dp>(reinterpret_cast<uint16_t*>(smem + L::stage_k(nxt)), L::kLd, k, p.k_s[2],
                                       j0 + kMmaBlockN, j_end, p.D);
        mma_async_tile<kMmaBlockN, Dp>(reinterpret_cast<uint16_t*>(smem + L::stage_v(nxt)), L::kLd, v, p.v_s[2],
                                       j0 + kMmaBlockN, j_end, p.D);
        if (p.n_bias > 0) mma_async_bias(sbias_raw + nxt * bias_stage_elems, p, b, h, i0, j0 + kMmaBlockN);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      if (tile == 0) {
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) qa[ks] = mma_ldsm_a(sq, L::kLd, 16 * warp, 16 * ks, lane);
      }
    } else {
      __syncthreads();  // the previous tile's K/V reads are done
      mma_load_tile<kMmaBlockN, Dp>(sk, L::kLd, k, p.k_s[2], j0, j_end, p.D, p.vec8);
      mma_load_tile<kMmaBlockN, Dp>(sv, L::kLd, v, p.v_s[2], j0, j_end, p.D, p.vec8);
      if (p.n_bias > 0) mma_load_bias_tile<L::kLdBias>(sbias, p, b, h, i0, j0);
      __syncthreads();
    }

    MmaFragC s[kNTiles];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      for (int e = 0; e < 4; ++e) s[nt].r[e] = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNTiles; nt += 2)
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        MmaFragB b0, b1;
        mma_ldsm_b2(sk, L::kLd, 8 * nt, 16 * ks, lane, b0, b1);
        mma_m16n8k16_bf16(s[nt], qa[ks], b0, s[nt]);
        mma_m16n8k16_bf16(s[nt + 1], qa[ks], b1, s[nt + 1]);
      }
    // Scores: scale, biases, segment mask; element e of n tile nt is (row[e / 2], j0 + 8nt + 2t + e % 2).
    // kFull: every key of the tile exists and there are no segments, so every row that exists sees
    // every key and the range check is skipped (rows past Lq compute finite values that are never
    // stored). The exponent subtracts the row max, or 0 while the row has seen no finite score: a
    // masked score (-inf) gives exp(-inf) = 0 without a test per score. The same bits as testing.
    float alpha[2];
    const auto softmax_tile = [&](auto full_tag) {
      constexpr bool kFull = decltype(full_tag)::value;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          F32x2 bias{0.f, 0.f};
          if constexpr (kAsync) {
#pragma unroll
            for (int u = 0; u < kMaxBiases; ++u) {  // from 0 in the biases' order, as mma_load_bias_tile sums
              if (u >= p.n_bias) break;
              const uint32_t w = ld32(sbias_tile + boff[u][rr] + 8 * nt + 2 * t);
              bias.x += bf16_to_f32(static_cast<uint16_t>(w & 0xffffu));
              bias.y += bf16_to_f32(static_cast<uint16_t>(w >> 16));
            }
          } else if (p.n_bias > 0) {
            bias = lds64f(sbias + (16 * warp + g + 8 * rr) * L::kLdBias + 8 * nt + 2 * t);
          }
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = 2 * rr + c, j = j0 + 8 * nt + 2 * t + c;
            float sc = -INFINITY;
            if (kFull || (j >= lo[rr] && j < hi[rr])) sc = s[nt].r[e] * p.scale + (c == 0 ? bias.x : bias.y);
            s[nt].r[e] = sc;
            mx[rr] = fmaxf(mx[rr], sc);
          }
        }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 1));
        mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 2));
        const float m_new = fmaxf(m_run[rr], mx[rr]);
        alpha[rr] = m_new == -INFINITY ? 1.f : __expf(m_run[rr] - m_new);
        m_run[rr] = m_new;
        l_part[rr] *= alpha[rr];
      }
      const float m_sub[2] = {m_run[0] == -INFINITY ? 0.f : m_run[0], m_run[1] == -INFINITY ? 0.f : m_run[1]};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rr = e / 2;
          const float pv = __expf(s[nt].r[e] - m_sub[rr]);
          s[nt].r[e] = pv;
          l_part[rr] += pv;
        }
    };
    if (p.cu == nullptr && j0 + kMmaBlockN <= p.Lk) softmax_tile(std::true_type{});
    else softmax_tile(std::false_type{});
#pragma unroll
    for (int dn = 0; dn < kDTiles; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[dn].r[e] *= alpha[e / 2];
    // O += P·V, P's accumulators reused as A fragments (16 keys per k step).
#pragma unroll
    for (int kk = 0; kk < kMmaBlockN / 16; ++kk) {
      const MmaFragA pa = mma_c_to_a(s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dn = 0; dn < kDTiles; dn += 2) {
        MmaFragB b0, b1;
        mma_ldsm_bt2(sv, L::kLd, 16 * kk, 8 * dn, lane, b0, b1);
        mma_m16n8k16_bf16(o[dn], pa, b0, o[dn]);
        mma_m16n8k16_bf16(o[dn + 1], pa, b1, o[dn + 1]);
      }
    }
    if constexpr (kAsync) __syncthreads();  // this stage's readers are done: the next iteration refills it
  }
  if constexpr (kAsync) cp_async_wait<0>();  // no tile at all: Q's group is still to be retired

  // Epilogue: l = Σ over the quad, a = O / l, o = σ(g) ⊙ a, lse = m + log l.
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float l = l_part[rr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[rr] = l > 0.f ? 1.f / l : 0.f;
    if (t == 0 && row[rr] < p.Lq)
      p.lse[b * p.lse_s[0] + h * p.lse_s[1] + row[rr] * p.lse_s[2]] = l > 0.f ? m_run[rr] + __logf(l) : -INFINITY;
  }
  if constexpr (kPairOut) {
    // Columns 2t and 2t + 1 of a row side by side in registers and in memory: one 4-byte load of
    // the gate and one 4-byte store of a and of o per pair (D even, so a pair is whole or absent),
    // from row pointers formed once per row. The same per-element arithmetic and rounding as below.
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int64_t i = row[rr];
      if (i >= p.Lq) continue;
      uint16_t* const orow = static_cast<uint16_t*>(p.o) + b * p.o_s[0] + h * p.o_s[1] + i * p.o_s[2] + 2 * t;
      uint16_t* const arow = p.a ? static_cast<uint16_t*>(p.a) + b * p.a_s[0] + h * p.a_s[1] + i * p.a_s[2] + 2 * t : nullptr;
      const uint16_t* const grow =
          p.g ? static_cast<const uint16_t*>(p.g) + b * p.g_s[0] + h * p.g_s[1] + i * p.g_s[2] + 2 * t : nullptr;
#pragma unroll
      for (int dn = 0; dn < kDTiles; ++dn) {
        if (8 * dn + 2 * t >= p.D) continue;
        const float av0 = o[dn].r[2 * rr] * inv[rr], av1 = o[dn].r[2 * rr + 1] * inv[rr];
        if (arow) st32(arow + 8 * dn, pack_f32_bf16(av0, av1));
        float ov0 = av0, ov1 = av1;
        if (grow) {
          const uint32_t gw = ld32(grow + 8 * dn);
          ov0 *= sigmoidf_(bf16_to_f32(static_cast<uint16_t>(gw & 0xffffu)));
          ov1 *= sigmoidf_(bf16_to_f32(static_cast<uint16_t>(gw >> 16)));
        }
        st32(orow + 8 * dn, pack_f32_bf16(ov0, ov1));
      }
    }
  } else {
#pragma unroll
    for (int dn = 0; dn < kDTiles; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int rr = e / 2, d = 8 * dn + 2 * t + e % 2, i = row[rr];
        if (i >= p.Lq || d >= p.D) continue;
        const float av = o[dn].r[e] * inv[rr];
        if (p.a) static_cast<__nv_bfloat16*>(p.a)[b * p.a_s[0] + h * p.a_s[1] + i * p.a_s[2] + d] = __float2bfloat16(av);
        float ov = av;
        if (p.g)
          ov *= sigmoidf_(__bfloat162float(static_cast<const __nv_bfloat16*>(p.g)[b * p.g_s[0] + h * p.g_s[1] + i * p.g_s[2] + d]));
        static_cast<__nv_bfloat16*>(p.o)[b * p.o_s[0] + h * p.o_s[1] + i * p.o_s[2] + d] = __float2bfloat16(ov);
      }
  }
}

}  // namespace

// Whether the pipelined form applies: 16-byte q/k/v rows, no segments, and every bias read 8
// keys at a time or broadcast over the rows (mma_async_bias_ok).
bool fwd_mma_async_ok(const AttnParams& p) {
  if (!attention_pipeline() || !p.vec8 || p.cu != nullptr) return false;
  return mma_async_bias_ok(p);
}

// Whether o, a and g can be read and written two bf16 at a time (the kernel's kPairOut): D even,
// every row start 4-byte aligned.
bool fwd_pair_out_ok(const AttnParams& p) {
  if (p.D % 2 != 0) return false;
  const std::pair<const void*, const int64_t*> ts[] = {{p.o, p.o_s}, {p.a, p.a_s}, {p.g, p.g_s}};
  for (const auto& [ptr, st] : ts) {
    if (ptr == nullptr) continue;
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (st[d] % 2 != 0) return false;
  }
  return true;
}

void launch_attention_fwd_mma(const AttnParams& p, cudaStream_t stream) {
  dispatch_head_dim(p.D, "attention_forward (CUDA, mma)", [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    using L = FwdMmaLayout<Dp>;
    const unsigned grid_x = (p.Lq + kMmaBlockM - 1) / kMmaBlockM;
    const auto run = [&](auto pair_tag) {
      constexpr bool kPair = decltype(pair_tag)::value;
      if (fwd_mma_async_ok(p)) {
        constexpr auto kernel = &attention_fwd_mma_kernel<Dp, true, kPair>;
        const size_t bytes = L::async_bytes(stage_bias_rows(p));
        FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(L::async_bytes(kMaxBiases * kMmaBlockM))));
        launch_over_batch<kernel>(p, grid_x, bytes, stream);
        return;
      }
      const size_t bytes = p.n_bias > 0 ? L::kBytes : L::kBytesNoBias;
      constexpr auto kernel = &attention_fwd_mma_kernel<Dp, false, kPair>;
      FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes)));
      launch_over_batch<kernel>(p, grid_x, bytes, stream);
    };
    if (fwd_pair_out_ok(p)) run(std::true_type{});
    else run(std::false_type{});
  });
}

}  // namespace detail
}  // namespace foldcore::ops::cuda
