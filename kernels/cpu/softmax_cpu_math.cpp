#include "kernels/cpu/softmax_cpu_math.h"

#include <bit>
#include <limits>

namespace foldcore::ops::cpu {
namespace {

// Independent accumulators: float max/sum reductions are not reassociated by the compiler
// (no -ffast-math), so the rows are reduced in kLanes interleaved partial results instead.
constexpr int kLanes = 16;

// exp(x) for x ≤ 88: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in a 9-bit-exact high part and a
// low part, so n·ln2_hi is exact), exp(r) by Cephes' degree-6 minimax polynomial, 2^n built in the
// exponent bits. n is rounded with the 1.5·2^23 trick (round to nearest without SSE4.1).
inline float exp_bounded(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kMin = -87.3365447504f, kMax = 88.f, kRound = 12582912.f;
  const float xc = x < kMin ? kMin : (x > kMax ? kMax : x);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < kMin ? 0.f : y * two_n;
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

__attribute__((target_clones("avx512f", "avx2", "default"))) float exp_shift_sum(float* x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = exp_bounded(x[j] - shift);
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += x[j + k];
  float sum = 0.f;
  for (; j < n; ++j) sum += x[j];
  for (float a : acc) sum += a;
  return sum;
}

}  // namespace foldcore::ops::cpu
