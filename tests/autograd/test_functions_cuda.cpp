// autograd Functions on CUDA against the CPU, for the ones whose device path has a form of its
// own: outer_product_project (the outer product mean's strided-batch GEMMs, per i bᵀ·a_i forward
// and W·dy_iᵀ backward, and its backward's GEMMs into the operands' dtypes) and mul of a 16-bit a by an fp32 b (the mixed
// multiply, no cast node). fp32 and under bf16 autocast. Skipped without a CUDA device (the host
// emulation runs it in CI).
//
// Tolerances: the values and gradients are sums over s of products; cuBLASLt may order those sums
// differently from the CPU's GEMM, so fp32 agrees to about 1e-6 of the largest magnitude (2e-6
// allowed: a few ulps of sums of 8-16 terms), and bf16 outputs to one bf16 rounding flip (2^-8
// relative of the largest, 4e-3 allowed). The mixed multiply has no sum: bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "test_util.h"

namespace foldcore::autograd {
namespace {

const Device kGpu = Device::cuda(0);

// Each of `got` within tol × (the largest magnitude of `want`) of `want`, element by element.
void expect_near_scaled(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to(Device::cpu()).to(DType::f32).to_vector();
  const std::vector<float> w = want.to(Device::cpu()).to(DType::f32).to_vector();
  float largest = 0;
  for (const float v : w) largest = std::max(largest, std::fabs(v));
  ASSERT_GT(largest, 0.f) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol * largest) << what << " [" << i << "]";
}

struct Outer {
  Tensor out, da, db, dw, dbias;
};

// outer_product_project of a [S, Ni, c], b [S, Nj, e], w [c·e, z] and bias [z] on `dev`, its value
// and the four gradients for the output gradient d [Ni, Nj, z].
Outer outer_project(Device dev, DType autocast, const Tensor& a, const Tensor& b, const Tensor& w,
                    const Tensor& bias, const Tensor& d) {
  std::optional<AutocastGuard> ac;
  if (autocast != DType::f32) ac.emplace(autocast);
  Variable va(a.to(dev), true), vb(b.to(dev), true), vw(w.to(dev), true), vbias(bias.to(dev), true);
  const Variable out = outer_product_project(va, vb, vw, vbias);
  backward({out}, {d.to(out.dtype()).to(dev)});
  return {out.value(), va.grad(), vb.grad(), vw.grad(), vbias.grad()};
}

// Tolerances beyond the file's: in bf16 the outer products' gradient is stored in bf16 on both
// devices, and an element rounded the other way (sums ordered otherwise) moves the operands'
// gradients by 2^-9 of one term: 4e-3 of the largest allowed; W's gradient sums bf16 outer products
// that may differ by one rounding likewise. The bias gradient sums the same values: 1e-5.
TEST(AutogradFunctionsCuda, OuterProductProjectMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(61);
  // The outer product mean's form (S rows, c = e channels) and an uneven one.
  for (const auto& [s, ni, nj, c, e, z] :
       std::vector<std::array<int64_t, 6>>{{16, 12, 12, 8, 8, 16}, {9, 5, 7, 3, 6, 5}}) {
    const Tensor a = randn({s, ni, c}, gen), b = randn({s, nj, e}, gen), w = randn({c * e, z}, gen),
                 bias = randn({z}, gen), d = randn({ni, nj, z}, gen);
    for (const DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + ", S " + std::to_string(s) + ", " + std::to_string(ni) + "×" +
                   std::to_string(nj) + ", c " + std::to_string(c) + ", e " + std::to_string(e));
      const Outer cpu = outer_project(Device::cpu(), t, a, b, w, bias, d),
                  gpu = outer_project(kGpu, t, a, b, w, bias, d);
      EXPECT_EQ(gpu.out.dtype(), cpu.out.dtype());
      EXPECT_EQ(gpu.out.device(), kGpu);
      for (const Tensor* g : {&gpu.da, &gpu.db, &gpu.dw, &gpu.dbias}) EXPECT_EQ(g->dtype(), DType::f32);
      const bool f32 = t == DType::f32;
      expect_near_scaled(gpu.out, cpu.out, f32 ? 2e-6 : 4e-3, "out");
      expect_near_scaled(gpu.da, cpu.da, f32 ? 2e-6 : 4e-3, "da");
      expect_near_scaled(gpu.db, cpu.db, f32 ? 2e-6 : 4e-3, "db");
      expect_near_scaled(gpu.dw, cpu.dw, f32 ? 2e-6 : 4e-3, "dw");
      expect_near_scaled(gpu.dbias, cpu.dbias, 1e-5, "dbias");
    }
  }
}

// mul of a bf16 a by an fp32 b broadcast over the last axis (the outer product mean's update times
// its normaliser) on the device: the value and a's gradient bit for bit the CPU's, with the mixed
// kernel and no cast node; b's gradient, a sum over the 16 channels in the reduction's order,
// within 2e-6 of the largest.
TEST(AutogradFunctionsCuda, MulOfBf16ByFp32MatchesCpuBitForBit) {
  FC_REQUIRE_CUDA();
  Generator gen(62);
  const Shape s{6, 7, 16};
  const Tensor a = randn(s, gen).to(DType::bf16), b = randn({6, 7, 1}, gen), w = randn(s, gen);
  std::vector<std::vector<float>> got[2];
  Tensor db[2];
  for (const int k : {0, 1}) {
    const Device dev = k == 0 ? Device::cpu() : kGpu;
    Variable va(a.to(dev), true), vb(b.to(dev), true);
    const Variable y = mul(va, vb);
    EXPECT_EQ(y.node()->name, "mul");
    EXPECT_EQ(y.dtype(), DType::f32);
    backward({y}, {w.to(dev)});
    EXPECT_EQ(va.grad().dtype(), DType::bf16);
    for (const Tensor& t : {y.value(), va.grad()}) got[k].push_back(t.to(Device::cpu()).to(DType::f32).to_vector());
    db[k] = vb.grad().to(Device::cpu());
  }
  for (size_t i = 0; i < got[0].size(); ++i) EXPECT_EQ(got[1][i], got[0][i]) << "tensor " << i;
  expect_near_scaled(db[1], db[0], 2e-6, "db");
}

}  // namespace
}  // namespace foldcore::autograd
