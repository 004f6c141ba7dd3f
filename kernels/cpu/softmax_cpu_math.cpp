#include "kernels/cpu/softmax_cpu_math.h"

#include <bit>
#include <limits>

#include <immintrin.h>

namespace foldcore::ops::cpu {
namespace {

// Independent accumulators: float max/sum reductions are not reassociated by the compiler
// (no -ffast-math), so the rows are reduced in kLanes interleaved partial results instead.
constexpr int kLanes = 16;

// exp(x) for x ≤ 88: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in a 9-bit-exact high part and a
// low part, so n·ln2_hi is exact), exp(r) by Cephes' degree-6 minimax polynomial, 2^n built in the
// exponent bits. n is rounded with the 1.5·2^23 trick (round to nearest without SSE4.1). The
// constants are shared by the scalar and the AVX2 code.
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpMin = -87.3365447504f, kExpMax = 88.f, kRound = 12582912.f;
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float exp_bounded(float x) {
  const float xc = x < kExpMin ? kExpMin : (x > kExpMax ? kExpMax : x);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = kExpPoly[0];
  for (int c = 1; c < 6; ++c) p = p * r + kExpPoly[c];
  const float y = p * r * r + r + 1.f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < kExpMin ? 0.f : y * two_n;
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) float row_max(const float* x, int64_t n) {
  float acc[kLanes];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] = acc[k] > x[j + k] ? acc[k] : x[j + k];
  float m = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) m = m > x[j] ? m : x[j];
  for (float a : acc) m = m > a ? m : a;
  return m;
}

namespace {

// The baseline loop (GCC keeps exp_bounded's selects as branches, so it stays scalar).
void exp_shift_scalar(float* x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = exp_bounded(x[j] - shift);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float lane_sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += x[j + k];
  float sum = 0.f;
  for (; j < n; ++j) sum += x[j];
  for (float a : acc) sum += a;
  return sum;
}

// lane_sum's result from its 16 lanes (lane k: x[j + k] summed over the complete blocks of 16, in
// order) and the tail after the last complete block: the tail in order from 0, then the lanes in
// lane order. The fused loops below accumulate the same lanes as they go, so they return the bits
// of a separate lane_sum pass.
float finish_lanes(const float* lanes, const float* tail, int64_t n_tail) {
  float sum = 0.f;
  for (int64_t j = 0; j < n_tail; ++j) sum += tail[j];
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

// exp_bounded on 8 lanes with AVX2, the same operations in the same order (multiplies and adds
// kept apart, no FMA), so every element has the bits of the scalar loop; the tail runs scalar.
// The selects are blends on the same comparisons, so NaN, −inf and large arguments behave alike.
// The sum rides along: blocks of 16 into two 8-lane accumulators (lane_sum's lanes 0-7, 8-15).
__attribute__((target("avx2"))) inline __m256 exp_shift8_avx2(__m256 x, __m256 sh) {
  const __m256 log2e = _mm256_set1_ps(kLog2e), ln2_hi = _mm256_set1_ps(kLn2Hi), ln2_lo = _mm256_set1_ps(kLn2Lo),
               lo = _mm256_set1_ps(kExpMin), hi = _mm256_set1_ps(kExpMax), round = _mm256_set1_ps(kRound),
               one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
  const __m256 v = _mm256_sub_ps(x, sh);
  const __m256 below = _mm256_cmp_ps(v, lo, _CMP_LT_OQ);
  __m256 xc = _mm256_blendv_ps(v, lo, below);
  xc = _mm256_blendv_ps(xc, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
  const __m256 k = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, log2e), round), round);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(k, ln2_hi)), _mm256_mul_ps(k, ln2_lo));
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int c = 1; c < 6; ++c) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kExpPoly[c]));
  const __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), one);
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_blendv_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), zero, below);
}

__attribute__((target("avx2"))) float exp_shift_sum_avx2(float* x, int64_t n, float shift) {
  const __m256 sh = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 e0 = exp_shift8_avx2(_mm256_loadu_ps(x + j), sh);
    const __m256 e1 = exp_shift8_avx2(_mm256_loadu_ps(x + j + 8), sh);
    _mm256_storeu_ps(x + j, e0);
    _mm256_storeu_ps(x + j + 8, e1);
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  const int64_t blocks_end = j;
  if (j + 8 <= n) {
    _mm256_storeu_ps(x + j, exp_shift8_avx2(_mm256_loadu_ps(x + j), sh));
    j += 8;
  }
  exp_shift_scalar(x + j, n - j, shift);
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc0);
  _mm256_store_ps(lanes + 8, acc1);
  return finish_lanes(lanes, x + blocks_end, n - blocks_end);
}

// The same on 16 lanes with AVX-512 (one block of 16 per step: lane_sum's lanes are the vector's).
// Blends become masked moves on the same comparisons. AVX-512F has FMAs, and GCC contracts a
// multiply and an add into one in C++ by default (-ffp-contract=fast), which would change the
// bits: contraction is off for this function.
__attribute__((target("avx512f"), optimize("fp-contract=off"))) float exp_shift_sum_avx512(float* x, int64_t n, float shift) {
  const __m512 log2e = _mm512_set1_ps(kLog2e), ln2_hi = _mm512_set1_ps(kLn2Hi), ln2_lo = _mm512_set1_ps(kLn2Lo),
               lo = _mm512_set1_ps(kExpMin), hi = _mm512_set1_ps(kExpMax), round = _mm512_set1_ps(kRound),
               one = _mm512_set1_ps(1.f), sh = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + j), sh);
    const __mmask16 below = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);
    __m512 xc = _mm512_mask_blend_ps(below, v, lo);
    xc = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), xc, hi);
    const __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, log2e), round), round);
    const __m512 r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(k, ln2_hi)), _mm512_mul_ps(k, ln2_lo));
    __m512 p = _mm512_set1_ps(kExpPoly[0]);
    for (int c = 1; c < 6; ++c) p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kExpPoly[c]));
    const __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), one);
    // the zero-masking forms with every lane selected: the plain ones start from
    // _mm512_undefined_epi32, which GCC 12 flags as maybe-uninitialized
    const __m512i e = _mm512_maskz_slli_epi32(
        0xFFFF, _mm512_add_epi32(_mm512_maskz_cvttps_epi32(0xFFFF, k), _mm512_set1_epi32(127)), 23);
    const __m512 out = _mm512_maskz_mov_ps(static_cast<__mmask16>(~below), _mm512_mul_ps(y, _mm512_castsi512_ps(e)));
    _mm512_storeu_ps(x + j, out);
    acc = _mm512_add_ps(acc, out);
  }
  exp_shift_scalar(x + j, n - j, shift);
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, acc);
  return finish_lanes(lanes, x + j, n - j);
}

}  // namespace

float exp_shift_sum(float* x, int64_t n, float shift) {
  static const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return exp_shift_sum_avx512(x, n, shift);
  if (avx2) return exp_shift_sum_avx2(x, n, shift);
  exp_shift_scalar(x, n, shift);
  return lane_sum(x, n);
}

float exp_shift_sum_unfused(float* x, int64_t n, float shift) {
  exp_shift_scalar(x, n, shift);
  return lane_sum(x, n);
}

bool exp_shift_sum_isa(ExpIsa isa, float* x, int64_t n, float shift, float* sum) {
  switch (isa) {
    case ExpIsa::avx512:
      if (!__builtin_cpu_supports("avx512f")) return false;
      *sum = exp_shift_sum_avx512(x, n, shift);
      return true;
    case ExpIsa::avx2:
      if (!__builtin_cpu_supports("avx2")) return false;
      *sum = exp_shift_sum_avx2(x, n, shift);
      return true;
    case ExpIsa::scalar:
      *sum = exp_shift_sum_unfused(x, n, shift);
      return true;
  }
  return false;
}

}  // namespace foldcore::ops::cpu
