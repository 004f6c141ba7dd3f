// kernels/warp_mma.h on the CPU: d = a·b + c against the product formed in double (bf16 products
// are exact in fp32; 16 fp32 additions round by ≤ 16·2^-24 of the running |sum|), and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "kernels/warp_mma.h"
#include "test_util.h"

namespace foldcore {
namespace {

TEST(WarpMma, MatchesDoubleProduct) {
  Generator g(31);
  const Tensor a = randn({16, 16}, g).to(DType::bf16), b = randn({16, 8}, g).to(DType::bf16);
  const Tensor c = randn({16, 8}, g);
  Tensor d = Tensor::empty({16, 8}, DType::f32);
  ops::warp_mma_m16n8k16(a, b, c, d);
  const std::vector<float> av = a.to(DType::f32).to_vector(), bv = b.to(DType::f32).to_vector(),
                           cv = c.to_vector(), dv = d.to_vector();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = cv[i * 8 + j], mag = std::abs(cv[i * 8 + j]);
      for (int k = 0; k < 16; ++k) {
        s += static_cast<double>(av[i * 16 + k]) * bv[k * 8 + j];
        mag += std::abs(static_cast<double>(av[i * 16 + k]) * bv[k * 8 + j]);
      }
      EXPECT_NEAR(dv[i * 8 + j], s, 16 * std::ldexp(mag, -24)) << i << "," << j;
    }
}

TEST(WarpMma, BadInputIsAnError) {
  const Tensor a = Tensor::zeros({16, 16}, DType::bf16), b = Tensor::zeros({16, 8}, DType::bf16);
  const Tensor c = Tensor::zeros({16, 8}, DType::f32);
  Tensor d = Tensor::empty({16, 8}, DType::f32);
  EXPECT_THROW(ops::warp_mma_m16n8k16(a.to(DType::f32), b, c, d), Error);          // a not bf16
  EXPECT_THROW(ops::warp_mma_m16n8k16(a, Tensor::zeros({8, 16}, DType::bf16), c, d), Error);  // b shape
  EXPECT_THROW(ops::warp_mma_m16n8k16(a, b, c, Tensor::empty({16, 8}, DType::bf16)), Error);  // d dtype
}

}  // namespace
}  // namespace foldcore
