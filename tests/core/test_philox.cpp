#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "core/random.h"

namespace foldcore {
namespace {

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors for philox4x32-10.
  PhiloxBlock z = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(z.v[0], 0x6627e8d5u);
  EXPECT_EQ(z.v[1], 0xe169c58du);
  EXPECT_EQ(z.v[2], 0xbc57ac4cu);
  EXPECT_EQ(z.v[3], 0x9b00dbd8u);
  PhiloxBlock f = philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(f.v[0], 0x408f276du);
  EXPECT_EQ(f.v[1], 0x41c83b0eu);
  EXPECT_EQ(f.v[2], 0xa20bc7c6u);
  EXPECT_EQ(f.v[3], 0x6d5451fdu);
}

TEST(Philox, UniformIsUniformAndStreamsDiffer) {
  double sum = 0, sq = 0;
  const int n = 200000;
  int same = 0;
  for (int i = 0; i < n; ++i) {
    const float u = philox_uniform(42, 5, i);
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    sum += u;
    sq += u * u;
    same += philox_bits(42, 5, i) == philox_bits(42, 6, i);
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);             // 4.5 sigma for n = 2e5
  EXPECT_NEAR(sq / n - 0.25, 1.0 / 12, 0.002);  // variance of U[0,1)
  EXPECT_LT(same, 5);
}

TEST(Random, RandnMomentsAndDeterminism) {
  Generator g1(9), g2(9);
  Tensor a = randn({100000}, g1, 1.f, 2.f);
  Tensor b = randn({100000}, g2, 1.f, 2.f);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  const auto v = a.to_vector();
  double m = 0, s = 0;
  for (float x : v) m += x;
  m /= v.size();
  for (float x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / v.size());
  EXPECT_NEAR(m, 1.0, 0.03);
  EXPECT_NEAR(s, 2.0, 0.03);
  Tensor c = randn({10}, g1);
  EXPECT_NE(c.to_vector()[0], a.to_vector()[0]);  // generator advanced
}

TEST(Random, TruncNormalBoundedWithRequestedStd) {
  Generator g(1);
  const auto v = trunc_normal({50000}, g, 0.5f).to_vector();
  double s = 0;
  for (float x : v) {
    ASSERT_LE(std::fabs(x), 2 * 0.5f / 0.8796257f + 1e-5f);
    s += x * x;
  }
  EXPECT_NEAR(std::sqrt(s / v.size()), 0.5, 0.01);
}

}  // namespace
}  // namespace foldcore
