// CPU backend of the GEMM family (kernels/gemm.h).
#pragma once

#include <string>

#include "kernels/gemm_problem.h"

namespace foldcore::ops::cpu {

void gemm(const GemmProblem& p);

// C = alpha·op(A)·op(B) + beta·C on fp32 row-major matrices (beta == 0: C is not read, so NaNs
// in it do not propagate, as in BLAS). Uses OpenBLAS when built with it unless `force_fallback`;
// the fallback is a cache-blocked loop nest, OpenMP over row blocks when `parallel`.
// parallel = false: one thread, callable from inside an OpenMP parallel region (per-thread tiles);
// it runs on OpenBLAS there when that is the OpenMP build (serial inside a parallel region),
// otherwise on the fallback.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel = true,
           bool force_fallback = false);

// The OpenBLAS kernel family in use ("SkylakeX", "Haswell", …; "none" without OpenBLAS). Where
// OpenBLAS took an SSE-era fallback for a processor it does not know, and the CPU has AVX2 + FMA
// or AVX-512, the first BLAS use selects those kernels instead (unless OPENBLAS_CORETYPE is set).
std::string blas_core();

}  // namespace foldcore::ops::cpu
