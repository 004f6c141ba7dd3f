// CUDA LayerNorm vs the CPU reference, f32 and bf16. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test_util.h"

namespace foldcore {
namespace {

struct Outs {
  Tensor y, mean, rstd, dx, dgamma, dbeta;
};

Outs run(Device dev, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Outs o;
  o.y = Tensor::zeros(x.shape(), x.dtype(), dev);
  o.dx = Tensor::zeros(x.shape(), x.dtype(), dev);
  o.mean = Tensor::zeros({rows}, DType::f32, dev);
  o.rstd = Tensor::zeros({rows}, DType::f32, dev);
  o.dgamma = Tensor::full({c}, 0.5, DType::f32, dev);  // accumulation target
  o.dbeta = Tensor::full({c}, -0.5, DType::f32, dev);
  const Tensor xd = x.to(dev), g = gamma.to(dev);
  ops::layernorm_forward(xd, g, beta.to(dev), 1e-5f, o.y, o.mean, o.rstd);
  ops::layernorm_backward(dy.to(dev), xd, g, o.mean, o.rstd, o.dx, o.dgamma, o.dbeta);
  for (Tensor* t : {&o.y, &o.mean, &o.rstd, &o.dx, &o.dgamma, &o.dbeta}) *t = t->to(Device::cpu());
  return o;
}

// Row lengths: warp path (odd, vector-aligned 128/256/1024), block path (odd and aligned > 1024).
const Shape kShapes[] = {{1, 1}, {7, 33}, {3, 5, 128}, {65, 256}, {9, 1024}, {5, 1031}, {4, 4096}, {1000, 64}};

void compare(DType dt, double atol, double rtol, uint64_t seed) {
  Generator gen(seed);
  for (const Shape& s : kShapes) {
    const int64_t c = s.back(), rows = s.product() / c;
    Tensor x = randn(s, gen, 0.5f, 2.f, dt), dy = randn(s, gen, 0, 1, dt);
    Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    const Outs ref = run(Device::cpu(), x, dy, gamma, beta);
    const Outs got = run(Device::cuda(), x, dy, gamma, beta);
    SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
    FC_EXPECT_CLOSE(got.y, ref.y, atol, rtol);
    FC_EXPECT_CLOSE(got.dx, ref.dx, atol, rtol);
    FC_EXPECT_CLOSE(got.mean, ref.mean, 1e-5, 1e-5);
    FC_EXPECT_CLOSE(got.rstd, ref.rstd, 1e-5, 1e-4);
    // Column sums over `rows` fp32 terms in different orders.
    FC_EXPECT_CLOSE(got.dgamma, ref.dgamma, 1e-5 * rows + 1e-5, 1e-4);
    FC_EXPECT_CLOSE(got.dbeta, ref.dbeta, 1e-5 * rows + 1e-5, 1e-4);
  }
}

// f32: fp32 statistics on both sides, differing only in summation order (~1e-6 relative).
TEST(LayerNormCuda, MatchesCpuF32) {
  FC_REQUIRE_CUDA();
  compare(DType::f32, 1e-4, 1e-4, 500);
}

// bf16 storage: identical inputs, fp32 math; y/dx rounded to bf16 (2⁻⁸ relative) from fp32
// values that differ by ~1e-6, so at most one ulp apart: 1e-2 relative, 2e-2 absolute for |y| ~ 5.
TEST(LayerNormCuda, MatchesCpuBf16) {
  FC_REQUIRE_CUDA();
  compare(DType::bf16, 2e-2, 1e-2, 501);
}

// On the device, a 16-bit y for an f32 x equals the device's f32 y converted (bit for bit), the
// backward from a 16-bit dy equals the one from dy converted to f32, and accumulate_dx equals the
// gradient added afterwards; the warp path (c = 128, vectorised, and c = 33) and the block path
// (c = 1,031), each against the same composition on the device.
TEST(LayerNormCuda, SixteenBitOutputAndAccumulatedGradientMatchTheComposition) {
  FC_REQUIRE_CUDA();
  Generator gen(503);
  const Device dev = Device::cuda();
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector(); };
  for (const Shape& s : {Shape{70, 128}, Shape{7, 33}, Shape{5, 1031}}) {
    for (DType y16 : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(y16)));
      const int64_t c = s.back(), rows = s.product() / c;
      const Tensor x = randn(s, gen, 0.5f, 2.f).to(dev), gamma = randn({c}, gen, 1.f, 0.3f).to(dev);
      const Tensor beta = randn({c}, gen).to(dev);
      Tensor y = Tensor::empty(s, DType::f32, dev), yh = Tensor::empty(s, y16, dev);
      Tensor mean = Tensor::empty({rows}, DType::f32, dev), rstd = Tensor::empty({rows}, DType::f32, dev);
      ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
      ops::layernorm_forward(x, gamma, beta, 1e-5f, yh, mean, rstd);
      EXPECT_EQ(host(yh), host(y.to(y16)));
      const Tensor dyh = randn(s, gen, 0, 1, y16).to(dev), prev = randn(s, gen).to(dev);
      Tensor dx = Tensor::empty(s, DType::f32, dev), dxh = Tensor::empty(s, DType::f32, dev), acc = prev.clone();
      Tensor dg = Tensor::zeros({c}, DType::f32, dev), db = Tensor::zeros({c}, DType::f32, dev);
      Tensor dgh = Tensor::zeros({c}, DType::f32, dev), dbh = Tensor::zeros({c}, DType::f32, dev);
      ops::layernorm_backward(dyh.to(DType::f32), x, gamma, mean, rstd, dx, dg, db);
      ops::layernorm_backward(dyh, x, gamma, mean, rstd, dxh, dgh, dbh);
      EXPECT_EQ(host(dxh), host(dx));
      EXPECT_EQ(host(dgh), host(dg));
      EXPECT_EQ(host(dbh), host(db));
      ops::layernorm_backward(dyh, x, gamma, mean, rstd, acc, dgh, dbh, true);
      Tensor sum = Tensor::empty(s, DType::f32, dev);
      ops::add(prev, dx, sum);
      EXPECT_EQ(host(acc), host(sum));
    }
  }
}

TEST(LayerNormCuda, ParameterGradientsAreDeterministic) {
  FC_REQUIRE_CUDA();
  Generator gen(502);
  Tensor x = randn({4096, 128}, gen), dy = randn({4096, 128}, gen);
  Tensor gamma = randn({128}, gen), beta = randn({128}, gen);
  const Outs a = run(Device::cuda(), x, dy, gamma, beta);
  const Outs b = run(Device::cuda(), x, dy, gamma, beta);
  EXPECT_EQ(a.dgamma.to_vector(), b.dgamma.to_vector());
  EXPECT_EQ(a.dbeta.to_vector(), b.dbeta.to_vector());
}

}  // namespace
}  // namespace foldcore
