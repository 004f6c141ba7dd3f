// CUDA fused bias + dropout + residual + LayerNorm vs the CPU reference (f32, bf16, forward and
// backward), and the dropout mask: the CUDA fused op drops exactly the elements the CPU op and
// the CUDA bias_dropout_residual drop. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "core/kernel_profile.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test_util.h"

namespace foldcore {
namespace {

struct Outs {
  Tensor h, y, mean, rstd, dx, dbias, dres, dgamma, dbeta;
};

ops::DropoutArgs args(float p, std::vector<int> shared = {}) {
  ops::DropoutArgs d;
  d.p = p;
  d.seed = 77;
  d.offset = 3;
  d.shared_dims = std::move(shared);
  return d;
}

Outs run(Device dev, const Tensor& x, const Tensor& bias, const Tensor& res, const Tensor& dy, const Tensor& gamma,
         const Tensor& beta, const ops::DropoutArgs& d) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Outs o;
  for (Tensor* t : {&o.h, &o.y, &o.dx, &o.dres}) *t = Tensor::zeros(x.shape(), x.dtype(), dev);
  o.mean = Tensor::zeros({rows}, DType::f32, dev);
  o.rstd = Tensor::zeros({rows}, DType::f32, dev);
  o.dbias = Tensor::full({c}, 0.25, DType::f32, dev);  // accumulation targets
  o.dgamma = Tensor::full({c}, 0.5, DType::f32, dev);
  o.dbeta = Tensor::full({c}, -0.5, DType::f32, dev);
  const Tensor g = gamma.to(dev);
  ops::bias_dropout_residual_layernorm_forward(x.to(dev), bias.to(dev), res.to(dev), d, g, beta.to(dev), 1e-5f, o.h,
                                               o.y, o.mean, o.rstd);
  ops::bias_dropout_residual_layernorm_backward(dy.to(dev), o.h, g, o.mean, o.rstd, d, o.dx, o.dbias, o.dres,
                                                o.dgamma, o.dbeta);
  for (Tensor* t : {&o.h, &o.y, &o.mean, &o.rstd, &o.dx, &o.dbias, &o.dres, &o.dgamma, &o.dbeta})
    *t = t->to(Device::cpu());
  return o;
}

// Warp path (odd: per-element Philox; aligned: whole blocks), block path (odd and aligned), BERT
// 1024; the backward's one-pass form with dbias (rows up to 512 elements, kernels/cuda/layernorm_cuda.cu)
// over 128 chunks of rows, the last ones short or empty (4,100 rows).
const Shape kShapes[] = {{1, 1}, {7, 33}, {3, 5, 128}, {65, 256}, {9, 1024}, {5, 1031}, {4, 4096}, {4100, 128}};

void compare(DType dt, double atol, double rtol, uint64_t seed) {
  Generator gen(seed);
  for (const Shape& s : kShapes) {
    const int64_t c = s.back(), rows = s.product() / c;
    const Tensor x = randn(s, gen, 0.f, 1.f, dt), bias = randn({c}, gen, 0.f, 0.5f, dt);
    const Tensor res = randn(s, gen, 0.5f, 2.f, dt), dy = randn(s, gen, 0.f, 1.f, dt);
    const Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    for (float p : {0.f, 0.1f}) {
      const Outs ref = run(Device::cpu(), x, bias, res, dy, gamma, beta, args(p));
      const Outs got = run(Device::cuda(), x, bias, res, dy, gamma, beta, args(p));
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)) + " p=" + std::to_string(p));
      // h: the same mask and the same fp32 sum rounded once: bit-identical.
      FC_EXPECT_CLOSE(got.h, ref.h, 0, 0);
      FC_EXPECT_CLOSE(got.y, ref.y, atol, rtol);
      FC_EXPECT_CLOSE(got.mean, ref.mean, 1e-5, 1e-5);
      FC_EXPECT_CLOSE(got.rstd, ref.rstd, 1e-5, 1e-4);
      FC_EXPECT_CLOSE(got.dres, ref.dres, atol, rtol);
      FC_EXPECT_CLOSE(got.dx, ref.dx, atol / (1 - p), rtol);
      // Column sums over `rows` fp32 terms in different orders.
      FC_EXPECT_CLOSE(got.dbias, ref.dbias, 1e-5 * rows + 1e-5 + atol, 1e-4 + rtol);
      FC_EXPECT_CLOSE(got.dgamma, ref.dgamma, 1e-5 * rows + 1e-5, 1e-4);
      FC_EXPECT_CLOSE(got.dbeta, ref.dbeta, 1e-5 * rows + 1e-5, 1e-4);
    }
  }
}

// f32: fp32 math on both sides, differing only in summation order (~1e-6 relative).
TEST(FusedLayerNormCuda, MatchesCpuF32) {
  FC_REQUIRE_CUDA();
  compare(DType::f32, 1e-4, 1e-4, 600);
}

// bf16 storage: fp32 math; y/dx rounded to bf16 (2⁻⁸ relative) from fp32 values ~1e-6 apart, so
// at most one ulp: 1e-2 relative, 2e-2 absolute for |y| ~ 5.
TEST(FusedLayerNormCuda, MatchesCpuBf16) {
  FC_REQUIRE_CUDA();
  compare(DType::bf16, 2e-2, 1e-2, 601);
}

// Mask equality: x = 1, no bias, residual = 0 ⇒ h = mask/(1−p) exactly, on both backends and for
// the unfused CUDA op (vector path 1024 and per-element path 1031, unshared and shared masks).
TEST(FusedLayerNormCuda, DropoutMaskEqualsCpuAndUnfused) {
  FC_REQUIRE_CUDA();
  for (const Shape& s : {Shape{6, 1024}, Shape{5, 1031}, Shape{3, 4, 64}}) {
    for (const auto& d : {args(0.3f), args(0.3f, {-2})}) {
      const int64_t c = s.back();
      const Tensor ones = Tensor::full(s, 1.0, DType::f32), zeros = Tensor::zeros(s, DType::f32);
      const Tensor gamma = Tensor::full({c}, 1.0, DType::f32), beta = Tensor::zeros({c}, DType::f32);
      const Outs cpu = run(Device::cpu(), ones, Tensor::zeros({c}, DType::f32), zeros, zeros, gamma, beta, d);
      const Outs gpu = run(Device::cuda(), ones, Tensor::zeros({c}, DType::f32), zeros, zeros, gamma, beta, d);
      Tensor unfused = Tensor::zeros(s, DType::f32, Device::cuda());
      ops::bias_dropout_residual_forward(ones.to(Device::cuda()), Tensor(), zeros.to(Device::cuda()), d, unfused);
      SCOPED_TRACE(s.str());
      EXPECT_EQ(gpu.h.to_vector(), cpu.h.to_vector());
      EXPECT_EQ(gpu.h.to_vector(), unfused.to(Device::cpu()).to_vector());
    }
  }
}

// The pre-LN stream's form (an fp32 residual stream, a 16-bit or fp32 update without bias, y in
// bf16 or fp32; or a bf16 stream with an fp32 update and a bf16 y, x read 32 bytes at a time;
// autograd::residual_layer_norm): on the device, bit for bit the device's
// bias_dropout_residual_forward then layernorm_forward (the same per-element sum and the same
// statistics code), in one kernel; against the CPU's h bit for bit and y within a bf16 ulp (2^-8
// relative of |y| ~ 5) from statistics summed in other orders. Warp paths with vectors (128, 256:
// an Evoformer's pair and MSA rows) and element by element (33); row- and column-shared masks.
TEST(FusedLayerNormCuda, PreLnStreamMixedDtypesMatchTheComposition) {
  FC_REQUIRE_CUDA();
  Generator gen(602);
  const Device dev = Device::cuda();
  for (const auto& [shape, xt, rt, yt, d] :
       {std::tuple{Shape{6, 40, 128}, DType::bf16, DType::f32, DType::bf16, args(0.25f, {-3})},
        std::tuple{Shape{6, 40, 128}, DType::f32, DType::f32, DType::bf16, args(0.f)},
        std::tuple{Shape{5, 24, 256}, DType::bf16, DType::f32, DType::bf16, args(0.15f, {-2})},
        std::tuple{Shape{7, 33}, DType::bf16, DType::f32, DType::f32, args(0.3f)},
        std::tuple{Shape{6, 40, 128}, DType::f32, DType::bf16, DType::bf16, args(0.25f, {-3})},
        std::tuple{Shape{7, 33}, DType::f32, DType::bf16, DType::bf16, args(0.f)}}) {
    SCOPED_TRACE(shape.str() + " x " + std::string(dtype_name(xt)) + " residual " + std::string(dtype_name(rt)) +
                 " y " + std::string(dtype_name(yt)));
    const int64_t c = shape.back(), rows = shape.product() / c;
    const Tensor x = randn(shape, gen, 0.1f, 1.f, xt), residual = randn(shape, gen, 0.5f, 2.f, rt);
    const Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    auto fused = [&](Device on) {
      std::vector<Tensor> o{Tensor::zeros(shape, rt, on), Tensor::zeros(shape, yt, on),
                            Tensor::zeros({rows}, DType::f32, on), Tensor::zeros({rows}, DType::f32, on)};
      ops::bias_dropout_residual_layernorm_forward(x.to(on), Tensor(), residual.to(on), d, gamma.to(on), beta.to(on),
                                                   1e-5f, o[0], o[1], o[2], o[3]);
      return o;
    };
    const std::vector<Tensor> got = fused(dev), cpu = fused(Device::cpu());
    std::vector<Tensor> apart{Tensor::zeros(shape, rt, dev), Tensor::zeros(shape, yt, dev),
                              Tensor::zeros({rows}, DType::f32, dev), Tensor::zeros({rows}, DType::f32, dev)};
    kernel_profile::reset();
    kernel_profile::set_enabled(true);
    ops::bias_dropout_residual_forward(x.to(dev), Tensor(), residual.to(dev), d, apart[0]);
    ops::layernorm_forward(apart[0], gamma.to(dev), beta.to(dev), 1e-5f, apart[1], apart[2], apart[3]);
    kernel_profile::set_enabled(false);
    EXPECT_EQ(kernel_profile::collect().kernels.size(), 2u);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(i);
      FC_EXPECT_CLOSE(got[i].to(Device::cpu()).to(DType::f32), apart[i].to(Device::cpu()).to(DType::f32), 0, 0);
    }
    FC_EXPECT_CLOSE(got[0].to(Device::cpu()).to(DType::f32), cpu[0].to(DType::f32), 0, 0);
    FC_EXPECT_CLOSE(got[1].to(Device::cpu()).to(DType::f32), cpu[1].to(DType::f32), 2e-2, 1e-2);
  }
}

}  // namespace
}  // namespace foldcore
