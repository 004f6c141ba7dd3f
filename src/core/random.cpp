#include "core/random.h"

#include <cmath>
#include <vector>

namespace foldcore {

namespace {
constexpr double kTwoPi = 6.283185307179586;
// Uniform in (0, 1]: safe for log().
float open_uniform(uint64_t seed, uint64_t off, uint64_t idx) {
  return 1.0f - philox_uniform(seed, off, idx);
}
}  // namespace

Tensor randn(const Shape& shape, Generator& gen, float mean, float std, DType dtype, Device device) {
  const int64_t n = shape.product();
  std::vector<float> v(static_cast<size_t>(n));
  const uint64_t off = gen.reserve();
  for (int64_t i = 0; i < n; i += 2) {
    const float u1 = open_uniform(gen.seed(), off, static_cast<uint64_t>(i));
    const float u2 = philox_uniform(gen.seed(), off, static_cast<uint64_t>(i + 1));
    const double r = std::sqrt(-2.0 * std::log(static_cast<double>(u1)));
    v[i] = mean + std * static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < n) v[i + 1] = mean + std * static_cast<float>(r * std::sin(kTwoPi * u2));
  }
  return Tensor::from_vector(v, shape, dtype, device);
}

Tensor rand_uniform(const Shape& shape, Generator& gen, float lo, float hi, DType dtype, Device device) {
  const int64_t n = shape.product();
  std::vector<float> v(static_cast<size_t>(n));
  const uint64_t off = gen.reserve();
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * philox_uniform(gen.seed(), off, static_cast<uint64_t>(i));
  return Tensor::from_vector(v, shape, dtype, device);
}

Tensor trunc_normal(const Shape& shape, Generator& gen, float std, DType dtype, Device device) {
  // Rejection sampling per element from an independent sub-stream, so the result does not depend
  // on how many draws earlier elements rejected. The std of N(0,1) truncated to [-2,2] is
  // 0.87962566; dividing it out makes `std` the std of the truncated distribution.
  const int64_t n = shape.product();
  std::vector<float> v(static_cast<size_t>(n));
  const uint64_t off = gen.reserve();
  constexpr double kTruncStd = 0.87962566103423978;
  for (int64_t i = 0; i < n; ++i) {
    for (uint64_t k = 0;; k += 2) {
      const uint64_t base = (static_cast<uint64_t>(i) << 20) + k;
      const double u1 = open_uniform(gen.seed(), off, base);
      const double u2 = philox_uniform(gen.seed(), off, base + 1);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
      if (std::fabs(z) <= 2.0) {
        v[i] = static_cast<float>(z / kTruncStd * std);
        break;
      }
    }
  }
  return Tensor::from_vector(v, shape, dtype, device);
}

Tensor randint(const Shape& shape, Generator& gen, int64_t lo, int64_t hi, DType dtype, Device device) {
  FC_CHECK(hi > lo, "randint: empty range [", lo, ", ", hi, ")");
  const int64_t n = shape.product();
  std::vector<int64_t> v(static_cast<size_t>(n));
  const uint64_t off = gen.reserve();
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t a = philox_bits(gen.seed(), off, 2 * static_cast<uint64_t>(i));
    const uint64_t b = philox_bits(gen.seed(), off, 2 * static_cast<uint64_t>(i) + 1);
    v[i] = lo + static_cast<int64_t>(((a << 32) | b) % span);
  }
  return Tensor::from_vector_i64(v, shape, dtype, device);
}

}  // namespace foldcore
