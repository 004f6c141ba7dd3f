// CUDA GEMM (cuBLASLt) vs the CPU reference, f32 and bf16. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/random.h"
#include "kernels/gemm.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::Activation;
using ops::GemmArgs;

// f32: both backends accumulate in plain fp32 (no TF32 on CUDA); only the summation order
// differs, ~K·2⁻²⁴ relative on dot products of N(0,1) terms: 1e-4 covers K ≤ 300 with margin.
constexpr double kF32Atol = 2e-4, kF32Rtol = 1e-4;
// bf16: same rounded inputs, fp32 accumulation on both sides; outputs are rounded to bf16
// (2⁻⁸ ≈ 4e-3 relative), and with an activation on CUDA the value is rounded twice (pre_act / D
// in bf16, then act) where the CPU rounds once: up to ~2 bf16 ulps, hence 2e-2.
constexpr double kBf16Atol = 2e-2, kBf16Rtol = 2e-2;

Shape mat(const Shape& batch, int64_t r, int64_t c) {
  Shape s = batch;
  s.push_back(r);
  s.push_back(c);
  return s;
}

struct Case {
  Shape batch;
  int64_t m, n, k;
  bool ta, tb, a_shared, b_shared;
  Activation act;
  bool bias, pre;
  float alpha, beta;
};

void compare(const Case& c, DType dt, uint64_t seed) {
  Generator gen(seed);
  const Shape ab = c.a_shared ? Shape{} : c.batch, bb = c.b_shared ? Shape{} : c.batch;
  Tensor a = randn(mat(ab, c.ta ? c.k : c.m, c.ta ? c.m : c.k), gen, 0, 1, dt);
  Tensor b = randn(mat(bb, c.tb ? c.n : c.k, c.tb ? c.k : c.n), gen, 0, 1, dt);
  Tensor out = randn(mat(c.batch, c.m, c.n), gen, 0, 1, dt);
  Tensor bias = randn({c.n}, gen, 0, 1, dt);
  auto run = [&](Device dev, Tensor* pre_out) {
    Tensor o = out.to(dev).clone();
    GemmArgs g;
    g.trans_a = c.ta;
    g.trans_b = c.tb;
    g.alpha = c.alpha;
    g.beta = c.beta;
    g.act = c.act;
    if (c.bias) g.bias = bias.to(dev);
    if (c.pre) g.pre_act = Tensor::zeros(out.shape(), dt, dev);
    ops::gemm(a.to(dev), b.to(dev), o, g);
    if (c.pre) *pre_out = g.pre_act.to(Device::cpu());
    return o.to(Device::cpu());
  };
  Tensor pre_cpu, pre_gpu;
  Tensor ref = run(Device::cpu(), &pre_cpu);
  Tensor got = run(Device::cuda(), &pre_gpu);
  SCOPED_TRACE("batch=" + c.batch.str() + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
               " k=" + std::to_string(c.k) + " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " " +
               std::string(dtype_name(dt)));
  const double atol = dt == DType::f32 ? kF32Atol : kBf16Atol, rtol = dt == DType::f32 ? kF32Rtol : kBf16Rtol;
  FC_EXPECT_CLOSE(got, ref, atol, rtol);
  if (c.pre) FC_EXPECT_CLOSE(pre_gpu, pre_cpu, atol, rtol);
}

const Case kCases[] = {
    // plain, all transposes, odd sizes
    {{}, 7, 33, 65, false, false, false, false, Activation::none, false, false, 1.f, 0.f},
    {{}, 65, 7, 33, true, false, false, false, Activation::none, false, false, 0.5f, 1.f},
    {{}, 33, 65, 7, false, true, false, false, Activation::none, false, false, 1.f, -0.5f},
    {{}, 1, 257, 129, true, true, false, false, Activation::none, false, false, 2.f, 0.f},
    // Linear over leading dims (shared b, folded into one GEMM) with fused epilogues
    {{2, 3}, 33, 65, 64, false, true, false, true, Activation::none, true, false, 1.f, 0.f},
    {{4}, 17, 64, 48, false, true, false, true, Activation::relu, true, false, 1.f, 0.f},
    {{4}, 17, 64, 48, false, true, false, true, Activation::relu, true, true, 1.f, 0.5f},
    {{3}, 33, 96, 40, false, true, false, true, Activation::gelu, true, true, 1.f, 0.f},
    {{3}, 33, 96, 40, false, false, false, true, Activation::gelu, false, false, 1.f, 0.f},
    // strided batches: both batched, shared a (batch stride 0), shared b with trans_a (no fold)
    {{5}, 64, 64, 64, false, false, false, false, Activation::none, false, false, 1.f, 0.f},
    {{2, 2}, 7, 33, 65, true, true, false, false, Activation::none, true, false, 1.f, 1.f},
    {{6}, 16, 33, 24, false, false, true, false, Activation::none, false, false, 1.f, 0.f},
    {{3}, 16, 33, 24, true, false, false, true, Activation::gelu, true, true, 1.f, 0.f},
    // K = 0: only beta·out + bias and the activation
    {{2}, 5, 9, 0, false, false, false, false, Activation::relu, true, true, 1.f, 0.5f},
};

TEST(GemmCuda, MatchesCpuF32) {
  FC_REQUIRE_CUDA();
  uint64_t seed = 100;
  for (const Case& c : kCases) compare(c, DType::f32, seed++);
}

TEST(GemmCuda, MatchesCpuBf16) {
  FC_REQUIRE_CUDA();
  uint64_t seed = 200;
  for (const Case& c : kCases) compare(c, DType::bf16, seed++);
}

TEST(GemmCuda, MatchesCpuF16) {
  FC_REQUIRE_CUDA();
  uint64_t seed = 300;
  // f16 has 11 mantissa bits; the bf16 tolerance is loose enough for it.
  for (const Case& c : kCases) compare(c, DType::f16, seed++);
}

TEST(GemmCuda, RowStridedViewsAndMatmul) {
  FC_REQUIRE_CUDA();
  Generator gen(400);
  Tensor big = randn({3, 20, 48}, gen);
  Tensor a = big.narrow(2, 8, 33);  // [3, 20, 33], ld 48, batch stride 960
  Tensor w = randn({17, 33}, gen);
  Tensor ref = ops::matmul(a, w, false, true);
  Tensor got = ops::matmul(a.to(Device::cuda()).contiguous().narrow(2, 0, 33), w.to(Device::cuda()), false, true);
  Tensor got2 = ops::matmul(big.to(Device::cuda()).narrow(2, 8, 33), w.to(Device::cuda()), false, true);
  FC_EXPECT_CLOSE(got.to(Device::cpu()), ref, kF32Atol, kF32Rtol);
  FC_EXPECT_CLOSE(got2.to(Device::cpu()), ref, kF32Atol, kF32Rtol);
}

// One bias per batch entry (cuBLASLt's bias batch stride; the K = 0 and separate-GELU epilogues
// read it per batch too): the stacked projections of autograd::linears, against the CPU.
TEST(GemmCuda, PerBatchBiasMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(402);
  for (const bool fallback : {false, true})  // one product, or one per entry (no algorithm for the mix)
  for (DType dt : {DType::f32, DType::bf16})
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu})
      for (const int64_t k : {int64_t{40}, int64_t{0}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " act " + std::to_string(static_cast<int>(act)) + " k " +
                     std::to_string(k));
        const Tensor a = randn({33, k}, gen, 0, 1, dt), b = randn({5, k, 24}, gen, 0, 1, dt);
        const Tensor bias = randn({5, 24}, gen, 0, 1, dt), out0 = randn({5, 33, 24}, gen, 0, 1, dt);
        auto run = [&](Device dev) {
          Tensor o = out0.to(dev).clone();
          GemmArgs g;
          g.bias = bias.to(dev);
          g.act = act;
          g.beta = k == 0 ? 0.5f : 0.f;
          ops::gemm(a.to(dev), b.to(dev), o, g);
          return o.to(Device::cpu());
        };
        const double atol = dt == DType::f32 ? kF32Atol : kBf16Atol, rtol = dt == DType::f32 ? kF32Rtol : kBf16Rtol;
        ops::set_gemm_bias_batch_fallback(fallback);
        const Tensor got = run(Device::cuda());
        ops::set_gemm_bias_batch_fallback(false);
        FC_EXPECT_CLOSE(got, run(Device::cpu()), atol, rtol);
      }
}

// The per-thread cuBLASLt plans: the same shape again reuses its plan (and gives the same bits),
// a new bias pointer on a reused plan is the one read, and an operand of another alignment or a
// new shape makes a plan of its own.
TEST(GemmCuda, PlansAreReusedPerShape) {
  FC_REQUIRE_CUDA();
  Generator gen(403);
  const Device dev = Device::cuda();
  const Tensor a = randn({32, 24}, gen, 0, 1, DType::bf16).to(dev), b = randn({24, 40}, gen, 0, 1, DType::bf16).to(dev);
  const Tensor bias1 = randn({40}, gen, 0, 1, DType::bf16).to(dev), bias2 = randn({40}, gen, 0, 1, DType::bf16).to(dev);
  auto product = [&](const Tensor& x, const Tensor& bias) {
    Tensor o = Tensor::empty({x.size(0), 40}, DType::bf16, dev);
    GemmArgs g;
    g.bias = bias;
    ops::gemm(x, b, o, g);
    return o.to(Device::cpu()).to(DType::f32);
  };
  const ops::GemmPlanStats s0 = ops::gemm_plan_stats();
  const Tensor first = product(a, bias1);
  const ops::GemmPlanStats s1 = ops::gemm_plan_stats();
  EXPECT_EQ(s1.made - s0.made, 1);
  const Tensor again = product(a, bias1), other_bias = product(a, bias2);
  const ops::GemmPlanStats s2 = ops::gemm_plan_stats();
  EXPECT_EQ(s2.made, s1.made);
  EXPECT_EQ(s2.reused - s1.reused, 2);
  FC_EXPECT_CLOSE(again, first, 0, 0);
  GemmArgs cpu_args;
  cpu_args.bias = bias2.to(Device::cpu());
  Tensor ref = Tensor::empty({32, 40}, DType::bf16);
  ops::gemm(a.to(Device::cpu()), b.to(Device::cpu()), ref, cpu_args);
  FC_EXPECT_CLOSE(other_bias, ref.to(DType::f32), kBf16Atol, kBf16Rtol);
  // Rows 1.. of a 33-row buffer: a 2-byte aligned operand, a plan of its own; a new shape too.
  const Tensor shifted = randn({33, 24}, gen, 0, 1, DType::bf16).to(dev).narrow(0, 1, 32);
  const ops::GemmPlanStats s3 = ops::gemm_plan_stats();
  product(shifted, bias1);
  product(a.narrow(0, 0, 16), bias1);
  EXPECT_EQ(ops::gemm_plan_stats().made - s3.made, 2);
}

// bf16 operands into an fp32 out with beta = 1 (the weight gradient's mixed product): cuBLASLt's
// result against the CPU's, both fp32 accumulations of the same values and fp32 out (kF32 bounds);
// batched, transposed, and K = 0 (beta·out only). Also through the fallback for a cuBLASLt without
// that mix (a bf16 product, then an fp32 add: the product rounded to bf16 once, kBf16 bounds).
TEST(GemmCuda, Bf16OperandsIntoFp32MatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(401);
  for (const bool fallback : {false, true})
  for (const bool trans : {false, true}) {
    SCOPED_TRACE(fallback ? "fallback" : "one product");
    ops::set_gemm_mixed_fallback(fallback);
    const Tensor a = randn(trans ? Shape{3, 64, 48} : Shape{3, 48, 64}, gen).to(DType::bf16);
    const Tensor b = randn({3, 64, 40}, gen).to(DType::bf16);
    const Tensor c0 = randn({3, 48, 40}, gen);
    GemmArgs g;
    g.trans_a = trans;
    g.beta = 1.f;
    Tensor ref = c0.clone();
    ops::gemm(a, b, ref, g);
    Tensor got = c0.to(Device::cuda());
    ops::gemm(a.to(Device::cuda()), b.to(Device::cuda()), got, g);
    EXPECT_EQ(got.dtype(), DType::f32);
    if (fallback) {
      FC_EXPECT_CLOSE(got.to(Device::cpu()), ref, kBf16Atol, kBf16Rtol);
    } else {
      FC_EXPECT_CLOSE(got.to(Device::cpu()), ref, kF32Atol, kF32Rtol);
    }
  }
  ops::set_gemm_mixed_fallback(false);
  Tensor out = Tensor::full({3, 5}, 2.0, DType::f32, Device::cuda());
  GemmArgs half;
  half.beta = 0.5f;
  ops::gemm(Tensor::zeros({3, 0}, DType::bf16, Device::cuda()), Tensor::zeros({0, 5}, DType::bf16, Device::cuda()), out,
            half);
  FC_EXPECT_CLOSE(out.to(Device::cpu()), Tensor::full({3, 5}, 1.0, DType::f32), 0, 0);
}


// gemm_sum_nt on CUDA against the CPU (one product per pair there). The one-kernel form sums every
// pair in fp32 registers and rounds once, the CPU after each pair: fp32 rounding of sums of ≤ 300
// bf16 products (kF32Atol/Rtol). Shapes: M and N off the kernel's 128-row tiles (ragged CTAs), N
// over two column tiles, K_i off the 32-column chunks (zero-filled), an empty pair, row-strided
// views; beta 0 over NaNs (out not read), 1 and -0.5. Pairs the kernel cannot take (K_i % 8 != 0,
// f16) run one cuBLASLt product per pair, as FOLDCORE_GEMM_SUM=per_pair does for every call.
TEST(GemmCuda, SumOfPairsMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(411);
  struct SumCase {
    int64_t m, n;
    std::vector<int64_t> ks;
    DType dt;
    bool fused;  // the one kernel can take it
  };
  const SumCase cases[] = {
      {200, 130, {128, 40, 0, 8}, DType::bf16, true},
      {129, 64, {32, 32, 32, 32, 32}, DType::bf16, true},
      {7, 258, {256, 256}, DType::bf16, true},
      {1100, 16, {64, 40}, DType::bf16, true},  // 9 CTA rows of column-sum partials
      {33, 18, {24, 12}, DType::bf16, true},    // K_i % 8 != 0 (row strides 44), each K_i <= 32: element loads
      {33, 18, {40, 12}, DType::bf16, false},   // off the 16-byte grid with K_i > 32
      {33, 17, {24, 16}, DType::bf16, false},   // N odd
      {33, 18, {24, 16}, DType::f16, false},
  };
  for (const SumCase& c : cases)
  for (const bool allow : {true, false}) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " " + std::string(dtype_name(c.dt)) +
                 (allow ? " fused allowed" : " per pair"));
    ops::set_gemm_sum_fused(allow);
    int64_t total = 0;
    for (int64_t k : c.ks) total += k;
    // Row-strided slices of wider matrices: row strides total + 8, a multiple of 8 when every K_i is.
    const Tensor a = randn({c.m, total + 8}, gen).to(c.dt), b = randn({c.n, total + 8}, gen).to(c.dt);
    const Tensor c0 = randn({c.m, c.n}, gen);
    for (const float beta : {0.f, 1.f, -0.5f}) {
      SCOPED_TRACE("beta " + std::to_string(beta));
      // gemm_sum_nt of the pairs on `dev` into `out`, a tensor there, with the column sums of the
      // even pairs' a (from 0.5) when `col_sums` (returned on the host).
      auto sum_into = [&](Device dev, const Tensor& out, bool col_sums = false) {
        std::vector<Tensor> as, bs, sums;
        int64_t off = 0;
        const Tensor ad = a.to(dev), bd = b.to(dev);
        for (int64_t k : c.ks) {
          as.push_back(ad.narrow(1, off, k));
          bs.push_back(bd.narrow(1, off, k));
          sums.push_back(col_sums && sums.size() % 2 == 0 ? Tensor::full({k}, 0.5, DType::f32, dev) : Tensor());
          off += k;
        }
        ops::gemm_sum_nt(as, bs, out, beta, col_sums ? sums : std::vector<Tensor>{});
        for (Tensor& t : sums)
          if (t.defined()) t = t.to(Device::cpu());
        return sums;
      };
      auto run = [&](Device dev) {
        Tensor out = beta == 0.f ? Tensor::full({c.m, c.n}, std::nan(""), DType::f32, dev) : c0.clone().to(dev);
        sum_into(dev, out);
        return out.to(Device::cpu());
      };
      const Tensor ref = run(Device::cpu());
      const int64_t before = ops::gemm_sum_fused_calls();
      const Tensor got = run(Device::cuda());
      EXPECT_EQ(ops::gemm_sum_fused_calls() - before, allow && c.fused ? 1 : 0);
      // The per-pair fallback for f16 rounds nothing either: 16-bit operands into fp32.
      FC_EXPECT_CLOSE(got, ref, kF32Atol, kF32Rtol);

      // Out in the pairs' dtype, a row-strided view: the fp32 sum (beta reading out's 16-bit
      // values) rounded once, by the kernel where it runs; on the CPU through an fp32 temporary. The
      // two fp32 sums differ by fp32 rounding, so the rounded values by at most one 16-bit ulp
      // (at most 2⁻⁷ relative for bf16; f16's 2⁻¹⁰ is inside it); the columns beside the view stay.
      const Tensor wide = randn({c.m, c.n + 6}, gen).to(c.dt);
      auto run16 = [&](Device dev) {
        const Tensor w = wide.to(dev).clone();
        sum_into(dev, w.narrow(1, 2, c.n));
        return w.to(Device::cpu()).to(DType::f32);
      };
      const Tensor ref16 = run16(Device::cpu());
      const int64_t before16 = ops::gemm_sum_fused_calls();
      const Tensor got16 = run16(Device::cuda());
      EXPECT_EQ(ops::gemm_sum_fused_calls() - before16, allow && c.fused ? 1 : 0);
      FC_EXPECT_CLOSE(got16.narrow(1, 2, c.n), ref16.narrow(1, 2, c.n), kF32Atol, 1.0 / 128);
      EXPECT_EQ(got16.narrow(1, 0, 2).to_vector(), wide.narrow(1, 0, 2).to(DType::f32).to_vector());
      EXPECT_EQ(got16.narrow(1, c.n + 2, 4).to_vector(), wide.narrow(1, c.n + 2, 4).to(DType::f32).to_vector());

      // With the column sums of the even pairs' a (the bias gradients): out as without them (the
      // kernel's sums do not touch its products: bit for bit), the sums within fp32 rounding of
      // the CPU's (sums of ≤ 1,100 bf16 values in another order).
      const auto with_sums = [&](Device dev) {
        Tensor out = beta == 0.f ? Tensor::full({c.m, c.n}, std::nan(""), DType::f32, dev) : c0.clone().to(dev);
        std::vector<Tensor> sums = sum_into(dev, out, true);
        sums.push_back(out.to(Device::cpu()));
        return sums;
      };
      const std::vector<Tensor> cpu_sums = with_sums(Device::cpu());
      const int64_t before_sums = ops::gemm_sum_fused_calls();
      const std::vector<Tensor> cuda_sums = with_sums(Device::cuda());
      EXPECT_EQ(ops::gemm_sum_fused_calls() - before_sums, allow && c.fused ? 1 : 0);
      EXPECT_EQ(cuda_sums.back().to_vector(), got.to_vector());
      for (size_t i = 0; i + 1 < cpu_sums.size(); ++i) {
        ASSERT_EQ(cpu_sums[i].defined(), cuda_sums[i].defined());
        if (!cpu_sums[i].defined()) continue;
        FC_EXPECT_CLOSE(cuda_sums[i], cpu_sums[i], kF32Atol, kF32Rtol);
      }
    }
  }
  ops::set_gemm_sum_fused(true);
}

// A run like the triangle attention's: four 16-byte-aligned pairs of K = 128 and a [M, 4] one (its
// pair bias, row stride 4: element loads), each its own contiguous tensor, in the one kernel with
// the column sums of the narrow pair and of one other; fp32 and bf16 outs, beta 0 and 1. Against
// the CPU as above (sums of 5 × 128 + 4 terms; a bf16 out within one ulp).
TEST(GemmCuda, SumOfPairsWithANarrowPairMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(412);
  const int64_t m = 300, n = 136;
  const std::vector<int64_t> ks = {128, 128, 4, 128, 128};
  std::vector<Tensor> a, b;
  for (int64_t k : ks) {
    a.push_back(randn({m, k}, gen).to(DType::bf16));
    b.push_back(randn({n, k}, gen).to(DType::bf16));
  }
  const Tensor c0 = randn({m, n}, gen);
  for (const DType out_dt : {DType::f32, DType::bf16})
    for (const float beta : {0.f, 1.f}) {
      SCOPED_TRACE(std::string(dtype_name(out_dt)) + " beta " + std::to_string(beta));
      auto run = [&](Device dev) {
        std::vector<Tensor> ad, bd, sums;
        for (size_t i = 0; i < ks.size(); ++i) {
          ad.push_back(a[i].to(dev));
          bd.push_back(b[i].to(dev));
          sums.push_back(i == 2 || i == 3 ? Tensor::full({ks[i]}, -1.0, DType::f32, dev) : Tensor());
        }
        const Tensor out = c0.to(out_dt).to(dev).clone();  // not c0 itself (to() returns it on the CPU in f32)
        ops::gemm_sum_nt(ad, bd, out, beta, sums);
        return std::vector<Tensor>{out.to(Device::cpu()).to(DType::f32), sums[2].to(Device::cpu()),
                                   sums[3].to(Device::cpu())};
      };
      const std::vector<Tensor> ref = run(Device::cpu());
      const int64_t before = ops::gemm_sum_fused_calls();
      const std::vector<Tensor> got = run(Device::cuda());
      EXPECT_EQ(ops::gemm_sum_fused_calls() - before, 1);
      FC_EXPECT_CLOSE(got[0], ref[0], kF32Atol, out_dt == DType::f32 ? kF32Rtol : 1.0 / 128);
      FC_EXPECT_CLOSE(got[1], ref[1], kF32Atol, kF32Rtol);
      FC_EXPECT_CLOSE(got[2], ref[2], kF32Atol, kF32Rtol);
    }
}

}  // namespace
}  // namespace foldcore
