// Vectorised fp32 row primitives for the CPU softmax and attention kernels. The build targets
// baseline x86-64, where std::exp is a scalar libm call (≈ 7 ns; at AlphaFold's head dim 32 an
// attention score costs 64 FLOPs, so the exponential alone capped the attention kernel at a few
// GFLOP/s); these loops are compiled for AVX-512, AVX2 and the baseline and picked at load time.
#pragma once

#include <cstdint>

namespace foldcore::ops::cpu {

// max_j x[j] (−inf for n = 0; a NaN element may or may not propagate, as with std::max).
float row_max(const float* x, int64_t n);

// x[j] = exp(x[j] − shift) in place; returns Σ_j x[j]. For softmax rows (x[j] − shift ≤ 0):
// Cody-Waite range reduction and a degree-6 polynomial, max relative error 1e-7 on [−87, 0]
// (measured against double exp); arguments below −87.34 (exp < 2^−126, e.g. −1e9 mask biases,
// −inf) give exactly 0; NaN stays NaN. Arguments above 88 are clamped (not for general use).
float exp_shift_sum(float* x, int64_t n, float shift);
// The same with the baseline scalar exponential and a separate summing pass: the reference the
// vector paths (AVX-512, AVX2; the sum fused into the exponential's loop) equal bit for bit.
float exp_shift_sum_unfused(float* x, int64_t n, float shift);
// One instruction set's path of exp_shift_sum, for tests: false (nothing done) where this CPU lacks it.
enum class ExpIsa { scalar, avx2, avx512 };
bool exp_shift_sum_isa(ExpIsa isa, float* x, int64_t n, float shift, float* sum);

}  // namespace foldcore::ops::cpu
