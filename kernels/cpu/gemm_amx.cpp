// bf16 GEMM on AMX tiles: Goto-style blocking (a kKc×kNc panel of op(B) and a kMc×kKc block of
// op(A) packed into tile order, both in L2), a micro-kernel of 2×2 accumulator tiles (32×32 fp32
// of C) over the packed k steps. Edges are padded with zeros in the packs; C blocks that overhang
// the matrix go through a 32×32 staging block.
#include "kernels/cpu/gemm_amx.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#define FOLDCORE_AMX_COMPILED 1
// GCC 12's AVX-512 headers start some intrinsics (_mm512_cvtepu16_epi32, the shuffles) from an
// "undefined" vector, which -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace foldcore::ops::cpu {
namespace {

#ifdef FOLDCORE_AMX_COMPILED
// A tile row is 64 bytes: 32 bf16 of A (one k step) or 16 pairs of B, or 16 fp32 of C.
constexpr int64_t kTileRows = 16, kStep = 32, kMr = 32, kNr = 32;
constexpr int64_t kTileElems = kTileRows * kStep;  // bf16 per A or B tile (1 KiB)
// Blocking: the op(B) panel kKc×kNc (512 KiB) and the op(A) block kMc×kKc (256 KiB) fit the 2 MiB
// L2 of these processors together; the micro-kernel reads a 32-column strip of the panel (32 KiB)
// once per 32 rows of the block.
constexpr int64_t kKc = 512, kMc = 256, kNc = 512;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Linux: the tile data state is off until the process asks for it (ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); a tile instruction before that raises SIGILL.
bool request_tiles() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  if (!amx_bf16 || !amx_tile) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: the 2×2 fp32 accumulators (C rows 0-15 / 16-31 × columns 0-15 / 16-31);
// 4, 5: A rows 0-15 / 16-31 of one k step; 6, 7: B columns 0-15 / 16-31 of one k step.
__attribute__((target("amx-tile"))) void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kTileRows;
  }
  // GCC 12 does not see ldtilecfg read the struct and drops the stores above; the empty asm with
  // a memory clobber keeps them.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

// C[32×32] (row stride ldc_bytes) = (load ? C : 0) + Σ over ks k steps of A·B, A as two 16-row
// groups of ks tiles each (ap), B as two 16-column groups of ks tiles each (bp).
__attribute__((target("amx-tile,amx-bf16"))) void micro_32x32(const uint16_t* ap, const uint16_t* bp, int64_t ks,
                                                            float* c, int64_t ldc_bytes, bool load) {
  float* c10 = reinterpret_cast<float*>(reinterpret_cast<char*>(c) + kTileRows * ldc_bytes);
  if (load) {
    _tile_loadd(0, c, ldc_bytes);
    _tile_loadd(1, c + 16, ldc_bytes);
    _tile_loadd(2, c10, ldc_bytes);
    _tile_loadd(3, c10 + 16, ldc_bytes);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const uint16_t* a1 = ap + ks * kTileElems;
  const uint16_t* b1 = bp + ks * kTileElems;
  for (int64_t s = 0; s < ks; ++s) {
    _tile_loadd(4, ap + s * kTileElems, 64);
    _tile_loadd(5, a1 + s * kTileElems, 64);
    _tile_loadd(6, bp + s * kTileElems, 64);
    _tile_loadd(7, b1 + s * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc_bytes);
  _tile_stored(1, c + 16, ldc_bytes);
  _tile_stored(2, c10, ldc_bytes);
  _tile_stored(3, c10 + 16, ldc_bytes);
}

// Every processor with AMX has AVX-512: the packs move whole tiles with it.
#define FOLDCORE_AVX512 __attribute__((target("avx512f,avx512bw")))

// In place: rows r[0..15] of 16 dwords become the columns.
FOLDCORE_AVX512 inline void transpose_16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: x0 y0 x1 y1 | x2 y2 x3 y3 of rows 2i, 2i+1
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  __m512i u[16];  // u[4i + q], lane L: column 4L + q of rows 4i..4i+3
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int q = 0; q < 4; ++q) {  // column 4L + q: lane i from u[4i + q]'s lane L
    const __m512i v0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x44), v1 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xEE);
    r[q] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + q] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + q] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// 16 dwords (x[n], y[n]) from 16 bf16 of two rows: the pair layout of a B tile row.
FOLDCORE_AVX512 inline __m512i interleave_rows(const uint16_t* x, const uint16_t* y) {
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y)));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

FOLDCORE_AVX512 inline void store_tile(uint16_t* tile, const __m512i r[16]) {
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tile + i * kStep, r[i]);
}

// Where the packs' tile of 16-row (A) or 16-column (B) group g and k step s goes, and what of the
// matrix it holds: `valid` rows or columns from `first`, `ksz` k values from `p`.
struct TileSpan {
  uint16_t* tile;
  int64_t valid, ksz, first, p;
};
inline TileSpan tile_span(uint16_t* dst, int64_t g, int64_t s, int64_t ks, int64_t extent, int64_t kc,
                          int64_t first0, int64_t p0) {
  return {dst + (g * ks + s) * kTileElems, std::clamp<int64_t>(extent - g * kTileRows, 0, kTileRows),
          std::min(kStep, kc - s * kStep), first0 + g * kTileRows, p0 + s * kStep};
}

// op(A)[i0:i0+mc, p0:p0+kc] into tile order: the tile of 16-row group g and k step s at
// (g·ks + s)·512, row r, element e at r·32 + e; zeros beyond the matrix (mc, kc padded to 32).
FOLDCORE_AVX512 void pack_a(bool trans_a, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                            int64_t kc, uint16_t* dst) {
  const int64_t ks = round_up(kc, kStep) / kStep, groups = round_up(mc, kMr) / kTileRows;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t s = 0; s < ks; ++s) {
      const TileSpan t = tile_span(dst, g, s, ks, mc, kc, i0, p0);
      uint16_t* tile = t.tile;
      const int64_t rows = t.valid, ksz = t.ksz, i = t.first, p = t.p;
      if (!trans_a) {
        for (int64_t r = 0; r < kTileRows; ++r) {
          const int64_t len = r < rows ? ksz : 0;
          if (len > 0) std::memcpy(tile + r * kStep, a + (i + r) * lda + p, static_cast<size_t>(len) * 2);
          std::fill(tile + r * kStep + len, tile + (r + 1) * kStep, uint16_t{0});
        }
      } else if (rows == kTileRows && ksz == kStep) {  // element (i, p) at a[p·lda + i]
        __m512i r[16];
        for (int kk = 0; kk < 16; ++kk)
          r[kk] = interleave_rows(a + (p + 2 * kk) * lda + i, a + (p + 2 * kk + 1) * lda + i);
        transpose_16x16_epi32(r);
        store_tile(tile, r);
      } else {
        for (int64_t r = 0; r < kTileRows; ++r)
          for (int64_t e = 0; e < kStep; ++e)
            tile[r * kStep + e] = r < rows && e < ksz ? a[(p + e) * lda + i + r] : uint16_t{0};
      }
    }
}

// op(B)[p0:p0+kc, j0:j0+nc] into tile order ("VNNI": a tile row holds 16 columns × one pair of
// consecutive k): the tile of 16-column group h and k step s at (h·ks + s)·512, pair r, column n,
// element e of the pair at r·32 + n·2 + e; zeros beyond the matrix.
FOLDCORE_AVX512 void pack_b(bool trans_b, const uint16_t* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                            int64_t nc, uint16_t* dst) {
  const int64_t ks = round_up(kc, kStep) / kStep, groups = round_up(nc, kNr) / kTileRows;
  for (int64_t h = 0; h < groups; ++h)
    for (int64_t s = 0; s < ks; ++s) {
      const TileSpan t = tile_span(dst, h, s, ks, nc, kc, j0, p0);
      uint16_t* tile = t.tile;
      const int64_t cols = t.valid, ksz = t.ksz, j = t.first, p = t.p;
      if (cols == 0) {  // the padding group of an odd number of 16-column groups
        std::memset(tile, 0, kTileElems * 2);
        continue;
      }
      if (cols == kTileRows && ksz == kStep) {
        __m512i r[16];
        if (trans_b) {  // element (p, j) at b[j·ldb + p]: a column's 32 k are one 64-byte row
          for (int n = 0; n < 16; ++n) r[n] = _mm512_loadu_si512(b + (j + n) * ldb + p);
          transpose_16x16_epi32(r);
        } else {
          for (int pr = 0; pr < 16; ++pr) r[pr] = interleave_rows(b + (p + 2 * pr) * ldb + j, b + (p + 2 * pr + 1) * ldb + j);
        }
        store_tile(tile, r);
        continue;
      }
      for (int64_t pr = 0; pr < 16; ++pr)
        for (int64_t n = 0; n < kTileRows; ++n)
          for (int64_t e = 0; e < 2; ++e) {
            const int64_t pp = 2 * pr + e;
            tile[pr * kStep + n * 2 + e] =
                n < cols && pp < ksz ? (trans_b ? b[(j + n) * ldb + p + pp] : b[(p + pp) * ldb + j + n]) : uint16_t{0};
          }
    }
}

// C[0:rows, 0:cols] (+)= the packed 32-row block of A × the packed 32-column panel of B: straight into
// C when the block is whole, else through a zero-padded 32×32 staging block.
void micro_block(const uint16_t* ap, const uint16_t* bp, int64_t ks, float* c, int64_t ldc, int64_t rows,
                 int64_t cols, bool load) {
  if (rows == kMr && cols == kNr) {
    micro_32x32(ap, bp, ks, c, ldc * 4, load);
    return;
  }
  alignas(64) float stage[kMr * kNr];
  if (load) {
    std::fill(stage, stage + kMr * kNr, 0.f);
    for (int64_t r = 0; r < rows; ++r) std::copy(c + r * ldc, c + r * ldc + cols, stage + r * kNr);
  }
  micro_32x32(ap, bp, ks, stage, kNr * 4, load);
  for (int64_t r = 0; r < rows; ++r) std::copy(stage + r * kNr, stage + r * kNr + cols, c + r * ldc);
}

// 64-byte aligned per-thread pack buffers, grown on demand and kept for the thread's next call.
struct PackBuffers {
  std::unique_ptr<uint16_t[]> a, b;
  PackBuffers()
      : a(new (std::align_val_t(64)) uint16_t[static_cast<size_t>(kMc * kKc)]),
        b(new (std::align_val_t(64)) uint16_t[static_cast<size_t>(kKc * kNc)]) {}
  ~PackBuffers() {
    ::operator delete[](a.release(), std::align_val_t(64));
    ::operator delete[](b.release(), std::align_val_t(64));
  }
};

void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                 const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    return;
  }
  thread_local PackBuffers packs;
  configure_tiles();
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc), ks = round_up(kc, kStep) / kStep;
      const bool load = accumulate || pc > 0;
      pack_b(trans_b, b, ldb, pc, kc, jc, nc, packs.b.get());
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        pack_a(trans_a, a, lda, ic, mc, pc, kc, packs.a.get());
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const uint16_t* bp = packs.b.get() + (jr / kTileRows) * ks * kTileElems;
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const uint16_t* ap = packs.a.get() + (ir / kTileRows) * ks * kTileElems;
            const int64_t i = ic + ir, j = jc + jr;
            micro_block(ap, bp, ks, c + i * ldc + j, ldc, std::min(kMr, m - i), std::min(kNr, n - j), load);
          }
        }
      }
    }
  }
  release_tiles();
}

uint16_t* aligned_u16(int64_t n) { return new (std::align_val_t(64)) uint16_t[static_cast<size_t>(n)]; }
void free_u16(uint16_t* p) { ::operator delete[](p, std::align_val_t(64)); }
#endif

}  // namespace

AmxPackedB::AmxPackedB() = default;
AmxPackedB::~AmxPackedB() {
#ifdef FOLDCORE_AMX_COMPILED
  if (data_) free_u16(data_);
#endif
}

void AmxPackedB::pack(bool trans_b, int64_t k, int64_t n, const bf16* b, int64_t ldb) {
#ifdef FOLDCORE_AMX_COMPILED
  FC_CHECK(amx_bf16_available(), "AmxPackedB: AMX-BF16 is not available on this CPU");
  k_ = k, n_ = n;
  const int64_t need = round_up(std::max<int64_t>(k, 1), kStep) * round_up(std::max<int64_t>(n, 1), kNr);
  if (need > capacity_) {
    if (data_) free_u16(data_);
    data_ = aligned_u16(need);
    capacity_ = need;
  }
  if (k > 0 && n > 0) pack_b(trans_b, reinterpret_cast<const uint16_t*>(b), ldb, 0, k, 0, n, data_);
#else
  (void)trans_b, (void)k, (void)n, (void)b, (void)ldb;
  FC_CHECK(false, "AmxPackedB: built without AMX support");
#endif
}

void AmxPackedB::multiply(int64_t m, const bf16* a, int64_t lda, float* c, int64_t ldc, bool accumulate) const {
#ifdef FOLDCORE_AMX_COMPILED
  if (m <= 0 || n_ <= 0) return;
  if (k_ <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n_, 0.f);
    return;
  }
  const int64_t ks = round_up(k_, kStep) / kStep;
  // This thread's pack of 32 rows of A over the whole k, reused across the calls.
  thread_local std::unique_ptr<uint16_t[], void (*)(uint16_t*)> abuf(nullptr, free_u16);
  thread_local int64_t abuf_capacity = 0;
  if (abuf_capacity < kMr * ks * kStep) {
    abuf.reset(aligned_u16(kMr * ks * kStep));
    abuf_capacity = kMr * ks * kStep;
  }
  configure_tiles();
  for (int64_t ir = 0; ir < m; ir += kMr) {
    const int64_t rows = std::min(kMr, m - ir);
    pack_a(false, reinterpret_cast<const uint16_t*>(a), lda, ir, rows, 0, k_, abuf.get());
    for (int64_t jr = 0; jr < n_; jr += kNr) {
      const uint16_t* bp = data_ + (jr / kTileRows) * ks * kTileElems;
      micro_block(abuf.get(), bp, ks, c + ir * ldc + jr, ldc, rows, std::min(kNr, n_ - jr), accumulate);
    }
  }
  release_tiles();
#else
  (void)m, (void)a, (void)lda, (void)c, (void)ldc, (void)accumulate;
  FC_CHECK(false, "AmxPackedB: built without AMX support");
#endif
}

bool amx_bf16_available() {
#ifdef FOLDCORE_AMX_COMPILED
  static const bool available = [] {
    const char* env = std::getenv("FOLDCORE_CPU_AMX");
    if (env && std::strcmp(env, "0") == 0) return false;
    return request_tiles();
  }();
  return available;
#else
  return false;
#endif
}

void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, int64_t lda,
                   const bf16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate, bool parallel) {
#ifdef FOLDCORE_AMX_COMPILED
  FC_CHECK(amx_bf16_available(), "gemm_bf16_amx: AMX-BF16 is not available on this CPU");
  const auto* ua = reinterpret_cast<const uint16_t*>(a);
  const auto* ub = reinterpret_cast<const uint16_t*>(b);
  const int threads = parallel && !omp_in_parallel() ? omp_get_max_threads() : 1;
  if (threads <= 1 || m * n * k < 128ll * 128 * 128) {
    gemm_serial(trans_a, trans_b, m, n, k, ua, lda, ub, ldb, c, ldc, accumulate);
    return;
  }
  // Each thread takes a contiguous range of 32-wide column blocks (or row blocks, when the rows
  // are the longer side) and runs the whole blocked loop on it with its own packs.
  const bool by_cols = n >= m;
  const int64_t extent = by_cols ? n : m, blocks = (extent + kNr - 1) / kNr;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
    const int64_t s0 = b0 * kNr, s1 = std::min(extent, b1 * kNr);
    if (s1 > s0) {
      if (by_cols)
        gemm_serial(trans_a, trans_b, m, s1 - s0, k, ua, lda, trans_b ? ub + s0 * ldb : ub + s0, ldb, c + s0, ldc,
                    accumulate);
      else
        gemm_serial(trans_a, trans_b, s1 - s0, n, k, trans_a ? ua + s0 : ua + s0 * lda, lda, ub, ldb, c + s0 * ldc,
                    ldc, accumulate);
    }
  }
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc,
      (void)accumulate, (void)parallel;
  FC_CHECK(false, "gemm_bf16_amx: built without AMX support");
#endif
}

}  // namespace foldcore::ops::cpu
