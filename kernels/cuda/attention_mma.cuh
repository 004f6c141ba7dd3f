// Pieces of the register-tiled bf16 attention kernels (attention_fwd_mma_cuda.cu,
// attention_bwd_mma_cuda.cu, attention_dbias_mma_cuda.cu): bf16 bit handling, the tile loader
// (16-byte global loads into row-major shared-memory tiles: the kernels read transposed operands
// with ldmatrix.trans, so no tile is stored transposed), the biases' fp32 tile, and the fragment
// loads: 32-bit loads (the dbias pass) and ldmatrix / ldmatrix.trans (the forward and backward
// kernels).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/mma.cuh"

namespace foldcore::ops::cuda::detail {

constexpr int kMmaBlockM = 64;  // query rows per CTA: 4 warps × 16 rows
constexpr int kMmaBlockN = 64;  // keys per tile

// Row stride (in bf16) of a [rows][Dp] tile: +8 elements keeps the 8 rows a fragment load touches
// in distinct banks (row stride ≡ 4 words mod 32 for Dp = 16, 32, 64 → (Dp + 8) / 2 words).
template <int Dp> constexpr int mma_ld_rows() { return Dp + 8; }
// Row stride of a [rows][64 keys] tile (the backward's dS): 72 bf16 = 36 words ≡ 4 mod 32.
constexpr int kMmaLdKeys = kMmaBlockN + 8;

__device__ __forceinline__ uint16_t bf16_bits(float x) {
  const __nv_bfloat16 h = __float2bfloat16(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
__device__ __forceinline__ float bf16_to_f32(uint16_t u) { return __uint_as_float(static_cast<uint32_t>(u) << 16); }
__device__ __forceinline__ uint32_t pack_f32_bf16(float lo, float hi) { return mma_pack(bf16_bits(lo), bf16_bits(hi)); }

// Two adjacent bf16 (4-byte aligned; shared or global memory) as one register, and one register stored so.
__device__ __forceinline__ uint32_t ld32(const uint16_t* p) {
#if defined(FOLDCORE_CUDA_EMULATE)
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}
__device__ __forceinline__ void st32(uint16_t* p, uint32_t v) {
#if defined(FOLDCORE_CUDA_EMULATE)
  std::memcpy(p, &v, 4);
#else
  *reinterpret_cast<uint32_t*>(p) = v;
#endif
}

// 8 bf16 = 16 bytes, loaded and stored as one vector.
struct alignas(16) Bf16x8 {
  uint32_t w[4];
};
__device__ __forceinline__ Bf16x8 ld128(const uint16_t* p) {
  Bf16x8 v;
#if defined(FOLDCORE_CUDA_EMULATE)
  std::memcpy(&v, p, 16);
#else
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  v.w[0] = u.x;
  v.w[1] = u.y;
  v.w[2] = u.z;
  v.w[3] = u.w;
#endif
  return v;
}
__device__ __forceinline__ void st128(uint16_t* p, const Bf16x8& v) {
#if defined(FOLDCORE_CUDA_EMULATE)
  std::memcpy(p, &v, 16);
#else
  *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#endif
}

// Rows [r0, r0 + R) of a [L, D] bf16 slice (row stride rs elements, last-dim stride 1) into smem,
// row-major [R][ld]. Rows ≥ rend and columns ≥ D are zero. All threads of the CTA call it. vec8
// (D % 8 == 0, base and rs 16-byte aligned, dst and ld likewise): 16-byte loads and stores.
template <int R, int Dp>
__device__ __forceinline__ void mma_load_tile(uint16_t* dst, int ld, const uint16_t* base, int64_t rs, int r0, int rend,
                                              int D, bool vec8) {
  if (vec8) {
    constexpr int kVec = Dp / 8;  // vectors per row
    for (int idx = threadIdx.x; idx < R * kVec; idx += kThreads) {
      const int r = idx / kVec, c = (idx % kVec) * 8;
      Bf16x8 v{};
      if (r0 + r < rend && c < D) v = ld128(base + static_cast<int64_t>(r0 + r) * rs + c);
      st128(dst + r * ld + c, v);
    }
    return;
  }
  for (int idx = threadIdx.x; idx < R * Dp; idx += kThreads) {
    const int r = idx / Dp, c = idx % Dp;
    uint16_t v = 0;
    if (r0 + r < rend && c < D) v = base[static_cast<int64_t>(r0 + r) * rs + c];
    dst[r * ld + c] = v;
  }
}

// cp.async (sm_80 and later): 16 bytes global → shared without passing through registers, so a
// tile's loads fly while the warps compute on the previous tile. Only the first `bytes` (0..16,
// even) are read; the rest of the 16 are zero-filled (bytes = 0: nothing is read; src must still
// be a valid address). commit closes a group of copies; wait<N> returns when at most N groups are
// still in flight (this thread's copies; a __syncthreads after it makes every thread's visible).
// The host emulation copies at once.
__device__ __forceinline__ void cp_async16_n(uint16_t* dst, const uint16_t* src, int bytes) {
#if defined(FOLDCORE_CUDA_EMULATE)
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  std::memset(reinterpret_cast<unsigned char*>(dst) + bytes, 0, static_cast<size_t>(16 - bytes));
#else
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async16(uint16_t* dst, const uint16_t* src, bool valid) {
  cp_async16_n(dst, src, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async_commit() {
#if !defined(FOLDCORE_CUDA_EMULATE)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if !defined(FOLDCORE_CUDA_EMULATE)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// mma_load_tile's vec8 case through cp.async (issued, not waited for): rows [r0, r0 + R) of a
// [L, D] bf16 slice into smem [R][ld]; rows ≥ rend and columns ≥ D zero. D % 8 == 0, base, rs,
// dst and ld 16-byte aligned. All threads of the CTA call it; the trip count is a constant, so
// every thread's copies are issued back to back.
template <int R, int Dp>
__device__ __forceinline__ void mma_async_tile(uint16_t* dst, int ld, const uint16_t* base, int64_t rs, int r0, int rend,
                                               int D) {
  constexpr int kVec = Dp / 8, kTotal = R * kVec;
#pragma unroll
  for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
    const int idx = static_cast<int>(threadIdx.x) + it * kThreads;
    if (kTotal % kThreads != 0 && idx >= kTotal) break;
    const int r = idx / kVec, c = (idx % kVec) * 8;
    const bool valid = r0 + r < rend && c < D;
    cp_async16(dst + r * ld + c, valid ? base + static_cast<int64_t>(r0 + r) * rs + c : base, valid);
  }
}

// Row stride (bf16) of a staged bias tile [rows][64 keys]: 72 = 36 words ≡ 4 mod 32, so a warp's
// 4-byte reads (lane 4g + t: row g, keys 2t, 2t + 1) hit 32 distinct banks.
constexpr int kMmaLdBiasRaw = kMmaBlockN + 8;

// Rows of bias t staged per tile: 1 when its rows are broadcast (stride 0: a key mask), else 64.
__host__ __device__ inline int mma_bias_stage_rows(const BiasDesc& d) { return d.s[2] == 0 ? 1 : kMmaBlockM; }

// The biases of a [64 rows × 64 keys] score block of (b, h) as raw bf16 tiles, one after another
// ([rows_t][kMmaLdBiasRaw] each). A vec8 bias goes through cp.async, 8 keys per copy (the last
// vector of a row partly, when Lk % 8 != 0); a bias that is not vec8 must have broadcast rows (a
// key mask with keys off the 16-byte grid, mma_async_bias_ok): its 64 keys are read by plain loads
// and stored by the first 64 threads (their stores wait for the loads). Rows past Lq and keys
// past Lk are 0 (their scores are masked).
__device__ __forceinline__ void mma_async_bias(uint16_t* dst, const AttnParams& p, int b, int h, int r0, int c0) {
  constexpr int kVec = kMmaBlockN / 8;
  for (int t = 0; t < p.n_bias; ++t) {
    const BiasDesc& d = p.bias[t];
    const int rows = mma_bias_stage_rows(d);
    const uint16_t* base = static_cast<const uint16_t*>(d.ptr) + b * d.s[0] + h * d.s[1];
    if (d.vec8) {
      for (int idx = threadIdx.x; idx < rows * kVec; idx += kThreads) {
        const int r = idx / kVec, c = (idx % kVec) * 8, i = r0 + r, j = c0 + c;
        const int keys = i < p.Lq ? min(8, max(0, p.Lk - j)) : 0;
        cp_async16_n(dst + r * kMmaLdBiasRaw + c, keys > 0 ? base + static_cast<int64_t>(i) * d.s[2] + j : base, 2 * keys);
      }
    } else {
      for (int c = threadIdx.x; c < kMmaBlockN; c += kThreads) {
        const int j = c0 + c;
        dst[c] = j < p.Lk ? base[static_cast<int64_t>(j) * d.s[3]] : uint16_t{0};
      }
    }
    dst += rows * kMmaLdBiasRaw;
  }
}

// Whether every bias can be staged by mma_async_bias: read 8 keys at a time, or with broadcast rows.
inline bool mma_async_bias_ok(const AttnParams& p) {
  for (int t = 0; t < p.n_bias; ++t)
    if (!p.bias[t].vec8 && p.bias[t].s[2] != 0) return false;
  return true;
}

// A fragment of rows [row0, row0 + 16) × columns [k0, k0 + 16) of a row-major bf16 smem tile.
__device__ __forceinline__ MmaFragA mma_lds_a(const uint16_t* s, int ld, int row0, int k0, int lane) {
  MmaFragA f;
#pragma unroll
  for (int q = 0; q < 4; ++q) f.r[q] = ld32(s + (row0 + mma_a_row(lane, 2 * q)) * ld + k0 + mma_a_col(lane, 2 * q));
  return f;
}

// B fragment (k × n = 16 × 8) whose column n is row n0 + n of a smem tile stored [n][k] (row
// stride ld): element (k, n) = s[(n0 + n)·ld + k0 + k]. For S = Q·Kᵀ that tile is K [keys][d];
// for O = P·V it is Vᵀ [d][keys].
__device__ __forceinline__ MmaFragB mma_lds_b(const uint16_t* s, int ld, int n0, int k0, int lane) {
  MmaFragB f;
#pragma unroll
  for (int q = 0; q < 2; ++q) f.r[q] = ld32(s + (n0 + mma_b_col(lane, 2 * q)) * ld + k0 + mma_b_row(lane, 2 * q));
  return f;
}

// The same fragments through ldmatrix (four 8×8 b16 matrices per instruction: lanes 8m..8m+7 give
// the 16-byte row addresses of matrix m, and register m of lane 4g + t receives its row g, columns
// 2t and 2t + 1; with .trans, rows 2t and 2t + 1 of column g). One instruction replaces four or
// eight 32-bit loads. Rows must start 16-byte aligned: tile bases and strides (ld·2 bytes) are
// multiples of 16, columns multiples of 8. The host emulation forms the same registers from the
// 32-bit loads above (or the element loads of the transposed case), so both backends agree.
#if !defined(FOLDCORE_CUDA_EMULATE)
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* row_addr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* row_addr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
#endif

// mma_lds_a by ldmatrix: matrices (rows 0-7 | 8-15) × (columns 0-7 | 8-15), in the A registers' order.
__device__ __forceinline__ MmaFragA mma_ldsm_a(const uint16_t* s, int ld, int row0, int k0, int lane) {
#if defined(FOLDCORE_CUDA_EMULATE)
  return mma_lds_a(s, ld, row0, k0, lane);
#else
  const int m = lane / 8;
  MmaFragA f;
  ldsm_x4(f.r, s + (row0 + lane % 8 + 8 * (m % 2)) * ld + k0 + 8 * (m / 2));
  return f;
#endif
}

// Two B fragments of adjacent n tiles (n0 and n0 + 8) from a tile stored [n][k], as mma_lds_b.
__device__ __forceinline__ void mma_ldsm_b2(const uint16_t* s, int ld, int n0, int k0, int lane, MmaFragB& b0, MmaFragB& b1) {
#if defined(FOLDCORE_CUDA_EMULATE)
  b0 = mma_lds_b(s, ld, n0, k0, lane);
  b1 = mma_lds_b(s, ld, n0 + 8, k0, lane);
#else
  const int m = lane / 8;
  uint32_t r[4];
  ldsm_x4(r, s + (n0 + lane % 8 + 8 * (m / 2)) * ld + k0 + 8 * (m % 2));
  b0.r[0] = r[0];
  b0.r[1] = r[1];
  b1.r[0] = r[2];
  b1.r[1] = r[3];
#endif
}

// Two B fragments of adjacent n tiles (n0 and n0 + 8) from a tile stored [k][n] (row stride ld):
// element (k, n) = s[(k0 + k)·ld + n0 + n]. Row-major Q, dA and K serve dK, dV and dQ this way,
// without transposed copies.
__device__ __forceinline__ void mma_ldsm_bt2(const uint16_t* s, int ld, int k0, int n0, int lane, MmaFragB& b0, MmaFragB& b1) {
#if defined(FOLDCORE_CUDA_EMULATE)
  MmaFragB* out[2] = {&b0, &b1};
  for (int f = 0; f < 2; ++f)
    for (int q = 0; q < 2; ++q) {
      const int k = mma_b_row(lane, 2 * q), n = n0 + 8 * f + mma_b_col(lane, 2 * q);
      out[f]->r[q] = mma_pack(s[(k0 + k) * ld + n], s[(k0 + k + 1) * ld + n]);
    }
#else
  const int m = lane / 8;
  uint32_t r[4];
  ldsm_x4_trans(r, s + (k0 + lane % 8 + 8 * (m % 2)) * ld + n0 + 8 * (m / 2));
  b0.r[0] = r[0];
  b0.r[1] = r[1];
  b1.r[0] = r[2];
  b1.r[1] = r[3];
#endif
}

// An A fragment of rows [row0, row0 + 16) × columns [k0, k0 + 16) of a row-major bf16 smem tile
// (mma_lds_a's inverse: four 32-bit stores; the backward's dSᵀ, stored as the registers hold it).
__device__ __forceinline__ void mma_sts_a(uint16_t* s, int ld, int row0, int k0, int lane, const MmaFragA& f) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint16_t* at = s + (row0 + mma_a_row(lane, 2 * q)) * ld + k0 + mma_a_col(lane, 2 * q);
#if defined(FOLDCORE_CUDA_EMULATE)
    std::memcpy(at, &f.r[q], 4);
#else
    *reinterpret_cast<uint32_t*>(at) = f.r[q];
#endif
  }
}

// The A fragment of rows [m0, m0 + 16) × columns [k0, k0 + 16) of a matrix stored transposed, [k][m]
// (element (m, k) = s[(k0 + k)·ld + m0 + m]), by ldmatrix.trans: matrices (k 0-7 | 8-15) × (m 0-7 |
// 8-15) in the A registers' order (rows g and g + 8, then columns 8-15).
__device__ __forceinline__ MmaFragA mma_ldsm_at(const uint16_t* s, int ld, int m0, int k0, int lane) {
  MmaFragA f;
#if defined(FOLDCORE_CUDA_EMULATE)
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int m = m0 + mma_a_row(lane, 2 * q), k = k0 + mma_a_col(lane, 2 * q);
    f.r[q] = mma_pack(s[k * ld + m], s[(k + 1) * ld + m]);
  }
#else
  const int mi = lane / 8;
  ldsm_x4_trans(f.r, s + (k0 + lane % 8 + 8 * (mi / 2)) * ld + m0 + 8 * (mi % 2));
#endif
  return f;
}

// An accumulator tile (16 rows × 16 columns = two C fragments c0 | c1, fp32) as the A fragment of
// the next product (FlashAttention-2's register reuse: P = softmax(S) feeds P·V without smem).
__device__ __forceinline__ MmaFragA mma_c_to_a(const MmaFragC& c0, const MmaFragC& c1) {
  MmaFragA a;
  a.r[0] = pack_f32_bf16(c0.r[0], c0.r[1]);  // row g,     columns 2t, 2t+1
  a.r[1] = pack_f32_bf16(c0.r[2], c0.r[3]);  // row g + 8, columns 2t, 2t+1
  a.r[2] = pack_f32_bf16(c1.r[0], c1.r[1]);  // row g,     columns 8 + 2t, 9 + 2t
  a.r[3] = pack_f32_bf16(c1.r[2], c1.r[3]);  // row g + 8
  return a;
}

// The biases' sum over a [64 rows × 64 keys] block of the score matrix of (b, h), staged as fp32
// in shared memory ([64][Ld], row r = score row r0 + r, column c = key c0 + c) once per tile, so a
// score costs one shared-memory read instead of one global load per bias: a warp's scalar bias
// loads touch 8 rows' cache lines each, and at head dim 32 they outnumbered the tile's mma
// instructions. The sum runs from 0 over the biases in order, as bias_sum does (and the loads per score
// did before), so the scores are the same bits. Rows past Lq and keys past Lk are 0 (their scores are masked).
// Biases with vec8 are read 8 keys (16 bytes) per load where the 8 keys are whole and aligned;
// others (transposed or broadcast keys, ragged rows) one element at a time. All threads call it.
template <int Ld>
__device__ __forceinline__ void mma_load_bias_tile(float* dst, const AttnParams& p, int b, int h, int r0, int c0) {
  static_assert(Ld % 4 == 0, "float4 stores: rows 16-byte aligned");
  constexpr int kVec = kMmaBlockN / 8;  // 8-key vectors per row
  for (int idx = threadIdx.x; idx < kMmaBlockM * kVec; idx += kThreads) {
    const int r = idx / kVec, c = (idx % kVec) * 8, i = r0 + r, j = c0 + c;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (i < p.Lq) {
#pragma unroll
      for (int t = 0; t < kMaxBiases; ++t) {
        if (t >= p.n_bias) break;
        const BiasDesc& d = p.bias[t];
        const uint16_t* row = static_cast<const uint16_t*>(d.ptr) + b * d.s[0] + h * d.s[1] + static_cast<int64_t>(i) * d.s[2];
        if (d.vec8 && j % 8 == 0 && j + 8 <= p.Lk) {
          const Bf16x8 v = ld128(row + j);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[e] += bf16_to_f32(static_cast<uint16_t>(v.w[e / 2] >> (16 * (e % 2))));
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (j + e < p.Lk) acc[e] += bf16_to_f32(row[static_cast<int64_t>(j + e) * d.s[3]]);
        }
      }
    }
#if defined(FOLDCORE_CUDA_EMULATE)
    std::memcpy(dst + r * Ld + c, acc, sizeof(acc));
#else
    float4* out = reinterpret_cast<float4*>(dst + r * Ld + c);
    out[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    out[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
#endif
  }
}

// Two adjacent floats of shared memory (8-byte aligned), read as one 8-byte load.
struct alignas(8) F32x2 {
  float x, y;
};
__device__ __forceinline__ F32x2 lds64f(const float* p) {
  F32x2 v;
#if defined(FOLDCORE_CUDA_EMULATE)
  std::memcpy(&v, p, 8);
#else
  const float2 u = *reinterpret_cast<const float2*>(p);
  v.x = u.x;
  v.y = u.y;
#endif
  return v;
}

// Whether a bias's rows can be read 8 keys at a time (BiasDesc::vec8): unit stride along the keys,
// every row start 16-byte aligned.
inline bool mma_bias_vec8_ok(const BiasDesc& d) {
  return reinterpret_cast<uintptr_t>(d.ptr) % 16 == 0 && d.s[3] == 1 && d.s[0] % 8 == 0 && d.s[1] % 8 == 0 && d.s[2] % 8 == 0;
}

// Whether q, k and v of every (b, h) can be read 16 bytes at a time (AttnParams::vec8).
inline bool mma_vec8_ok(const AttnParams& p) {
  if (p.D % 8 != 0) return false;
  const std::pair<const void*, const int64_t*> ts[] = {{p.q, p.q_s}, {p.k, p.k_s}, {p.v, p.v_s}};
  for (const auto& [ptr, st] : ts) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (st[d] % 8 != 0) return false;
  }
  return true;
}

// Whether the register-tiled kernels compute this call (bf16, AttentionKernel::mma chosen); when
// they do, also sets p.vec8 and the biases' vec8. Forward and backward ask the same.
inline bool use_mma_kernels(AttnParams& p, DType dtype) {
  if (dtype != DType::bf16 || attention_kernel() != AttentionKernel::mma) return false;
  p.vec8 = mma_vec8_ok(p);
  for (int t = 0; t < p.n_bias; ++t) p.bias[t].vec8 = mma_bias_vec8_ok(p.bias[t]);
  return true;
}

// The kernels' launchers (p filled as for the shared-memory kernels; bf16 tensors).
void launch_attention_fwd_mma(const AttnParams& p, cudaStream_t stream);
// The backward's main kernel; p.delta, p.da (and p.dq_acc when dq is wanted) filled by the caller.
void launch_attention_bwd_mma(const AttnParams& p, cudaStream_t stream);
// The batch-reduced bias-gradient pass (attention_dbias_mma_cuda.cu): p.dbias holds only the
// biases shared by the batch rows, with `shared` set for the other broadcast dims.
void launch_attention_dbias_mma(const AttnParams& p, cudaStream_t stream);
// The backward composed of cuBLASLt products (attention_composed_cuda.cu) in place of the main
// kernel and the dq conversion: p as for the main kernel after the preprocess (p.delta filled, the
// fresh dbias slots zeroed; p.dq_acc unused), `da` the preprocess's bf16 dA scratch.
void run_attention_bwd_composed(const AttentionInputs& in, const AttnParams& p, const AttentionGrads& grads,
                                const Tensor& da, cudaStream_t stream);

}  // namespace foldcore::ops::cuda::detail
