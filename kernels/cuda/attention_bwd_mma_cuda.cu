// Register-tiled bf16 attention backward, main kernel (FlashAttention-2 layout on mma.sync
// m16n8k16). The preprocess (dA = dO ⊙ σ(g) into a bf16 scratch, delta, dg) and the dq conversion
// are shared with the shared-memory kernels (attention_bwd_cuda.cu).
//
// One CTA per (64 keys, h, b), 4 warps of 16 keys each. Each warp keeps its K and V rows as A
// fragments and its dK, dV accumulators in registers for the whole kernel; K also stays row-major
// in shared memory for dQ. For every query tile of 64 rows that can see the CTA's keys (Q and dA
// staged row-major in shared memory, 16-byte loads; every fragment read by ldmatrix, the
// transposed operands by ldmatrix.trans, so no tile is stored twice; the biases' sum over the
// [64 queries × 64 keys] block staged as fp32 by mma_load_bias_tile):
// and for each 16 of its queries in turn (so only [16 × 16] scores per warp are live):
//   Sᵀ = K·Qᵀ and dPᵀ = V·dAᵀ            [16 keys × 16 queries] per warp, fp32 registers
//   Pᵀ = exp(scale·Sᵀ + Σbias − lse),  dSᵀ = Pᵀ ⊙ (dPᵀ − delta)   (dbias written from here)
//   dV += Pᵀ·dA,  dK += dSᵀ·Q            (Pᵀ, dSᵀ reused as A fragments, no shared memory)
//   dSᵀ → shared memory (bf16); then each warp forms dQ for 16 query rows over the CTA's 64 keys,
//   dS·K, and adds scale·dQ to the fp32 scratch with atomicAdd.
// Finally dK·scale and dV are written in the tensors' dtype and strides; dbias sums over query
// rows are reduced over the 4 lanes that hold a key and written once.
//
// Two forms of the per-score work (ops::set_attention_bwd_row_form; the same bits, see
// bwd_scores_by_row). Per score (kRowForm = false, every head dim): each score reads its row's
// lse, delta and key range, checks the range, walks all kMaxBiases bias-gradient descriptors with
// 64-bit addresses, and stores its dS as one bf16 to dS [queries][keys]. By row (the default at
// head dims ≤ 32): a row's lse and delta are read once for its keys; a tile whose 64 rows all see
// its 64 keys (a CTA-wide mark, no segment or end inside it) checks no range, adds its bias
// gradients at 32-bit offsets and dQ at the lane's row offsets; the descriptors are walked once per
// 16-query slice; dSᵀ is stored as the packed A registers hold it ([keys][queries], four 32-bit
// stores per lane) and dQ reads it back with ldmatrix.trans. At the AlphaFold shape (full tiles,
// one batch-shared bias gradient) that is 1,232 PTX instructions per query tile and warp from the
// first product to the last dQ atomic against 1,612 (80 mma in both; docs/benchmarks.md).
#include <cmath>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_mma.cuh"

namespace foldcore::ops::cuda {
namespace detail {
namespace {

template <int Dp> struct BwdMmaLayout {
  static constexpr int kLd = mma_ld_rows<Dp>();
  static constexpr size_t kRowTile = 2 * kMmaBlockM * kLd;  // [64][kLd] bf16
  static constexpr size_t kQ = 0;                           // Q rows
  static constexpr size_t kDA = kQ + kRowTile;              // dA rows (V rows at the start)
  static constexpr size_t kK = kDA + kRowTile;              // K rows (whole kernel)
  static constexpr size_t kDS = kK + kRowTile;              // dS [64 queries][72] bf16
  static constexpr size_t kRows = kDS + 2 * kMmaBlockM * kMmaLdKeys;  // lse, delta, lo, hi
  static constexpr size_t kFlag = kRows + 4 * 4 * kMmaBlockM;         // the row form's partial-tile mark (16 bytes)
  static constexpr size_t kColsum = kFlag + 16;                       // the row form's dbias column sums, [bias][key][thread] fp32
  static constexpr size_t kBias = kColsum + 4 * kMaxBiases * 2 * kThreads;  // [64 queries][kLdBias] fp32, with biases only
  // 68 floats ≡ 4 banks: a warp's reads (lane 4g + t: keys g, queries 2t or 2t + 1) are conflict-free.
  static constexpr int kLdBias = kMmaBlockN + 4;
  static constexpr size_t kBytesNoBias = kBias;
  static constexpr size_t kBytes = kBias + 4 * kMmaBlockM * kLdBias;
  static_assert(kRowTile % 16 == 0 && kBias % 16 == 0 && (2 * kLd) % 16 == 0 && (2 * kMmaLdKeys) % 16 == 0,
                "ldmatrix rows 16-byte aligned");
};
static_assert(kMmaBlockM == 64 && kMmaBlockN == 64 && kThreads == 128, "4 warps × 16 keys, 64-row query tiles");

// The row form's scores of one 16-query slice (rows r0 + 8f + 2t + c of the tile at i0; keys
// key[0], key[1]): Pᵀ and dSᵀ in place of Sᵀ and dPᵀ, then the bias gradients. Each row's lse and
// delta (and, in a partial tile, its key range) are read once for its two keys instead of once per
// score; a full tile checks no range; and the bias-gradient descriptors are walked once per slice
// instead of once per score (the per-score form walked all kMaxBiases of them for every score). The
// same bits as the per-score form: the same expressions, the same adds per element in the same
// order (a column sum also adds the +0 of an invalid score, which changes no sum: one that starts at
// +0 is never -0).
template <int LdBias>
__device__ __forceinline__ void bwd_scores_by_row(const AttnParams& p, MmaFragC (&s)[2], MmaFragC (&dp)[2],
                                                  float* colsum, const float* sbias,
                                                  const float* s_lse, const float* s_delta, const int* row_lo,
                                                  const int* row_hi, bool full, int b, int h, int i0, int r0, int warp,
                                                  int g, int t, const int (&key)[2]) {
#pragma unroll
  for (int f = 0; f < 2; ++f)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int r = r0 + 8 * f + 2 * t + c;
      const float lse = s_lse[r], delta = s_delta[r];
      const int lo = full ? 0 : row_lo[r], hi = full ? 0 : row_hi[r];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int e = 2 * rr + c, j = key[rr];
        float pv = 0.f, ds = 0.f;
        if (full || (j < p.Lk && j >= lo && j < hi)) {
          const float bias = p.n_bias > 0 ? sbias[r * LdBias + 16 * warp + g + 8 * rr] : 0.f;
          pv = __expf(s[f].r[e] * p.scale + bias - lse);
          ds = pv * (dp[f].r[e] - delta);
        }
        s[f].r[e] = pv;
        dp[f].r[e] = ds;
      }
    }
#pragma unroll
  for (int bt = 0; bt < kMaxBiases; ++bt) {
    const DbiasDesc& db = p.dbias[bt];
    if (!db.ptr) continue;  // uniform over the CTA
    if (db.sum_i) {
#pragma unroll
      for (int f = 0; f < 2; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) colsum[(2 * bt + e / 2) * kThreads] += dp[f].r[e];
      continue;
    }
    float* base = db.ptr + b * db.s[0] + h * db.s[1];
    if (full && db.off32) {  // every score valid; offsets inside the (b, h) slice in 32 bits
      const int s2 = static_cast<int>(db.s[2]), s3 = static_cast<int>(db.s[3]);
#pragma unroll
      for (int f = 0; f < 2; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float* el = base + ((i0 + r0 + 8 * f + 2 * t + e % 2) * s2 + key[e / 2] * s3);
          if (db.shared) atomicAdd(el, dp[f].r[e]);
          else *el += dp[f].r[e];
        }
      continue;
    }
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + 8 * f + 2 * t + e % 2, j = key[e / 2];
        if (!full && !(j < p.Lk && j >= row_lo[r] && j < row_hi[r])) continue;
        float* el = base + (i0 + r) * db.s[2] + j * db.s[3];
        if (db.shared) atomicAdd(el, dp[f].r[e]);
        else *el += dp[f].r[e];
      }
  }
}

// ptxas (sm_90a, CUDA 13), per-score form: 168 / 102 / 84 registers at Dp = 64 / 32 / 16, no
// spills, so 3 / 4 / 5 CTAs per SM (registers go 256 per warp: 102 per thread take 104, and a fifth
// CTA of 4 warps needs 96 or fewer; 214 at Dp = 32 before the 16-query slices: 2). A bound of 5
// CTAs per SM (__launch_bounds__(128, 5): 96 registers) spills: 152-byte frames at Dp = 32, 600 at
// Dp = 64. Row form, bounded to the same CTAs per SM (bwd_min_ctas): 128 / 96 registers at Dp = 32 /
// 16, no spills (its slice loop unrolled twice: fully unrolled it spilled 188 bytes within 128); at
// Dp = 64 it needs 224 (2 CTAs) and spills within 168, so that head dim keeps the per-score form.
constexpr int bwd_min_ctas(int Dp, bool row_form) { return row_form ? (Dp == 16 ? 5 : 4) : 0; }

template <int Dp, bool kRowForm>
__global__ void __launch_bounds__(kThreads, bwd_min_ctas(Dp, kRowForm)) attention_bwd_mma_kernel(const AttnParams p) {
  using L = BwdMmaLayout<Dp>;
  constexpr int kKSteps = Dp / 16;
  constexpr int kDTiles = Dp / 8;
  FC_DYNAMIC_SHARED(unsigned char, smem, 16);
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem + L::kQ);
  uint16_t* sda = reinterpret_cast<uint16_t*>(smem + L::kDA);
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem + L::kK);
  uint16_t* sds = reinterpret_cast<uint16_t*>(smem + L::kDS);
  float* s_lse = reinterpret_cast<float*>(smem + L::kRows);
  float* s_delta = s_lse + kMmaBlockM;
  int* row_lo = reinterpret_cast<int*>(s_delta + kMmaBlockM);
  int* row_hi = row_lo + kMmaBlockM;
  int* s_partial = reinterpret_cast<int*>(smem + L::kFlag);   // row form: the last i0 whose tile is partial
  float* sbias = reinterpret_cast<float*>(smem + L::kBias);  // only with biases (launch size)

  const int j0 = blockIdx.x * kMmaBlockN, h = blockIdx.y, b = p.b0 + static_cast<int>(blockIdx.z);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const uint16_t* q = head_slice<uint16_t>(p.q, p.q_s, b, h);
  const uint16_t* k = head_slice<uint16_t>(p.k, p.k_s, b, h);
  const uint16_t* v = head_slice<uint16_t>(p.v, p.v_s, b, h);
  const int64_t bh_row = (static_cast<int64_t>(b) * p.H + h) * p.Lq;  // first row of (b,h) in delta/dq_acc/da
  const uint16_t* da = p.da + bh_row * p.D;                          // dA rows, contiguous [Lq][D]
  const bool da_vec8 = p.D % 8 == 0;                                  // the scratch is 256-byte aligned

  int i_begin, i_end;
  bwd_query_range(p, j0, min(j0 + kMmaBlockN, p.Lk) - 1, i_begin, i_end);
  // This lane's keys: rows g and g + 8 of the warp's 16.
  int key[2];
  for (int rr = 0; rr < 2; ++rr) key[rr] = j0 + 16 * warp + g + 8 * rr;

  // K and V rows as A fragments (V staged in the dA buffer); K stays for dQ = dS·K.
  mma_load_tile<kMmaBlockN, Dp>(sk, L::kLd, k, p.k_s[2], j0, p.Lk, p.D, p.vec8);
  mma_load_tile<kMmaBlockN, Dp>(sda, L::kLd, v, p.v_s[2], j0, p.Lk, p.D, p.vec8);
  if (kRowForm && tid == 0) *s_partial = -1;  // no tile's i0
  __syncthreads();
  MmaFragA ka[kKSteps], va[kKSteps];
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    ka[ks] = mma_ldsm_a(sk, L::kLd, 16 * warp, 16 * ks, lane);
    va[ks] = mma_ldsm_a(sda, L::kLd, 16 * warp, 16 * ks, lane);
  }
  MmaFragC dk[kDTiles], dv[kDTiles];
#pragma unroll
  for (int dn = 0; dn < kDTiles; ++dn)
    for (int e = 0; e < 4; ++e) dk[dn].r[e] = dv[dn].r[e] = 0.f;
  // dbias summed over query rows, per bias and key: in registers (per-score form), or in this
  // thread's own shared-memory slots (row form: 8 registers fewer for a sum most calls do not take).
  float colsum[kRowForm ? 1 : kMaxBiases][2] = {};
  float* s_colsum = reinterpret_cast<float*>(smem + L::kColsum) + tid;  // [bias][key] at stride kThreads
  if constexpr (kRowForm)
    for (int c = 0; c < 2 * kMaxBiases; ++c) s_colsum[c * kThreads] = 0.f;

  for (int i0 = i_begin; i0 < i_end; i0 += kMmaBlockM) {
    __syncthreads();  // the previous tile's (and the start's) reads of every buffer are done
    bwd_load_query_rows<kMmaBlockM>(p, b, h, i0, i_end, bh_row, row_lo, row_hi, s_lse, s_delta);
    mma_load_tile<kMmaBlockM, Dp>(sq, L::kLd, q, p.q_s[2], i0, i_end, p.D, p.vec8);
    mma_load_tile<kMmaBlockM, Dp>(sda, L::kLd, da, p.D, i0, i_end, p.D, da_vec8);
    if (p.n_bias > 0) mma_load_bias_tile<L::kLdBias>(sbias, p, b, h, i0, j0);
    // Row form: whether every query row of the tile sees all 64 keys (no segment or mask border,
    // no row or key past the end: AlphaFold's tiles at L % 64 == 0), so no score needs a range
    // check. A thread that loaded a row that does not marks the tile (the mark is this tile's i0,
    // so an earlier tile's mark never counts and nothing is reset).
    if (kRowForm && tid < kMmaBlockM && !(row_lo[tid] <= j0 && row_hi[tid] >= j0 + kMmaBlockN)) *s_partial = i0;
    __syncthreads();
    const bool full = kRowForm && *s_partial != i0;

    // Sixteen queries at a time (kk): Sᵀ and dPᵀ [16 keys × 16 queries] (n tiles f = 0, 1 hold
    // queries i0 + 16kk + 8f + (0..7)), then Pᵀ and dSᵀ, then their products, so only one slice's
    // scores are live in registers.
    const auto slice = [&](const int kk) {
      MmaFragC s[2], dp[2];
#pragma unroll
      for (int f = 0; f < 2; ++f)
        for (int e = 0; e < 4; ++e) s[f].r[e] = dp[f].r[e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        MmaFragB b0, b1;
        mma_ldsm_b2(sq, L::kLd, 16 * kk, 16 * ks, lane, b0, b1);
        mma_m16n8k16_bf16(s[0], ka[ks], b0, s[0]);
        mma_m16n8k16_bf16(s[1], ka[ks], b1, s[1]);
        mma_ldsm_b2(sda, L::kLd, 16 * kk, 16 * ks, lane, b0, b1);
        mma_m16n8k16_bf16(dp[0], va[ks], b0, dp[0]);
        mma_m16n8k16_bf16(dp[1], va[ks], b1, dp[1]);
      }
      // Pᵀ and dSᵀ in place of Sᵀ and dPᵀ; element e of tile f: key key[e / 2], query 16kk + 8f + 2t + e % 2.
      if constexpr (kRowForm) {
        bwd_scores_by_row<L::kLdBias>(p, s, dp, s_colsum, sbias, s_lse, s_delta, row_lo, row_hi, full, b, h, i0,
                                      16 * kk, warp, g, t, key);
      } else {
#pragma unroll
        for (int f = 0; f < 2; ++f)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int rr = e / 2, r = 16 * kk + 8 * f + 2 * t + e % 2, i = i0 + r, j = key[rr];
            float pv = 0.f, ds = 0.f;
            if (j < p.Lk && j >= row_lo[r] && j < row_hi[r]) {
              const float bias = p.n_bias > 0 ? sbias[r * L::kLdBias + 16 * warp + g + 8 * rr] : 0.f;
              pv = __expf(s[f].r[e] * p.scale + bias - s_lse[r]);
              ds = pv * (dp[f].r[e] - s_delta[r]);
#pragma unroll
              for (int bt = 0; bt < kMaxBiases; ++bt) {
                const DbiasDesc& db = p.dbias[bt];
                if (!db.ptr) continue;
                if (db.sum_i) {
                  colsum[bt][rr] += ds;
                } else {
                  float* el = db.ptr + b * db.s[0] + h * db.s[1] + i * db.s[2] + j * db.s[3];
                  if (db.shared) atomicAdd(el, ds);
                  else *el += ds;
                }
              }
            }
            s[f].r[e] = pv;
            dp[f].r[e] = ds;
            sds[r * kMmaLdKeys + 16 * warp + g + 8 * rr] = bf16_bits(ds);
          }
      }
      // dV += Pᵀ·dA, dK += dSᵀ·Q over these 16 queries (dA and Q read transposed).
      const MmaFragA pa = mma_c_to_a(s[0], s[1]);
      const MmaFragA dsa = mma_c_to_a(dp[0], dp[1]);
      // Row form: dSᵀ as it lies in the registers, [keys][queries] (its packed pairs are two queries of one key).
      if constexpr (kRowForm) mma_sts_a(sds, kMmaLdKeys, 16 * warp, 16 * kk, lane, dsa);
#pragma unroll
      for (int dn = 0; dn < kDTiles; dn += 2) {
        MmaFragB b0, b1;
        mma_ldsm_bt2(sda, L::kLd, 16 * kk, 8 * dn, lane, b0, b1);
        mma_m16n8k16_bf16(dv[dn], pa, b0, dv[dn]);
        mma_m16n8k16_bf16(dv[dn + 1], pa, b1, dv[dn + 1]);
        mma_ldsm_bt2(sq, L::kLd, 16 * kk, 8 * dn, lane, b0, b1);
        mma_m16n8k16_bf16(dk[dn], dsa, b0, dk[dn]);
        mma_m16n8k16_bf16(dk[dn + 1], dsa, b1, dk[dn + 1]);
      }
    };
    if constexpr (kRowForm) {
      // Unrolled twice, not four times: fully unrolled, the compiler hoists the later slices'
      // shared-memory loads and bias-gradient offsets ahead and spills (ptxas: 188 bytes at Dp = 32
      // within 128 registers).
#pragma unroll 2
      for (int kk = 0; kk < kMmaBlockM / 16; ++kk) slice(kk);
    } else {
#pragma unroll
      for (int kk = 0; kk < kMmaBlockM / 16; ++kk) slice(kk);
    }
    __syncthreads();  // dS complete in shared memory
    if (p.dq_acc) {  // dQ for query rows 16·warp + (0..15) over the CTA's 64 keys (K read transposed)
      MmaFragC dq[kDTiles];
#pragma unroll
      for (int dn = 0; dn < kDTiles; ++dn)
        for (int e = 0; e < 4; ++e) dq[dn].r[e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kMmaBlockN / 16; ++kk) {
        const MmaFragA dsq = kRowForm ? mma_ldsm_at(sds, kMmaLdKeys, 16 * warp, 16 * kk, lane)
                                      : mma_ldsm_a(sds, kMmaLdKeys, 16 * warp, 16 * kk, lane);
#pragma unroll
        for (int dn = 0; dn < kDTiles; dn += 2) {
          MmaFragB b0, b1;
          mma_ldsm_bt2(sk, L::kLd, 16 * kk, 8 * dn, lane, b0, b1);
          mma_m16n8k16_bf16(dq[dn], dsq, b0, dq[dn]);
          mma_m16n8k16_bf16(dq[dn + 1], dsq, b1, dq[dn + 1]);
        }
      }
      if (full && p.D == Dp) {  // row form, every row and column inside: offsets from the lane's first row
        float* row = p.dq_acc + (bh_row + i0 + 16 * warp + g) * Dp + 2 * t;
#pragma unroll
        for (int dn = 0; dn < kDTiles; ++dn)
#pragma unroll
          for (int e = 0; e < 4; ++e) atomicAdd(row + 8 * Dp * (e / 2) + 8 * dn + e % 2, p.scale * dq[dn].r[e]);
      } else {
#pragma unroll
        for (int dn = 0; dn < kDTiles; ++dn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = i0 + 16 * warp + g + 8 * (e / 2), d = 8 * dn + 2 * t + e % 2;
            if (i < i_end && d < p.D) atomicAdd(p.dq_acc + (bh_row + i) * p.D + d, p.scale * dq[dn].r[e]);
          }
      }
    }
  }

  // dK = scale · Σ dSᵀ Q, dV = Σ Pᵀ dA.
#pragma unroll
  for (int dn = 0; dn < kDTiles; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = key[e / 2], d = 8 * dn + 2 * t + e % 2;
      if (j >= p.Lk || d >= p.D) continue;
      if (p.dk)
        static_cast<__nv_bfloat16*>(p.dk)[b * p.dk_s[0] + h * p.dk_s[1] + j * p.dk_s[2] + d] = __float2bfloat16(p.scale * dk[dn].r[e]);
      if (p.dv)
        static_cast<__nv_bfloat16*>(p.dv)[b * p.dv_s[0] + h * p.dv_s[1] + j * p.dv_s[2] + d] = __float2bfloat16(dv[dn].r[e]);
    }
  // dbias summed over query rows: the 4 lanes of a key hold its partial sums; reduce, then write.
#pragma unroll
  for (int bt = 0; bt < kMaxBiases; ++bt) {
    const DbiasDesc& db = p.dbias[bt];
    if (!db.ptr || !db.sum_i) continue;  // uniform over the CTA
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float total = kRowForm ? s_colsum[(2 * bt + rr) * kThreads] : colsum[kRowForm ? 0 : bt][rr];
      total += __shfl_xor_sync(0xffffffffu, total, 1);
      total += __shfl_xor_sync(0xffffffffu, total, 2);
      if (t == 0 && key[rr] < p.Lk) {
        float* el = db.ptr + b * db.s[0] + h * db.s[1] + key[rr] * db.s[3];
        if (db.shared) atomicAdd(el, total);
        else *el += total;
      }
    }
  }
}

}  // namespace

void launch_attention_bwd_mma(const AttnParams& p, cudaStream_t stream) {
  dispatch_head_dim(p.D, "attention_backward (CUDA, mma)", [&](auto dp) {
    constexpr int Dp = decltype(dp)::value;
    using L = BwdMmaLayout<Dp>;
    const size_t bytes = p.n_bias > 0 ? L::kBytes : L::kBytesNoBias;
    const auto run = [&](auto row_form) {
      constexpr auto kernel = &attention_bwd_mma_kernel<Dp, decltype(row_form)::value>;
      FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes)));
      launch_over_batch<kernel>(p, (p.Lk + kMmaBlockN - 1) / kMmaBlockN, bytes, stream);
    };
    // The row form at head dims up to 32 (AlphaFold's); at 64 it needs 224 registers (2 CTAs per SM
    // against the per-score form's 3) and spills within 168.
    if constexpr (Dp <= 32) {
      if (attention_bwd_row_form()) return run(std::true_type{});
    }
    run(std::false_type{});
  });
}

}  // namespace detail
}  // namespace foldcore::ops::cuda
