// CPU GEMM vs naive triple loops (double accumulation), and a Linear layer's gemm-based backward
// vs finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/random.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "test_util.h"

namespace foldcore {
namespace {

using ops::Activation;
using ops::GemmArgs;

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

// Naive reference for one [batch..., M, N] output given dense (contiguous) operands; shared
// operands are 2-D. Inputs are read as floats (16-bit inputs were already rounded by storage).
std::vector<float> naive_gemm(const Tensor& a, const Tensor& b, const Tensor& out0, const GemmArgs& g,
                              std::vector<float>* pre = nullptr) {
  const auto av = a.contiguous().to_vector(), bv = b.contiguous().to_vector(), ov = out0.to_vector();
  const std::vector<float> biasv = g.bias.defined() ? g.bias.to_vector() : std::vector<float>{};
  const int64_t m = out0.size(-2), n = out0.size(-1), k = g.trans_a ? a.size(-2) : a.size(-1);
  const int64_t batch = out0.numel() / std::max<int64_t>(m * n, 1);
  const int64_t sa = a.dim() == 2 ? 0 : m * k, sb = b.dim() == 2 ? 0 : k * n;
  std::vector<float> res(ov.size());
  if (pre) pre->assign(ov.size(), 0.f);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = g.trans_a ? av[bi * sa + p * m + i] : av[bi * sa + i * k + p];
          const double y = g.trans_b ? bv[bi * sb + j * k + p] : bv[bi * sb + p * n + j];
          acc += x * y;
        }
        const int64_t o = (bi * m + i) * n + j;
        const int64_t bias_at = (g.bias.defined() && g.bias.dim() > 1 ? bi * n : 0) + j;  // per-batch bias rows
        double t = g.alpha * acc + (g.beta != 0 ? g.beta * ov[o] : 0.0) + (biasv.empty() ? 0.0 : biasv[bias_at]);
        if (pre) (*pre)[o] = static_cast<float>(t);
        if (g.act == Activation::relu) t = t > 0 ? t : 0;
        if (g.act == Activation::gelu) t = gelu_ref(t);
        res[o] = static_cast<float>(t);
      }
  return res;
}

Shape mat_shape(const Shape& batch, int64_t r, int64_t c) {
  Shape s = batch;
  s.push_back(r);
  s.push_back(c);
  return s;
}

struct Case {
  Shape batch;
  int64_t m, n, k;
  bool ta, tb, a_shared, b_shared;
};

void run_case(const Case& c, DType dt, const GemmArgs& base, Generator& gen, double atol, double rtol) {
  const Shape ab = c.a_shared ? Shape{} : c.batch, bb = c.b_shared ? Shape{} : c.batch;
  Tensor a = randn(mat_shape(ab, c.ta ? c.k : c.m, c.ta ? c.m : c.k), gen, 0, 1, dt);
  Tensor b = randn(mat_shape(bb, c.tb ? c.n : c.k, c.tb ? c.k : c.n), gen, 0, 1, dt);
  Tensor out = randn(mat_shape(c.batch, c.m, c.n), gen, 0, 1, dt);
  GemmArgs g = base;
  g.trans_a = c.ta;
  g.trans_b = c.tb;
  if (g.bias.defined()) g.bias = randn({c.n}, gen, 0, 1, dt);
  Tensor pre;
  if (g.act != Activation::none) g.pre_act = pre = Tensor::zeros(out.shape(), dt);
  std::vector<float> pre_ref;
  const auto ref = naive_gemm(a, b, out, g, &pre_ref);
  ops::gemm(a, b, out, g);
  const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                           " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " batch=" + c.batch.str();
  SCOPED_TRACE(what);
  FC_EXPECT_CLOSE(out, Tensor::from_vector(ref, out.shape()), atol, rtol);
  if (pre.defined()) FC_EXPECT_CLOSE(pre, Tensor::from_vector(pre_ref, out.shape()), atol, rtol);
}

// f32: the only error is fp32 rounding of K-term dot products of N(0,1) values (|acc| ≲ 3√K),
// i.e. ~K·2⁻²⁴·√K ≪ 1e-4 for K ≤ 65.
constexpr double kF32Tol = 1e-4;
// bf16 storage: inputs are exact in both paths; the output is rounded to 8 mantissa bits
// (relative 2⁻⁸ ≈ 4e-3), so 1e-2 relative plus a small absolute term for values near 0.
constexpr double kBf16Rtol = 1e-2, kBf16Atol = 2e-2;

TEST(Gemm, RandomShapesAllTransposesF32) {
  Generator gen(11);
  const int64_t sizes[] = {1, 7, 33, 65};
  int i = 0;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes) {
        if ((++i) % 3 != 0 && !(m == 65 && n == 65 && k == 65)) continue;  // a third of the grid keeps it fast
        for (int t = 0; t < 4; ++t) {
          GemmArgs g;
          g.alpha = 0.75f;
          g.beta = (t % 2) ? 0.5f : 0.f;
          run_case({{}, m, n, k, (t & 1) != 0, (t & 2) != 0, false, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
        }
      }
}

TEST(Gemm, BatchedAndSharedOperands) {
  Generator gen(12);
  GemmArgs g;
  g.beta = 1.f;
  // Shared b (Linear over leading dims), shared a, both batched; small per-GEMM sizes take the
  // OpenMP-over-batch path, 65³ the per-GEMM threaded one.
  run_case({{2, 3}, 7, 33, 5, false, true, false, true}, DType::f32, g, gen, kF32Tol, kF32Tol);
  run_case({{4}, 33, 7, 65, true, false, true, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
  run_case({{5}, 1, 65, 7, false, false, false, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
  run_case({{2}, 65, 65, 65, true, true, false, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
  run_case({{40}, 7, 9, 5, false, false, false, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
}

TEST(Gemm, EpiloguesBiasReluGeluWithPreAct) {
  Generator gen(13);
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
    GemmArgs g;
    g.bias = Tensor::zeros({1}, DType::f32);  // placeholder: run_case draws a [n] bias
    g.act = act;
    g.beta = act == Activation::relu ? 0.25f : 0.f;
    run_case({{3}, 33, 7, 65, false, true, false, true}, DType::f32, g, gen, kF32Tol, kF32Tol);
    run_case({{}, 1, 65, 7, true, false, false, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
  }
}

// One bias per batch entry ([batch..., N]): a strided batch of projections of one shared input
// (autograd::linears stacks the weights of q, k, v and the gate). f32 and bf16, with and without
// an activation and pre_act, a shared a and a batched b, and batch dims of two levels. A bias
// whose batch dims differ from out's is rejected.
TEST(Gemm, PerBatchBias) {
  Generator gen(14);
  for (DType dt : {DType::f32, DType::bf16})
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " act " + std::to_string(static_cast<int>(act)));
      const double atol = dt == DType::f32 ? kF32Tol : kBf16Atol, rtol = dt == DType::f32 ? kF32Tol : kBf16Rtol;
      for (const Shape& batch : {Shape{4}, Shape{2, 3}}) {
        const Tensor a = randn({33, 24}, gen, 0, 1, dt);
        Shape bs = batch, os = batch, biass = batch;
        bs.push_back(24), bs.push_back(17);
        os.push_back(33), os.push_back(17);
        biass.push_back(17);
        const Tensor b = randn(bs, gen, 0, 1, dt);
        Tensor out = Tensor::zeros(os, dt);
        GemmArgs g;
        g.bias = randn(biass, gen, 0, 1, dt);
        g.act = act;
        if (act != Activation::none) g.pre_act = Tensor::zeros(os, dt);
        std::vector<float> pre_ref;
        const auto ref = naive_gemm(a, b, out, g, &pre_ref);
        ops::gemm(a, b, out, g);
        FC_EXPECT_CLOSE(out, Tensor::from_vector(ref, out.shape()), atol, rtol);
        if (g.pre_act.defined()) FC_EXPECT_CLOSE(g.pre_act, Tensor::from_vector(pre_ref, out.shape()), atol, rtol);
      }
    }
  GemmArgs wrong;
  wrong.bias = Tensor::zeros({3, 17}, DType::f32);
  EXPECT_THROW(ops::gemm(Tensor::zeros({5, 8}, DType::f32), Tensor::zeros({4, 8, 17}, DType::f32),
                         Tensor::zeros({4, 5, 17}, DType::f32), wrong),
               Error);
}

TEST(Gemm, SixteenBitInputs) {
  Generator gen(14);
  for (DType dt : {DType::bf16, DType::f16}) {
    GemmArgs g;
    g.bias = Tensor::zeros({1}, dt);
    g.act = Activation::gelu;
    g.beta = 0.5f;
    SCOPED_TRACE(std::string(dtype_name(dt)));
    // f16 has 11 mantissa bits, tighter than bf16; the bf16 bound covers both.
    run_case({{2}, 33, 65, 7, false, false, false, false}, dt, g, gen, kBf16Atol, kBf16Rtol);
    run_case({{3}, 7, 33, 65, true, true, false, true}, dt, g, gen, kBf16Atol, kBf16Rtol);
    run_case({{}, 65, 1, 33, false, true, false, false}, dt, GemmArgs{}, gen, kBf16Atol, kBf16Rtol);
  }
}

// 16-bit operands into an fp32 out (a weight gradient accumulated into its fp32 master): the
// product of the operands' values in fp32, added to beta·out, not rounded to 16 bits. Against the
// fp32 product of the same (exactly converted) values: the same fp32 accumulation, so within fp32
// summation order (kF32Tol); against the 16-bit product the difference is that product's rounding.
// K = 0 leaves beta·out; a bias, an activation or an f32 operand with a 16-bit out are errors.
TEST(Gemm, SixteenBitOperandsIntoFp32) {
  Generator gen(23);
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    for (const bool trans : {false, true}) {
      const Tensor a = randn(trans ? Shape{2, 40, 24} : Shape{2, 24, 40}, gen).to(dt);
      const Tensor b = randn({2, 40, 17}, gen).to(dt);
      const Tensor c0 = randn({2, 24, 17}, gen);
      GemmArgs g;
      g.trans_a = trans;
      g.beta = 1.f;
      Tensor got = c0.clone();
      ops::gemm(a, b, got, g);
      Tensor ref = c0.clone();
      ops::gemm(a.to(DType::f32), b.to(DType::f32), ref, g);
      EXPECT_EQ(got.dtype(), DType::f32);
      FC_EXPECT_CLOSE(got, ref, kF32Tol, kF32Tol);
    }
    Tensor out = Tensor::full({3, 5}, 2.0, DType::f32);
    GemmArgs half;
    half.beta = 0.5f;
    ops::gemm(Tensor::zeros({3, 0}, dt), Tensor::zeros({0, 5}, dt), out, half);
    FC_EXPECT_CLOSE(out, Tensor::full({3, 5}, 1.0, DType::f32), 0, 0);
    GemmArgs bias;
    bias.bias = Tensor::zeros({5}, DType::f32);
    EXPECT_THROW(ops::gemm(Tensor::zeros({3, 4}, dt), Tensor::zeros({4, 5}, dt), out, bias), Error);
    GemmArgs relu;
    relu.act = Activation::relu;
    EXPECT_THROW(ops::gemm(Tensor::zeros({3, 4}, dt), Tensor::zeros({4, 5}, dt), out, relu), Error);
    Tensor out16 = Tensor::zeros({3, 5}, dt);
    EXPECT_THROW(ops::gemm(Tensor::zeros({3, 4}, DType::f32), Tensor::zeros({4, 5}, DType::f32), out16, GemmArgs{}), Error);
  }
}

// gemm_sum_nt: Σ_i a_i·b_iᵀ is the product over the concatenated K. The pairs are column slices of
// one [M, ΣK] and one [N, ΣK] bf16 matrix (row-strided views), so the reference is one fp32 GEMM of
// the whole matrices; the CPU adds the pairs one after another, so they differ by fp32 rounding of
// sums over ≤ 200 terms (1e-4). A bf16 out (a row-strided view) is, bit for bit, the fp32 out's
// values rounded once, beta reading out's bf16 values; the columns beside the view are untouched.
TEST(Gemm, SumOfPairsIsTheProductOverTheirConcatenatedK) {
  Generator gen(29);
  const std::vector<int64_t> ks = {24, 0, 40, 136};
  int64_t total = 0;
  for (int64_t k : ks) total += k;
  const Tensor a = randn({19, total}, gen).to(DType::bf16), b = randn({14, total}, gen).to(DType::bf16);
  std::vector<Tensor> as, bs;
  int64_t off = 0;
  for (int64_t k : ks) {
    as.push_back(a.narrow(1, off, k));
    bs.push_back(b.narrow(1, off, k));
    off += k;
  }
  const Tensor c0 = randn({19, 14}, gen);
  for (const float beta : {0.f, 1.f, -0.5f}) {
    SCOPED_TRACE("beta " + std::to_string(beta));
    Tensor got = beta == 0.f ? Tensor::full({19, 14}, std::nan(""), DType::f32) : c0.clone();
    ops::gemm_sum_nt(as, bs, got, beta);
    Tensor ref = c0.clone();
    GemmArgs g;
    g.trans_b = true;
    g.beta = beta;
    ops::gemm(a.to(DType::f32), b.to(DType::f32), ref, g);
    FC_EXPECT_CLOSE(got, ref, kF32Tol, kF32Tol);

    const Tensor wide = randn({19, 20}, gen).to(DType::bf16);
    const Tensor wide_before = wide.clone();
    const Tensor c16 = wide.narrow(1, 3, 14);  // [19, 14], row stride 20
    Tensor f32 = c16.to(DType::f32);  // out's bf16 values, exactly
    ops::gemm_sum_nt(as, bs, f32, beta);
    ops::gemm_sum_nt(as, bs, c16, beta);
    EXPECT_EQ(c16.to(DType::f32).to_vector(), f32.to(DType::bf16).to(DType::f32).to_vector());
    EXPECT_EQ(wide.narrow(1, 0, 3).to(DType::f32).to_vector(), wide_before.narrow(1, 0, 3).to(DType::f32).to_vector());
    EXPECT_EQ(wide.narrow(1, 17, 3).to(DType::f32).to_vector(), wide_before.narrow(1, 17, 3).to(DType::f32).to_vector());
  }
  // Column sums of the a_i, accumulated into fp32 destinations (the bias gradients of a projection
  // run): per pair the bits of sum_rows_accumulate; an undefined destination and a pair with K = 0
  // take none.
  {
    std::vector<Tensor> sums, want;
    for (size_t i = 0; i < ks.size(); ++i) {
      sums.push_back(i == 2 ? Tensor() : Tensor::full({ks[i]}, 0.5, DType::f32));
      want.push_back(Tensor::full({ks[i]}, 0.5, DType::f32));
      if (i != 2 && ks[i] > 0) ops::sum_rows_accumulate(as[i].contiguous(), want[i]);
    }
    Tensor got = Tensor::zeros({19, 14}, DType::f32), ref = got.clone();
    ops::gemm_sum_nt(as, bs, got, 0.f, sums);
    ops::gemm_sum_nt(as, bs, ref, 0.f);
    EXPECT_EQ(got.to_vector(), ref.to_vector());
    for (size_t i = 0; i < ks.size(); ++i) {
      if (i == 2) continue;
      EXPECT_EQ(sums[i].to_vector(), want[i].to_vector()) << "pair " << i;
    }
    EXPECT_THROW(ops::gemm_sum_nt(as, bs, got, 0.f, {sums[0]}), Error);  // not one per pair
    std::vector<Tensor> bad = sums;
    bad[3] = Tensor::zeros({ks[3] + 1}, DType::f32);
    EXPECT_THROW(ops::gemm_sum_nt(as, bs, got, 0.f, bad), Error);
    bad[3] = Tensor::zeros({ks[3]}, DType::bf16);
    EXPECT_THROW(ops::gemm_sum_nt(as, bs, got, 0.f, bad), Error);
  }
  Tensor out = Tensor::zeros({19, 14}, DType::f32);
  // Mismatched shapes, dtypes, counts and layouts are errors naming the pair.
  EXPECT_THROW(ops::gemm_sum_nt({as[0]}, {bs[0], bs[2]}, out), Error);
  EXPECT_THROW(ops::gemm_sum_nt({as[0], as[2]}, {bs[0], bs[3]}, out), Error);
  EXPECT_THROW(ops::gemm_sum_nt({as[0].to(DType::f32)}, {bs[0].to(DType::f32)}, out), Error);
  EXPECT_THROW(ops::gemm_sum_nt({as[0]}, {bs[0].to(DType::f16)}, out), Error);
  EXPECT_THROW(ops::gemm_sum_nt({as[0]}, {bs[0]}, Tensor::zeros({19, 14}, DType::f16)), Error);  // not the pairs' dtype
  EXPECT_THROW(ops::gemm_sum_nt({as[0]}, {bs[0]}, Tensor::zeros({14, 19}, DType::f32).transpose(0, 1)), Error);
  EXPECT_THROW(ops::gemm_sum_nt({Tensor::zeros({40, 19}, DType::bf16).transpose(0, 1)}, {bs[2]}, out), Error);
  EXPECT_THROW(ops::gemm_sum_nt(std::vector<Tensor>(9, as[0]), std::vector<Tensor>(9, bs[0]), out), Error);
  try {
    ops::gemm_sum_nt({as[0], as[2]}, {bs[0], bs[3]}, out);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pair 1"), std::string::npos) << e.what();
  }
}

TEST(Gemm, EmptyInnerDimension) {
  // K = 0: the product is empty; out = act(beta·out + bias).
  Generator gen(19);
  GemmArgs g;
  g.beta = 0.5f;
  g.bias = Tensor::zeros({1}, DType::f32);
  g.act = Activation::relu;
  run_case({{2}, 5, 9, 0, false, false, false, false}, DType::f32, g, gen, kF32Tol, kF32Tol);
  run_case({{}, 5, 9, 0, true, true, false, false}, DType::bf16, g, gen, kBf16Atol, kBf16Rtol);
}

TEST(Gemm, StridedViewsAndRejectedLayouts) {
  Generator gen(15);
  // Row-strided views (ld > cols) are accepted directly.
  Tensor big_a = randn({9, 40}, gen), big_b = randn({40, 50}, gen);
  Tensor a = big_a.narrow(1, 3, 33);  // [9, 33], ld 40
  Tensor b = big_b.narrow(0, 2, 33).narrow(1, 5, 17);  // [33, 17], ld 50
  Tensor out = Tensor::zeros({9, 17}, DType::f32);
  ops::gemm(a, b, out);
  FC_EXPECT_CLOSE(out, Tensor::from_vector(naive_gemm(a, b, out, {}), out.shape()), kF32Tol, kF32Tol);
  // A transposed view has a non-unit last stride: rejected with a message (use trans_a instead).
  EXPECT_THROW(ops::gemm(big_a.transpose(0, 1).narrow(1, 0, 9), randn({9, 4}, gen), Tensor::zeros({40, 4}, DType::f32)),
               Error);
  // Shape mismatch, dtype mismatch, broadcast output.
  EXPECT_THROW(ops::gemm(randn({3, 4}, gen), randn({5, 6}, gen), Tensor::zeros({3, 6}, DType::f32)), Error);
  EXPECT_THROW(ops::gemm(randn({3, 4}, gen), randn({4, 6}, gen, 0, 1, DType::bf16), Tensor::zeros({3, 6}, DType::f32)),
               Error);
  Tensor bcast = Tensor::zeros({1, 3, 6}, DType::f32).expand({2, 3, 6});
  EXPECT_THROW(ops::gemm(randn({2, 3, 4}, gen), randn({4, 6}, gen), bcast), Error);
  EXPECT_THROW(ops::gemm(randn({2, 3, 4}, gen), randn({3, 4, 6}, gen), Tensor::zeros({2, 3, 6}, DType::f32)), Error);
}

TEST(Gemm, MatmulAllocatesBatchedOutput) {
  Generator gen(16);
  Tensor a = randn({2, 5, 7}, gen), w = randn({3, 7}, gen);
  Tensor y = ops::matmul(a, w, false, true);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 3}));
  GemmArgs g;
  g.trans_b = true;
  FC_EXPECT_CLOSE(y, Tensor::from_vector(naive_gemm(a, w, Tensor::zeros({2, 5, 3}, DType::f32), g), y.shape()),
                  kF32Tol, kF32Tol);
}

TEST(Gemm, BlockedFallbackMatchesNaive) {
  // The no-BLAS path, forced, across several cache blocks (kMc=32, kKc=kNc=128) and odd edges.
  Generator gen(17);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const int64_t m = 70, n = 150, k = 140;
    Tensor a = randn(ta ? Shape{k, m} : Shape{m, k}, gen), b = randn(tb ? Shape{n, k} : Shape{k, n}, gen);
    Tensor c = randn({m, n}, gen);
    GemmArgs g;
    g.trans_a = ta;
    g.trans_b = tb;
    g.alpha = 1.5f;
    g.beta = -0.5f;
    const auto ref = naive_gemm(a, b, c, g);
    ops::cpu::sgemm(ta, tb, m, n, k, g.alpha, a.data<float>(), a.size(1), b.data<float>(), b.size(1), g.beta,
                    c.data<float>(), n, /*parallel=*/t < 2, /*force_fallback=*/true);
    // K = 140: fp32 dot products of N(0,1) terms, error ≲ 140·2⁻²⁴·12 ≈ 1e-4.
    FC_EXPECT_CLOSE(c, Tensor::from_vector(ref, c.shape()), 3e-4, 1e-4);
  }
}

// A Linear+GELU layer y = gelu(x·Wᵀ + b) over [2, 3, K] inputs, its backward written with gemm:
//   dpre = dy ⊙ gelu'(pre)      dx = dpre · W      dW += dpreᵀ · x (beta = 1)      db += Σ_rows dpre
TEST(Gemm, LinearGeluBackwardMatchesFiniteDifferences) {
  Generator gen(18);
  const int64_t k = 5, n = 4;
  Tensor x = randn({2, 3, k}, gen), w = randn({n, k}, gen, 0, 0.5f), b = randn({n}, gen);
  Tensor dy = randn({2, 3, n}, gen);  // dloss/dy for loss = Σ y ⊙ dy
  auto forward = [&](Tensor* pre_out) {
    Tensor y = Tensor::zeros({2, 3, n}, DType::f32), pre = Tensor::zeros({2, 3, n}, DType::f32);
    GemmArgs g;
    g.trans_b = true;
    g.bias = b;
    g.act = Activation::gelu;
    g.pre_act = pre;
    ops::gemm(x, w, y, g);
    if (pre_out) *pre_out = pre;
    return y;
  };
  auto loss = [&] { return testing::weighted_sum(forward(nullptr), dy); };

  Tensor pre;
  forward(&pre);
  std::vector<float> dpre_v = dy.to_vector();
  const auto pv = pre.to_vector();
  for (size_t i = 0; i < pv.size(); ++i) {
    const double z = pv[i];
    const double dg = 0.5 * (1 + std::erf(z / std::sqrt(2.0))) + z * std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
    dpre_v[i] = static_cast<float>(dpre_v[i] * dg);
  }
  Tensor dpre = Tensor::from_vector(dpre_v, {2, 3, n});
  Tensor dx = Tensor::zeros(x.shape(), DType::f32);
  ops::gemm(dpre, w, dx);  // [2,3,n]·[n,k]
  // dW accumulates: start from a known value and check the increment.
  Tensor dw = Tensor::full({n, k}, 0.25, DType::f32);
  GemmArgs acc;
  acc.trans_a = true;
  acc.beta = 1.f;
  ops::gemm(dpre.view({6, n}), x.view({6, k}), dw, acc);  // [n,6]·[6,k]
  std::vector<float> dwv = dw.to_vector();
  for (float& v : dwv) v -= 0.25f;
  Tensor dw_inc = Tensor::from_vector(dwv, {n, k});
  // db via gemm with a ones row: [1,6]·[6,n].
  Tensor db = Tensor::zeros({1, n}, DType::f32);
  ops::gemm(Tensor::full({1, 6}, 1.0, DType::f32), dpre.view({6, n}), db);

  // Central differences with eps = 1e-2 in f32: truncation ~eps²·|gelu'''|·|w|² ≈ 1e-4 and
  // rounding ~1e-7·|loss|/eps ≈ 1e-5, so atol 2e-3 / rtol 1e-2 leaves margin without hiding a
  // wrong term (those are O(0.1–1)).
  testing::check_gradient(loss, x, dx, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, w, dw_inc, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, b, db.view({n}), 1e-2, 2e-3, 1e-2);
}

// OpenBLAS runs vector kernels where the CPU has them: a processor newer than the library gets its
// SSE3 fallback ("Prescott": 2.6x slower sgemm on an Emerald Rapids machine), which
// ops::cpu::blas_core replaces by the AVX-512 or AVX2 kernels.
TEST(Gemm, BlasUsesTheCpusVectorKernels) {
  const std::string core = ops::cpu::blas_core();
  if (core == "none") GTEST_SKIP() << "built without OpenBLAS";
  if (std::getenv("OPENBLAS_CORETYPE")) GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user's choice";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 + FMA";
  std::printf("OpenBLAS kernels: %s\n", core.c_str());
  for (const char* sse : {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn",
                          "Dunnington", "Nehalem", "Athlon", "Opteron", "Barcelona", "Nano", "Bobcat"})
    EXPECT_STRCASENE(core.c_str(), sse);
}

// A bf16 matrix rows×cols with leading dimension ld > cols, its unused tail of each row NaN: a
// pack that reads past the matrix then poisons the product (NaN·0 is NaN).
std::vector<bf16> bf16_matrix(int64_t rows, int64_t cols, int64_t ld, Generator& gen) {
  const auto v = randn({rows, cols}, gen).to_vector();
  std::vector<bf16> m(static_cast<size_t>(rows * ld + 64), bf16(std::nanf("")));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[r * ld + c] = bf16(v[r * cols + c]);
  return m;
}

// |C − exact| ≤ (k + 2)·2⁻²⁴·(Σ_p |a·b| + |C₀|): any fp32 summation order (with the accumulated
// C₀ as one more term), against a double reference of the same bf16 values.
void expect_amx_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const std::vector<bf16>& a, int64_t lda,
                        const std::vector<bf16>& b, int64_t ldb, const std::vector<float>& c0,
                        const std::vector<float>& c, int64_t ldc, bool accumulate, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double exact = accumulate ? c0[i * ldc + j] : 0.0, mag = accumulate ? std::fabs(c0[i * ldc + j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = static_cast<float>(ta ? a[p * lda + i] : a[i * lda + p]);
        const double y = static_cast<float>(tb ? b[j * ldb + p] : b[p * ldb + j]);
        exact += x * y;
        mag += std::fabs(x * y);
      }
      const double bound = (k + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
      if (!(std::fabs(c[i * ldc + j] - exact) <= bound) && ++bad <= 3)
        ADD_FAILURE() << what << " C[" << i << "," << j << "] = " << c[i * ldc + j] << ", exact " << exact
                      << ", bound " << bound;
    }
  EXPECT_EQ(bad, 0) << what;
}

// The AMX bf16 GEMM against double products of the same values: every transpose combination,
// sizes off the 16/32 tile edges and across the kMc = 256 / kKc = 512 / kNc = 512 blocks, padded
// leading dimensions with NaN beyond each row, accumulation into C, one thread and OpenMP.
TEST(Gemm, AmxBf16TilesEqualFp32Products) {
  if (!ops::cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or FOLDCORE_CPU_AMX=0)";
  Generator gen(2026);
  struct Size {
    int64_t m, n, k;
  };
  for (const Size sz : {Size{1, 1, 1}, Size{17, 33, 45}, Size{64, 96, 64}, Size{300, 70, 530}, Size{40, 600, 40},
                        Size{129, 129, 1100}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc) {
          const int64_t ar = ta ? sz.k : sz.m, acl = ta ? sz.m : sz.k, br = tb ? sz.n : sz.k, bcl = tb ? sz.k : sz.n;
          const int64_t lda = acl + 3, ldb = bcl + 5, ldc = sz.n + 2;
          const auto a = bf16_matrix(ar, acl, lda, gen), b = bf16_matrix(br, bcl, ldb, gen);
          const auto c0v = randn({sz.m, ldc}, gen).to_vector();
          for (int par = 0; par < 2; ++par) {
            std::vector<float> c = c0v;
            ops::cpu::gemm_bf16_amx(ta, tb, sz.m, sz.n, sz.k, a.data(), lda, b.data(), ldb, c.data(), ldc, acc, par);
            char what[96];
            std::snprintf(what, sizeof what, "m%lld n%lld k%lld ta%d tb%d acc%d par%d", static_cast<long long>(sz.m),
                          static_cast<long long>(sz.n), static_cast<long long>(sz.k), ta, tb, acc, par);
            expect_amx_product(ta, tb, sz.m, sz.n, sz.k, a, lda, b, ldb, c0v, c, ldc, acc, what);
            for (int64_t i = 0; i < sz.m; ++i)  // the padding columns of C are not written
              for (int64_t j = sz.n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0v[i * ldc + j]) << what;
          }
        }
}

// A packed once (the attention's K and V), multiplied by several A of different heights.
TEST(Gemm, AmxPackedOperandServesManyProducts) {
  if (!ops::cpu::amx_bf16_available()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or FOLDCORE_CPU_AMX=0)";
  Generator gen(2027);
  for (const bool tb : {true, false}) {
    const int64_t k = 70, n = 45, ldb = (tb ? k : n) + 7;
    const auto b = bf16_matrix(tb ? n : k, tb ? k : n, ldb, gen);
    ops::cpu::AmxPackedB packed;
    packed.pack(tb, k, n, b.data(), ldb);
    for (const int64_t m : {1, 32, 33, 100})
      for (int acc = 0; acc < 2; ++acc) {
        const int64_t lda = k + 1, ldc = n + 3;
        const auto a = bf16_matrix(m, k, lda, gen);
        const auto c0v = randn({m, ldc}, gen).to_vector();
        std::vector<float> c = c0v;
        packed.multiply(m, a.data(), lda, c.data(), ldc, acc);
        char what[64];
        std::snprintf(what, sizeof what, "packed tb%d m%lld acc%d", tb ? 1 : 0, static_cast<long long>(m), acc);
        expect_amx_product(false, tb, m, n, k, a, lda, b, ldb, c0v, c, ldc, acc, what);
      }
  }
}

}  // namespace
}  // namespace foldcore
