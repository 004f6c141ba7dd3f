// CPU GEMM: OpenBLAS sgemm (or a blocked fallback) per batch entry, 16-bit operands converted to
// fp32 scratch (bf16 operands on AMX tiles instead, where the CPU has them: gemm_amx.h), then one
// epilogue pass: t = acc + bias; pre_act = t; out = act(t).
#include "kernels/cpu/gemm_cpu.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "core/error.h"
#include "kernels/cpu/gemm_amx.h"
#ifdef FOLDCORE_HAVE_BLAS
#include <cblas.h>

#include <strings.h>

#include <cstdlib>
#include <string>

// OpenBLAS's runtime kernel selection (DYNAMIC_ARCH builds such as Debian's): exported, not in
// cblas.h; weak, so a single-target OpenBLAS without them links and is left alone.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));
#endif

namespace foldcore::ops::cpu {
namespace {

#ifdef FOLDCORE_HAVE_BLAS
// OpenBLAS picks its kernels from the CPU's family and model when the library loads. A processor
// newer than the library (OpenBLAS 0.3.21 on Emerald Rapids, family 6 model 207, whose CPUID also
// reports AVX-512) gets the SSE3 "Prescott" kernels: 25 GFLOP/s sgemm on one of these machines
// against 67 with the AVX-512 ones (docs/benchmarks.md, "GEMM"). When the pick is one of those
// SSE-era targets and the CPU (and the OS, which __builtin_cpu_supports checks through XGETBV)
// supports AVX-512 or AVX2 + FMA, the kernels are selected again by name, as OPENBLAS_CORETYPE
// would do at load time. A user's own OPENBLAS_CORETYPE is left as it is.
const char* better_blas_core() {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  const char* const current = openblas_get_corename();
  static const char* const kSseEra[] = {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom",
                                        "Core2",  "Penryn",     "Dunnington", "Nehalem", "Athlon", "Opteron",
                                        "Opteron(SSE3)", "Opteron_SSE3", "Barcelona", "Nano", "Bobcat"};
  bool sse_era = false;
  for (const char* name : kSseEra) sse_era = sse_era || strcasecmp(current, name) == 0;
  if (!sse_era) return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
  return nullptr;
}

// Once per process, before the first BLAS call (a static initialiser below, single-threaded before
// main; sgemm checks again in case another initialiser calls it first).
bool select_blas_core() {
  static const bool done = [] {
    const char* core = better_blas_core();
    if (!core) return true;
    setenv("OPENBLAS_CORETYPE", core, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
    return true;
  }();
  return done;
}
[[maybe_unused]] const bool kBlasCoreSelected = select_blas_core();
#endif

// Below this many multiply-adds per GEMM a batched call runs the batch entries in parallel
// (OpenMP) with a single-threaded fallback GEMM each: threading inside one small GEMM costs more
// than it saves, and calling a threaded BLAS from inside an OpenMP region would oversubscribe.
constexpr int64_t kSmallGemmMacs = 32 * 32 * 32;

// OpenBLAS built on OpenMP (openblas_get_parallel() == 2, the build CMake prefers) shares our
// OpenMP runtime: it runs single-threaded when called inside a parallel region (so batch-parallel
// regions and the attention kernel may call it per thread), and our OpenMP regions between BLAS
// calls cost nothing extra. The pthreads build does neither: its threads and our spin-waiting
// OpenMP workers starve each other (measured 10-20x slowdowns on 2 cores), so with it our
// conversions and epilogue run serially and threads never call BLAS.
bool blas_shares_openmp() {
#ifdef FOLDCORE_HAVE_BLAS
  static const bool v = openblas_get_parallel() == 2;
  return v;
#else
  return false;
#endif
}
bool threaded_epilogue() {
#ifdef FOLDCORE_HAVE_BLAS
  return blas_shares_openmp();
#else
  return true;
#endif
}

// Fallback tile sizes: a kKc×kNc panel of op(B) (64 KiB of fp32) stays in L2 while every row of
// the current row block streams through it.
constexpr int64_t kMc = 32, kKc = 128, kNc = 128;

void sgemm_fallback(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel) {
  const int64_t row_blocks = (m + kMc - 1) / kMc;
#pragma omp parallel for schedule(static) if (parallel && row_blocks > 1)
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t i0 = rb * kMc, i1 = std::min(m, i0 + kMc);
    for (int64_t i = i0; i < i1; ++i) {
      float* ci = c + i * ldc;
      if (beta == 0.f)
        std::fill(ci, ci + n, 0.f);
      else if (beta != 1.f)
        for (int64_t j = 0; j < n; ++j) ci[j] *= beta;
    }
    std::vector<float> panel(static_cast<size_t>(kKc * kNc));
    for (int64_t j0 = 0; j0 < n; j0 += kNc) {
      const int64_t nj = std::min(kNc, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t np = std::min(kKc, k - p0);
        // Pack op(B)[p0:p0+np, j0:j0+nj] row-major so the inner loop is unit stride.
        for (int64_t p = 0; p < np; ++p)
          for (int64_t j = 0; j < nj; ++j)
            panel[p * nj + j] = trans_b ? b[(j0 + j) * ldb + p0 + p] : b[(p0 + p) * ldb + j0 + j];
        for (int64_t i = i0; i < i1; ++i) {
          float* ci = c + i * ldc + j0;
          for (int64_t p = 0; p < np; ++p) {
            const float aip = alpha * (trans_a ? a[(p0 + p) * lda + i] : a[i * lda + p0 + p]);
            const float* bp = panel.data() + p * nj;
            for (int64_t j = 0; j < nj; ++j) ci[j] += aip * bp[j];
          }
        }
      }
    }
  }
}

inline float gelu_exact(float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f)); }

template <typename T> inline float load(const T* p, int64_t i) { return static_cast<float>(p[i]); }

// Copies a rows×cols row-major T matrix (leading dim ld) into dense fp32. On one thread: an OpenMP
// team here, between the threaded epilogue and OpenBLAS's own (pthread) threads, made a bf16
// Evoformer block slower, not faster (bench_predict --memory at N = 512: 17.3-17.7 s against
// 15.2-16.1 s single-threaded).
template <typename T> void to_f32(const T* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(src[r * ld + c]);
}

// An fp32 scratch buffer left uninitialised (every element is written before it is read: the
// conversions above, or sgemm's output with beta = 0), so no zeroing pass.
std::unique_ptr<float[]> scratch(int64_t n) { return std::unique_ptr<float[]>(new float[static_cast<size_t>(n)]); }

// One batch entry: everything in fp32, then the epilogue writes TO (T, or fp32 for a mixed
// product of 16-bit operands).
template <typename T, typename TO> void gemm_one(const GemmProblem& p, int64_t bi, bool parallel) {
  const T* a = static_cast<const T*>(p.a.ptr) + bi * p.a.batch_stride;
  const T* b = static_cast<const T*>(p.b.ptr) + bi * p.b.batch_stride;
  TO* out = static_cast<TO*>(p.out.ptr) + bi * p.out.batch_stride;
  T* pre = p.pre_act.ptr ? static_cast<T*>(p.pre_act.ptr) + bi * p.pre_act.batch_stride : nullptr;
  const T* bias = p.bias ? static_cast<const T*>(p.bias) + bi * p.bias_batch_stride : nullptr;
  const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;

  const float *af = nullptr, *bf = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float* cf = nullptr;
  std::unique_ptr<float[]> sa, sb, sc;
  bool done = false;
  if constexpr (std::is_same_v<T, float>) {
    af = a, lda = p.a.ld, bf = b, ldb = p.b.ld, cf = out, ldc = p.out.ld;
  } else if (std::is_same_v<T, bf16> && amx_bf16_available()) {
    // bf16 operands straight into the matrix tiles (fp32 products and sums), no fp32 copies.
    sc = scratch(p.m * p.n);
    cf = sc.get(), ldc = p.n;
    gemm_bf16_amx(p.trans_a, p.trans_b, p.m, p.n, p.k, reinterpret_cast<const bf16*>(a), p.a.ld,
                  reinterpret_cast<const bf16*>(b), p.b.ld, cf, ldc, false, parallel);
    if (p.alpha != 1.f || p.beta != 0.f)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          cf[i * ldc + j] = p.alpha * cf[i * ldc + j] + (p.beta != 0.f ? p.beta * load(out + i * p.out.ld, j) : 0.f);
    done = true;
  } else {
    sa = scratch(a_rows * a_cols);
    sb = scratch(b_rows * b_cols);
    sc = scratch(p.m * p.n);
    to_f32(a, a_rows, a_cols, p.a.ld, sa.get());
    to_f32(b, b_rows, b_cols, p.b.ld, sb.get());
    if (p.beta != 0.f) to_f32(out, p.m, p.n, p.out.ld, sc.get());
    af = sa.get(), lda = std::max<int64_t>(a_cols, 1), bf = sb.get(), ldb = std::max<int64_t>(b_cols, 1);
    cf = sc.get(), ldc = p.n;
  }
  if (!done) sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, af, lda, bf, ldb, p.beta, cf, ldc, parallel, false);

  const bool epilogue = bias || pre || p.act != Activation::none || static_cast<const void*>(cf) != static_cast<const void*>(out);
  if (!epilogue) return;
  // Row by row, one branch-free (vectorisable) loop per step; the fp32 result row is updated in
  // place (it is `out` itself for fp32, the scratch otherwise).
#pragma omp parallel for schedule(static) if (threaded_epilogue() && parallel && p.m * p.n > 16384)
  for (int64_t i = 0; i < p.m; ++i) {
    float* t = cf + i * ldc;
    TO* o = out + i * p.out.ld;
    if (bias)
      for (int64_t j = 0; j < p.n; ++j) t[j] += load(bias, j);
    if (pre)
      for (int64_t j = 0; j < p.n; ++j) pre[i * p.pre_act.ld + j] = T(t[j]);
    switch (p.act) {
      case Activation::relu:
        for (int64_t j = 0; j < p.n; ++j) o[j] = TO(t[j] > 0.f ? t[j] : 0.f);
        break;
      case Activation::gelu:
        for (int64_t j = 0; j < p.n; ++j) o[j] = TO(gelu_exact(t[j]));
        break;
      case Activation::none:
        if (static_cast<const void*>(cf) != static_cast<const void*>(out))
          for (int64_t j = 0; j < p.n; ++j) o[j] = TO(t[j]);
        break;
    }
  }
}

template <typename T, typename TO> void gemm_typed(const GemmProblem& p) {
  const bool small = p.m * p.n * p.k <= kSmallGemmMacs;
  // Many batch entries (the triangle multiplication's per-channel products, attention heads):
  // one whole entry per thread on single-threaded BLAS, instead of a fork/join of the threaded
  // BLAS per entry (whose barriers cost a lot whenever another process holds a core).
  const bool many = blas_shares_openmp() && p.batch >= 4 * omp_get_max_threads();
  if (p.batch > 1 && (small || many)) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t bi = 0; bi < p.batch; ++bi) gemm_one<T, TO>(p, bi, false);
  } else {
    for (int64_t bi = 0; bi < p.batch; ++bi) gemm_one<T, TO>(p, bi, true);
  }
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel, bool force_fallback) {
  if (m == 0 || n == 0) return;
#ifdef FOLDCORE_HAVE_BLAS
  select_blas_core();
  // Serial calls (inside a parallel region) go to BLAS only when it runs them single-threaded
  // there; otherwise to the fallback.
  if (!force_fallback && (parallel || (blas_shares_openmp() && (omp_in_parallel() || omp_get_max_threads() == 1)))) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
                static_cast<int>(std::max<int64_t>(lda, 1)), b, static_cast<int>(std::max<int64_t>(ldb, 1)), beta, c,
                static_cast<int>(ldc));
    return;
  }
#endif
  sgemm_fallback(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parallel);
}

std::string blas_core() {
#ifdef FOLDCORE_HAVE_BLAS
  select_blas_core();
  return openblas_get_corename();
#else
  return "none";
#endif
}

void gemm(const GemmProblem& p) {
  FC_CHECK(p.m < (1ll << 31) && p.n < (1ll << 31) && p.k < (1ll << 31), "gemm (cpu): dims ", p.m, "x", p.n, "x",
           p.k, " exceed the BLAS int range");
  dispatch_float(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.out_dtype == p.dtype) {
      gemm_typed<T, T>(p);
    } else if constexpr (!std::is_same_v<T, float>) {
      gemm_typed<T, float>(p);  // 16-bit operands, fp32 out (gemm.cpp allows no other mix)
    }
  });
}

}  // namespace foldcore::ops::cpu
