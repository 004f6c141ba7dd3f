// CPU fused gated attention and AlphaFold2 global attention. Forward: OpenMP over (b, h, query
// tile), the two contractions as single-threaded sgemm calls on a materialised fp32 score tile.
// Backward: OpenMP over (b, h) (each owns its dK, dV), the same query tiles, P recomputed from the
// forward's log-sum-exp and the five contractions as single-threaded sgemm calls.
#include "kernels/cpu/attention_cpu.h"

#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/softmax_cpu_math.h"

#include <omp.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FOLDCORE_ATTENTION_AVX512 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace foldcore::ops::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kMaxFusedBiases = 4;

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// Element strides of a [B,H,L,D] view (D stride is 1 by contract).
struct Rows {
  char* base = nullptr;
  int64_t sb = 0, sh = 0, sl = 0;
  size_t esize = 0;
  Rows() = default;
  explicit Rows(const Tensor& t)
      : base(t.defined() ? static_cast<char*>(t.data_ptr()) : nullptr),
        sb(t.defined() ? t.stride(0) : 0),
        sh(t.defined() ? t.stride(1) : 0),
        sl(t.defined() ? t.stride(2) : 0),
        esize(dtype_size(t.dtype())) {}
  template <typename T> T* row(int64_t b, int64_t h, int64_t i) const {
    return reinterpret_cast<T*>(base + (b * sb + h * sh + i * sl) * static_cast<int64_t>(esize));
  }
};

// A bias (or dbias) broadcast to [B,H,Lq,Lk]: size-1 dims get stride 0, so indexing with the
// full coordinates reads the broadcast value (or, for dbias, sums into the reduced element).
struct Broadcast4 {
  char* base = nullptr;
  int64_t s[4] = {0, 0, 0, 0};
  size_t esize = 0;
  explicit Broadcast4(const Tensor& t) : base(static_cast<char*>(t.data_ptr())), esize(dtype_size(t.dtype())) {
    for (int d = 0; d < 4; ++d) s[d] = t.size(d) == 1 ? 0 : t.stride(d);
  }
  template <typename T> T* at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return reinterpret_cast<T*>(base + (b * s[0] + h * s[1] + i * s[2] + j * s[3]) * static_cast<int64_t>(esize));
  }
  bool shared_over_bh(int64_t B, int64_t H) const { return (s[0] == 0 && B > 1) || (s[1] == 0 && H > 1); }
};

// A work unit of one (b, h): queries [q0, q1) against keys [k0, k1) (one packed segment,
// or all keys), small enough that its score tile stays in cache.
struct Tile {
  int64_t q0, q1, k0, k1;
};

// Score-tile budget: 32 Ki floats (128 KiB, in L2 next to the K and V panels); at least 16 query
// rows per tile so that the P·V product still has some height.
constexpr int64_t kTileFloats = 32 * 1024, kMinTileRows = 16, kMaxTileRows = 128;

std::vector<Tile> make_tiles(const AttentionInputs& in, int64_t min_rows = kMinTileRows) {
  std::vector<std::pair<int64_t, int64_t>> q_segs, k_segs;
  if (in.cu_seqlens.defined()) {
    const int32_t* c = in.cu_seqlens.data<int32_t>();
    for (int64_t t = 0; t + 1 < in.cu_seqlens.size(0); ++t) {
      q_segs.emplace_back(c[t], c[t + 1]);
      k_segs.emplace_back(c[t], c[t + 1]);
    }
  } else {
    q_segs.emplace_back(0, in.q.size(2));
    k_segs.emplace_back(0, in.k.size(2));
  }
  std::vector<Tile> tiles;
  for (size_t t = 0; t < q_segs.size(); ++t) {
    const auto [k0, k1] = k_segs[t];
    const int64_t rows = std::clamp(kTileFloats / std::max<int64_t>(k1 - k0, 1), min_rows, kMaxTileRows);
    for (int64_t i = q_segs[t].first; i < q_segs[t].second; i += rows)
      tiles.push_back({i, std::min(q_segs[t].second, i + rows), k0, k1});
  }
  return tiles;
}

// Rows [r0, r1) of (b, h) as an fp32 matrix for sgemm: the tensor's own memory (leading dim = its
// row stride) when it is fp32 with rows at least D apart, else converted into `scratch`.
template <typename T>
const float* f32_rows(const Rows& r, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t D, std::vector<float>& scratch,
                      int64_t& ld) {
  if constexpr (std::is_same_v<T, float>) {
    if (r.sl >= D) {
      ld = r.sl;
      return r.row<const float>(b, h, r0);
    }
  }
  scratch.resize(static_cast<size_t>((r1 - r0) * D));
  for (int64_t j = r0; j < r1; ++j) {
    const T* src = r.row<const T>(b, h, j);
    for (int64_t d = 0; d < D; ++d) scratch[(j - r0) * D + d] = static_cast<float>(src[d]);
  }
  ld = D;
  return scratch.data();
}

// s[j] += bias[b, h, i, k0 + j] for j < n: a unit-stride fp32 row (the common case: pair biases,
// mask rows) as a plain vectorisable loop, a row broadcast along j as one scalar, else per element.
template <typename T>
void add_bias_row(const Broadcast4& bt, int64_t b, int64_t h, int64_t i, int64_t k0, int64_t n, float* s) {
  const T* row = bt.at<const T>(b, h, i, k0);
  if (bt.s[3] == 0) {
    const float v = static_cast<float>(*row);
    for (int64_t j = 0; j < n; ++j) s[j] += v;
  } else if (bt.s[3] == 1) {
    for (int64_t j = 0; j < n; ++j) s[j] += static_cast<float>(row[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) s[j] += static_cast<float>(row[j * bt.s[3]]);
  }
}

// db[b, h, i, k0 + j] += x[j] for j < n (fp32 bias gradients): unit stride as a vectorisable
// loop, a gradient broadcast along j (size 1) takes the row's sum, else per element.
inline void add_into_bias_row(const Broadcast4& db, int64_t b, int64_t h, int64_t i, int64_t k0, int64_t n,
                              const float* x) {
  float* row = db.at<float>(b, h, i, k0);
  if (db.s[3] == 0) {
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += x[j];
    *row += sum;
  } else if (db.s[3] == 1) {
    for (int64_t j = 0; j < n; ++j) row[j] += x[j];
  } else {
    for (int64_t j = 0; j < n; ++j) row[j * db.s[3]] += x[j];
  }
}

// p = hi + lo + r with hi = bf16(p), lo = bf16(p − hi) (round to nearest even), |r| ≤ 2⁻¹⁶·|p|:
// the softmax weights as two bf16 matrices for the tiles' P·V, which then carries P to 16
// significant bits (the output is rounded to bf16's 8 afterwards). p is finite (0 ≤ p ≤ 1).
void split_bf16(const float* p, int64_t n, uint16_t* hi, uint16_t* lo) {
  for (int64_t j = 0; j < n; ++j) {
    hi[j] = bf16::from_float(p[j]);
    lo[j] = bf16::from_float(p[j] - bf16::to_float(hi[j]));
  }
}

#ifdef FOLDCORE_ATTENTION_AVX512
// The tile path's row pass on AVX-512 (every CPU with AMX has it): s[j] = s[j]·scale, plus each
// bias row in order, and max_j s[j], in one pass instead of three, with the scalar steps'
// operations (the multiply and the adds apart: no contraction). Biases: bf16 rows of unit stride
// along the keys. (The zero-masking intrinsic forms: the plain ones start from
// _mm512_undefined_epi32, which GCC 12 flags as maybe-uninitialized.)
__attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off"))) float scale_bias_max_avx512(
    float* s, int64_t n, float scale, const uint16_t* const* rows, int nrows) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(kNegInf);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + j), sc);
    for (int b = 0; b < nrows; ++b) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[b] + j));
      v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16)));
    }
    _mm512_storeu_ps(s + j, v);
    mx = _mm512_maskz_max_ps(0xFFFF, mx, v);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx);
  float m = kNegInf;
  for (const float l : lanes) m = std::max(m, l);
  for (; j < n; ++j) {
    float v = s[j] * scale;
    for (int b = 0; b < nrows; ++b) v += bf16::to_float(rows[b][j]);
    s[j] = v;
    m = std::max(m, v);
  }
  return m;
}

// (u + 0x7fff + ((u >> 16) & 1)) >> 16 on 16 lanes: fp32 bits to bf16 bits, to nearest even.
__attribute__((target("avx512f,avx512bw"))) inline __m512i round_to_bf16_bits(__m512i u) {
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, u, 16), _mm512_set1_epi32(1));
  return _mm512_maskz_srli_epi32(0xFFFF, _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
}

// split_bf16 on 16 lanes, bf16::from_float's integer rounding (finite inputs).
__attribute__((target("avx512f,avx512bw"))) void split_bf16_avx512(const float* p, int64_t n, uint16_t* hi,
                                                                   uint16_t* lo) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(p + j);
    const __m512i h = round_to_bf16_bits(_mm512_castps_si512(x));
    const __m512 r = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, h, 16)));
    const __m512i l = round_to_bf16_bits(_mm512_castps_si512(r));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + j), _mm512_maskz_cvtepi32_epi16(0xFFFF, h));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + j), _mm512_maskz_cvtepi32_epi16(0xFFFF, l));
  }
  split_bf16(p + j, n - j, hi + j, lo + j);
}
#endif

// Forward, one query tile at a time: S = scale·Q·Kᵀ (sgemm) + biases, row softmax in place
// (unnormalised p = exp(s − max), lse = max + log Σp), A = P·V (sgemm) scaled by 1/Σp, then the
// gate. Each OpenMP thread owns whole tiles and calls the single-threaded sgemm, so the
// contractions run at BLAS speed even for AlphaFold's short heads (D = 8-32) and long key axes.
// bf16 inputs on a CPU with AMX tiles: both contractions on the tiles instead (Q·Kᵀ from the bf16
// rows as they are, fp32 sums; P·V with P split into two bf16 terms, split_bf16), no fp32 copies
// of Q, K and V.
template <typename T> void forward_impl(const AttentionInputs& in, const Tensor& o, const Tensor& lse, const Tensor& a) {
  const int64_t B = in.q.size(0), H = in.q.size(1), D = in.q.size(3);
  const bool tiles_bf16 = std::is_same_v<T, bf16> && amx_bf16_available();
  // The fused row pass takes up to kMaxFusedBiases biases, each unit-stride along the keys.
  bool fused_rows = in.biases.size() <= kMaxFusedBiases;
  for (const Tensor& t : in.biases) fused_rows = fused_rows && (t.size(3) == 1 ? false : t.stride(3) == 1);
  const Rows qr(in.q), kr(in.k), vr(in.v), gr(in.gate), orr(o), ar(a);
  std::vector<Broadcast4> biases;
  for (const Tensor& t : in.biases) biases.emplace_back(t);
  const std::vector<Tile> tiles = make_tiles(in, tiles_bf16 ? 2 * kMinTileRows : kMinTileRows);  // the tiles compute 32 rows at once
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
  const bool gated = in.gate.defined();
  float* lse_p = lse.data<float>();
  const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1), ls2 = lse.stride(2);

#pragma omp parallel
  {
    std::vector<float> qs, ks, vs, s, acc, inv;
    std::vector<uint16_t> p_hi, p_lo;
    AmxPackedB k_tiles, v_tiles;  // K and V of the current (b, h) and key range, on the AMX path
    // K and V rows in fp32, kept while this thread's consecutive tiles share (b, h) and the key
    // range (schedule(static) hands each thread a contiguous run of tiles): one conversion per
    // (b, h) instead of one per query tile (at long keys, 16-row tiles: 1/16 of the products).
    int64_t kv_bh = -1, kv_k0 = -1, kv_k1 = -1, ldk = 0, ldv = 0;
    const float *kf = nullptr, *vf = nullptr;
#pragma omp for schedule(static)
    for (int64_t w = 0; w < B * H * n_tiles; ++w) {
      const int64_t bh = w / n_tiles, b = bh / H, h = bh % H;
      const Tile& t = tiles[static_cast<size_t>(w % n_tiles)];
      const int64_t m = t.q1 - t.q0, n = t.k1 - t.k0;
      s.resize(static_cast<size_t>(m * std::max<int64_t>(n, 1)));
      acc.assign(static_cast<size_t>(m * D), 0.f);
      inv.resize(static_cast<size_t>(m));
      if (tiles_bf16) {
        if (n > 0 && (bh != kv_bh || t.k0 != kv_k0 || t.k1 != kv_k1)) {
          k_tiles.pack(true, D, n, kr.row<const bf16>(b, h, t.k0), kr.sl);
          v_tiles.pack(false, n, D, vr.row<const bf16>(b, h, t.k0), vr.sl);
          kv_bh = bh, kv_k0 = t.k0, kv_k1 = t.k1;
        }
        if (n > 0) k_tiles.multiply(m, qr.row<const bf16>(b, h, t.q0), qr.sl, s.data(), n, false);
      } else {
        int64_t ldq = 0;
        const float* qf = f32_rows<T>(qr, b, h, t.q0, t.q1, D, qs, ldq);
        if (n > 0 && (bh != kv_bh || t.k0 != kv_k0 || t.k1 != kv_k1)) {
          kf = f32_rows<T>(kr, b, h, t.k0, t.k1, D, ks, ldk);
          vf = f32_rows<T>(vr, b, h, t.k0, t.k1, D, vs, ldv);
          kv_bh = bh, kv_k0 = t.k0, kv_k1 = t.k1;
        }
        if (n > 0) sgemm(false, true, m, n, D, in.scale, qf, ldq, kf, ldk, 0.f, s.data(), n, false);
      }
      if (tiles_bf16) {
        p_hi.resize(static_cast<size_t>(m * n));
        p_lo.resize(static_cast<size_t>(m * n));
      }
      for (int64_t r = 0; r < m; ++r) {
        float* sr = s.data() + r * n;
        float mx = kNegInf;
#ifdef FOLDCORE_ATTENTION_AVX512
        if (tiles_bf16 && fused_rows) {
          const uint16_t* rows[kMaxFusedBiases];
          for (size_t q = 0; q < biases.size(); ++q) rows[q] = biases[q].at<const uint16_t>(b, h, t.q0 + r, t.k0);
          mx = scale_bias_max_avx512(sr, n, in.scale, rows, static_cast<int>(biases.size()));
        } else
#endif
        {
          if (tiles_bf16)  // the scale sgemm's alpha applies on the other path
            for (int64_t j = 0; j < n; ++j) sr[j] *= in.scale;
          for (const Broadcast4& bt : biases) add_bias_row<T>(bt, b, h, t.q0 + r, t.k0, n, sr);
          mx = row_max(sr, n);
        }
        float sum = 0.f;
        if (mx == kNegInf)  // all −inf (or no keys): p = 0, a = 0, lse = −inf
          std::fill(sr, sr + n, 0.f);
        else
          sum = exp_shift_sum(sr, n, mx);
        inv[static_cast<size_t>(r)] = sum > 0.f ? 1.f / sum : 0.f;
        lse_p[b * ls0 + h * ls1 + (t.q0 + r) * ls2] = sum > 0.f ? mx + std::log(sum) : kNegInf;
        if (tiles_bf16) {
#ifdef FOLDCORE_ATTENTION_AVX512
          split_bf16_avx512(sr, n, p_hi.data() + r * n, p_lo.data() + r * n);
#else
          split_bf16(sr, n, p_hi.data() + r * n, p_lo.data() + r * n);
#endif
        }
      }
      if (n > 0 && tiles_bf16) {
        v_tiles.multiply(m, reinterpret_cast<const bf16*>(p_hi.data()), n, acc.data(), D, false);
        v_tiles.multiply(m, reinterpret_cast<const bf16*>(p_lo.data()), n, acc.data(), D, true);
      } else if (n > 0) {
        sgemm(false, false, m, D, n, 1.f, s.data(), n, vf, ldv, 0.f, acc.data(), D, false);
      }
      for (int64_t r = 0; r < m; ++r) {
        const int64_t i = t.q0 + r;
        T* orow = orr.row<T>(b, h, i);
        T* arow = a.defined() ? ar.row<T>(b, h, i) : nullptr;
        const T* grow = gated ? gr.row<const T>(b, h, i) : nullptr;
        const float* ac = acc.data() + r * D;
        for (int64_t d = 0; d < D; ++d) {
          const float av = ac[d] * inv[static_cast<size_t>(r)];
          if (arow) arow[d] = T(av);
          orow[d] = T(gated ? av * sigmoid(static_cast<float>(grow[d])) : av);
        }
      }
    }
  }
}

// Backward, per (b, h) over the forward's query tiles (FlashAttention's backward on the CPU):
//   P = exp(scale·Q·Kᵀ + Σ bias − lse)    dP = dA·Vᵀ    dS = P ⊙ (dP − delta)
//   dV += Pᵀ·dA    dK += dSᵀ·Q (× scale at the end)    dQ = scale·dS·K    dbias += dS
// with dA = dO ⊙ σ(g) and delta = Σ_j P·dP per query row; fp32 accumulation (delta in double).
template <typename T>
void backward_impl(const AttentionInputs& in, const Tensor& a_or_o, const Tensor& lse, const Tensor& d_o,
                   const AttentionGrads& grads) {
  const int64_t B = in.q.size(0), H = in.q.size(1), D = in.q.size(3), Lk = in.k.size(2);
  const Rows qr(in.q), kr(in.k), vr(in.v), gr(in.gate), ar(a_or_o), dor(d_o);
  const Rows dqr(grads.dq), dkr(grads.dk), dvr(grads.dv), dgr(grads.dgate);
  std::vector<Broadcast4> biases;
  for (const Tensor& t : in.biases) biases.emplace_back(t);
  const std::vector<Tile> tiles = make_tiles(in);
  const bool gated = in.gate.defined();
  const float* lse_p = lse.data<float>();
  const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1), ls2 = lse.stride(2);

  // dbias targets. A dbias shared between (b, h) pairs (size 1 in b or h) gets one private
  // contiguous fp32 copy per thread, summed in thread order afterwards (deterministic); the
  // others are owned by exactly one (b, h) and accumulate in place.
  struct DbiasTarget {
    int t;
    Tensor db;
    bool shared;
  };
  std::vector<DbiasTarget> targets;
  for (size_t t = 0; t < grads.dbias.size(); ++t) {
    if (!grads.dbias[t].defined()) continue;
    targets.push_back({static_cast<int>(t), grads.dbias[t], Broadcast4(grads.dbias[t]).shared_over_bh(B, H)});
  }
  const int n_threads = omp_get_max_threads();
  std::vector<std::vector<Tensor>> privates(targets.size());
  for (size_t u = 0; u < targets.size(); ++u)
    if (targets[u].shared)
      for (int th = 0; th < n_threads; ++th) privates[u].push_back(Tensor::zeros(targets[u].db.shape(), DType::f32));

#pragma omp parallel num_threads(n_threads)
  {
    const int th = omp_get_thread_num();
    std::vector<Broadcast4> dbias;  // this thread's view of each target
    for (size_t u = 0; u < targets.size(); ++u) dbias.emplace_back(targets[u].shared ? privates[u][th] : targets[u].db);
    std::vector<float> ks, vs, qs, p, ds, da, dq_tile, dk(static_cast<size_t>(Lk * D)), dv(static_cast<size_t>(Lk * D));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      int64_t ldk = 0, ldv = 0, ldq = 0;
      const float* kf = f32_rows<T>(kr, b, h, 0, Lk, D, ks, ldk);
      const float* vf = f32_rows<T>(vr, b, h, 0, Lk, D, vs, ldv);
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      for (const Tile& t : tiles) {
        const int64_t m = t.q1 - t.q0, n = t.k1 - t.k0;
        da.resize(static_cast<size_t>(m * D));
        // dA = dO ⊙ σ(g); dg = dO ⊙ a ⊙ σ(g)(1 − σ(g)).
        for (int64_t r = 0; r < m; ++r) {
          const int64_t i = t.q0 + r;
          const T* arow = ar.row<const T>(b, h, i);
          const T* dorow = dor.row<const T>(b, h, i);
          const T* grow = gated ? gr.row<const T>(b, h, i) : nullptr;
          T* dgrow = gated && grads.dgate.defined() ? dgr.row<T>(b, h, i) : nullptr;
          float* dar = da.data() + r * D;
          for (int64_t d = 0; d < D; ++d) {
            const float dov = static_cast<float>(dorow[d]), av = static_cast<float>(arow[d]);
            float sg = 1.f;
            if (gated) {
              sg = sigmoid(static_cast<float>(grow[d]));
              if (dgrow) dgrow[d] = T(dov * av * sg * (1.f - sg));
            }
            dar[d] = dov * sg;
          }
        }
        if (n == 0) {  // no keys: p = 0, so dq = 0 (and nothing else)
          if (grads.dq.defined())
            for (int64_t r = 0; r < m; ++r) std::fill_n(dqr.row<T>(b, h, t.q0 + r), D, T(0.f));
          continue;
        }
        const float* qf = f32_rows<T>(qr, b, h, t.q0, t.q1, D, qs, ldq);
        const float* kt = kf + t.k0 * ldk;
        const float* vt = vf + t.k0 * ldv;
        p.resize(static_cast<size_t>(m * n));
        ds.resize(static_cast<size_t>(m * n));
        // P = exp(scale·Q·Kᵀ + Σ bias − lse), recomputed from the forward's log-sum-exp.
        sgemm(false, true, m, n, D, in.scale, qf, ldq, kt, ldk, 0.f, p.data(), n, false);
        for (int64_t r = 0; r < m; ++r) {
          const int64_t i = t.q0 + r;
          float* pr = p.data() + r * n;
          for (const Broadcast4& bt : biases) add_bias_row<T>(bt, b, h, i, t.k0, n, pr);
          const float lse_i = lse_p[b * ls0 + h * ls1 + i * ls2];
          if (lse_i == kNegInf)
            std::fill(pr, pr + n, 0.f);
          else
            (void)exp_shift_sum(pr, n, lse_i);
        }
        // dP = dA·Vᵀ, then dS = P ⊙ (dP − delta) in place, delta = Σ_j P·dP (= Σ_d dA·a, the
        // softmax backward's form from the same P and dP: a one-hot row, as a softmax over one
        // unmasked template, gets dS = 0 exactly, not the rounding difference of two sums).
        sgemm(false, true, m, n, D, 1.f, da.data(), D, vt, ldv, 0.f, ds.data(), n, false);
        for (int64_t r = 0; r < m; ++r) {
          const float* pr = p.data() + r * n;
          float* dsr = ds.data() + r * n;
          double dl = 0;
          for (int64_t j = 0; j < n; ++j) dl += static_cast<double>(pr[j]) * dsr[j];
          const float dlf = static_cast<float>(dl);
          for (int64_t j = 0; j < n; ++j) dsr[j] = pr[j] * (dsr[j] - dlf);
          for (const Broadcast4& db : dbias) add_into_bias_row(db, b, h, t.q0 + r, t.k0, n, dsr);
        }
        // dV += Pᵀ·dA, dK += dSᵀ·Q (scaled at the end), dQ = scale·dS·K.
        if (grads.dv.defined()) sgemm(true, false, n, D, m, 1.f, p.data(), n, da.data(), D, 1.f, dv.data() + t.k0 * D, D, false);
        if (grads.dk.defined()) sgemm(true, false, n, D, m, 1.f, ds.data(), n, qf, ldq, 1.f, dk.data() + t.k0 * D, D, false);
        if (grads.dq.defined()) {
          dq_tile.resize(static_cast<size_t>(m * D));
          sgemm(false, false, m, D, n, in.scale, ds.data(), n, kt, ldk, 0.f, dq_tile.data(), D, false);
          for (int64_t r = 0; r < m; ++r) {
            T* dq = dqr.row<T>(b, h, t.q0 + r);
            for (int64_t d = 0; d < D; ++d) dq[d] = T(dq_tile[static_cast<size_t>(r * D + d)]);
          }
        }
      }
      for (int64_t j = 0; j < Lk; ++j) {
        if (grads.dk.defined()) {
          T* row = dkr.row<T>(b, h, j);
          for (int64_t d = 0; d < D; ++d) row[d] = T(in.scale * dk[j * D + d]);
        }
        if (grads.dv.defined()) {
          T* row = dvr.row<T>(b, h, j);
          for (int64_t d = 0; d < D; ++d) row[d] = T(dv[j * D + d]);
        }
      }
    }
  }
  // Deterministic reduction of the private copies, in thread order.
  for (size_t u = 0; u < targets.size(); ++u) {
    if (!targets[u].shared) continue;
    const Tensor& db = targets[u].db;
    const int64_t n = db.numel();
    Tensor sum = Tensor::zeros(db.shape(), DType::f32);
    float* sp = sum.data<float>();
    for (const Tensor& p : privates[u]) {
      const float* pp = p.data<float>();
      for (int64_t e = 0; e < n; ++e) sp[e] += pp[e];
    }
    // db += sum, through db's strides.
    const Broadcast4 dst(db);
    for (int64_t e = 0; e < n; ++e) {
      int64_t c[4], r = e;
      for (int d = 3; d >= 0; --d) {
        c[d] = r % db.size(d);
        r /= db.size(d);
      }
      *dst.at<float>(c[0], c[1], c[2], c[3]) += sp[e];
    }
  }
}

}  // namespace

void attention_forward(const AttentionInputs& in, const Tensor& o, const Tensor& lse, const Tensor& a) {
  dispatch_float(in.q.dtype(), [&](auto tag) { forward_impl<decltype(tag)>(in, o, lse, a); });
}

void attention_backward(const AttentionInputs& in, const Tensor& a_or_o, const Tensor& lse, const Tensor& d_o,
                        const AttentionGrads& grads) {
  dispatch_float(in.q.dtype(), [&](auto tag) { backward_impl<decltype(tag)>(in, a_or_o, lse, d_o, grads); });
}

void attention_combine(const Tensor& a, const Tensor& lse, const Tensor& a_part, const Tensor& lse_part) {
  const int64_t B = a.size(0), H = a.size(1), L = a.size(2), D = a.size(3);
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l) {
          float* ls = lse.data<float>() + b * lse.stride(0) + h * lse.stride(1) + l * lse.stride(2);
          const float lp =
              lse_part.data<float>()[b * lse_part.stride(0) + h * lse_part.stride(1) + l * lse_part.stride(2)];
          const float m = std::max(*ls, lp);
          if (m == -std::numeric_limits<float>::infinity()) continue;  // neither side has a key
          const float w = std::exp(*ls - m), wp = std::exp(lp - m), total = w + wp;
          T* ar = static_cast<T*>(a.data_ptr()) + b * a.stride(0) + h * a.stride(1) + l * a.stride(2);
          const T* pr =
              static_cast<const T*>(a_part.data_ptr()) + b * a_part.stride(0) + h * a_part.stride(1) + l * a_part.stride(2);
          for (int64_t d = 0; d < D; ++d)
            ar[d] = static_cast<T>((w * static_cast<float>(ar[d]) + wp * static_cast<float>(pr[d])) / total);
          *ls = m + std::log(total);
        }
  });
}

}  // namespace foldcore::ops::cpu
