// kernels/warp_mma.h on CUDA vs the CPU: the tensor-core tile product with the fragment layout of
// kernels/cuda/mma.cuh. Every element of d depends on one row of a and one column of b, so a wrong
// row/column mapping or a swapped register half moves elements by O(1), while the tensor core's
// own summation order and width change them by at most 16 fp32 roundings of Σ|terms|: that bound,
// element by element. Random inputs, and structured ones (a = row index one-hot, b = column
// index) that make a misplaced element visible in its value. What this checks depends on the
// backend: on a GPU, the layout functions of mma.cuh against the hardware's fragment layout; on
// the host emulation, whose mma forms the product through the same layout functions, only that
// loads, the warp exchange and stores fit together (a wrong layout would be consistent with itself
// there) — the layout itself is verified on a GPU only.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/random.h"
#include "kernels/warp_mma.h"
#include "test_util.h"

namespace foldcore {
namespace {

void expect_equal_within_rounding(const Tensor& a, const Tensor& b, const Tensor& c) {
  Tensor dc = Tensor::empty({16, 8}, DType::f32), dg = Tensor::empty({16, 8}, DType::f32, Device::cuda());
  ops::warp_mma_m16n8k16(a, b, c, dc);
  ops::warp_mma_m16n8k16(a.to(Device::cuda()), b.to(Device::cuda()), c.to(Device::cuda()), dg);
  const std::vector<float> av = a.to(DType::f32).to_vector(), bv = b.to(DType::f32).to_vector(), cv = c.to_vector();
  const std::vector<float> x = dg.to(Device::cpu()).to_vector(), y = dc.to_vector();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double mag = std::abs(cv[i * 8 + j]);
      for (int k = 0; k < 16; ++k) mag += std::abs(static_cast<double>(av[i * 16 + k]) * bv[k * 8 + j]);
      EXPECT_NEAR(x[i * 8 + j], y[i * 8 + j], 16 * std::ldexp(mag, -24) + 1e-30) << i << "," << j;
    }
}

TEST(WarpMmaCuda, RandomTilesMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator g(41);
  for (int rep = 0; rep < 3; ++rep)
    expect_equal_within_rounding(randn({16, 16}, g).to(DType::bf16), randn({16, 8}, g).to(DType::bf16),
                                 randn({16, 8}, g));
}

TEST(WarpMmaCuda, EveryElementLandsWhereTheLayoutSays) {
  FC_REQUIRE_CUDA();
  // a[i][k] = 1 when k == i (mod 16), b[k][j] = 16·j + k (exact in bf16 below 256), c = 0:
  // d[i][j] = 16·j + i names its own position.
  std::vector<float> a(16 * 16, 0.f), b(16 * 8), c(16 * 8, 0.f);
  for (int i = 0; i < 16; ++i) a[i * 16 + i] = 1.f;
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 8; ++j) b[k * 8 + j] = static_cast<float>(16 * j + k);
  const Tensor at = Tensor::from_vector(a, {16, 16}, DType::bf16), bt = Tensor::from_vector(b, {16, 8}, DType::bf16);
  Tensor dg = Tensor::empty({16, 8}, DType::f32, Device::cuda());
  ops::warp_mma_m16n8k16(at.to(Device::cuda()), bt.to(Device::cuda()), Tensor::from_vector(c, {16, 8}).to(Device::cuda()),
                         dg);
  const std::vector<float> d = dg.to(Device::cpu()).to_vector();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(d[i * 8 + j], static_cast<float>(16 * j + i)) << i << "," << j;
}

}  // namespace
}  // namespace foldcore
