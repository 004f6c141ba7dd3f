// CPU softmax / softmax cross-entropy vs naive double math, and gradients vs finite differences.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/random.h"
#include "kernels/cpu/softmax_cpu_math.h"
#include "kernels/softmax.h"
#include "test_util.h"

namespace foldcore {
namespace {

std::vector<double> naive_softmax_row(const float* x, int64_t c) {
  double m = -INFINITY;
  for (int64_t j = 0; j < c; ++j) m = std::max(m, static_cast<double>(x[j]));
  std::vector<double> p(c);
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += (p[j] = std::exp(x[j] - m));
  for (auto& v : p) v /= s;
  return p;
}

TEST(Softmax, ForwardBackwardMatchNaive) {
  Generator gen(31);
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& s : {Shape{1, 1}, Shape{7, 33}, Shape{2, 3, 65}, Shape{5, 1}, Shape{3, 1000}}) {
      const int64_t c = s.back(), rows = s.product() / c;
      Tensor x = randn(s, gen, 0, 3, dt), dy = randn(s, gen, 0, 1, dt);
      Tensor y = Tensor::zeros(s, dt), dx = Tensor::zeros(s, dt);
      ops::softmax_forward(x, y);
      ops::softmax_backward(y, dy, dx);
      const auto xv = x.to_vector(), yv = y.to_vector(), dyv = dy.to_vector();
      std::vector<float> yref(xv.size()), dxref(xv.size());
      for (int64_t r = 0; r < rows; ++r) {
        const auto p = naive_softmax_row(xv.data() + r * c, c);
        // The backward reference uses the op's own (stored, possibly rounded) y, as autograd does.
        double dot = 0;
        for (int64_t j = 0; j < c; ++j) dot += static_cast<double>(dyv[r * c + j]) * yv[r * c + j];
        for (int64_t j = 0; j < c; ++j) {
          yref[r * c + j] = static_cast<float>(p[j]);
          dxref[r * c + j] = static_cast<float>(yv[r * c + j] * (dyv[r * c + j] - dot));
        }
      }
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
      // f32: exp/sum rounding ~1e-6 relative. 16-bit: output rounding 2⁻⁸ relative (bf16).
      const double tol = dt == DType::f32 ? 1e-5 : 1e-2;
      FC_EXPECT_CLOSE(y, Tensor::from_vector(yref, s), tol * 1e-1, tol);
      FC_EXPECT_CLOSE(dx, Tensor::from_vector(dxref, s), tol * 1e-1, tol);
    }
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  Generator gen(32);
  Tensor x = randn({4, 9}, gen, 0, 2), w = randn({4, 9}, gen);
  Tensor y = Tensor::zeros({4, 9}, DType::f32);
  auto loss = [&] {
    ops::softmax_forward(x, y);
    return testing::weighted_sum(y, w);
  };
  loss();
  Tensor dx = Tensor::zeros({4, 9}, DType::f32);
  ops::softmax_backward(y, w, dx);
  // Softmax outputs are ≤ 1 and smooth: eps=1e-2 gives truncation ~1e-5, rounding ~1e-5.
  testing::check_gradient(loss, x, dx, 1e-2, 5e-4, 1e-2);
}

struct CeRef {
  std::vector<float> loss, grad;
};

// targets: soft [rows, c] or empty; labels: used when targets is empty.
CeRef naive_ce(const std::vector<float>& x, const std::vector<int64_t>& labels, const std::vector<float>& targets,
               const std::vector<float>& weights, float dscale, int64_t rows, int64_t c) {
  CeRef r;
  r.loss.assign(rows, 0.f);
  r.grad.assign(rows * c, 0.f);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> t(c, 0);
    if (targets.empty()) {
      if (labels[i] < 0) continue;
      t[labels[i]] = 1;
    } else {
      for (int64_t j = 0; j < c; ++j) t[j] = targets[i * c + j];
    }
    const double w = weights.empty() ? 1 : weights[i];
    const auto p = naive_softmax_row(x.data() + i * c, c);
    double l = 0, st = 0;
    for (int64_t j = 0; j < c; ++j) l -= t[j] * std::log(p[j]), st += t[j];
    r.loss[i] = static_cast<float>(w * l);
    for (int64_t j = 0; j < c; ++j) r.grad[i * c + j] = static_cast<float>(w * dscale * (p[j] * st - t[j]));
  }
  return r;
}

TEST(CrossEntropy, HardLabelsWithIgnoreAndWeights) {
  Generator gen(33);
  for (DType dt : {DType::f32, DType::bf16})
    for (DType lt : {DType::i32, DType::i64}) {
      const int64_t rows = 9, c = 33;
      Tensor x = randn({3, 3, c}, gen, 0, 2, dt);
      std::vector<int64_t> lab = {0, 5, -1, 32, 7, -100, 1, 2, 31};
      Tensor labels = Tensor::from_vector_i64(lab, {rows}, lt);
      Tensor weights = rand_uniform({rows}, gen, 0.5f, 2.f);
      Tensor loss = Tensor::zeros({rows}, DType::f32), dl = Tensor::full({3, 3, c}, 7.0, dt);
      ops::CrossEntropyArgs args;
      args.labels = labels;
      args.weights = weights;
      args.dscale = 0.125f;
      ops::softmax_cross_entropy(x, args, loss, dl);
      const CeRef r = naive_ce(x.to_vector(), lab, {}, weights.to_vector(), 0.125f, rows, c);
      SCOPED_TRACE(std::string(dtype_name(dt)));
      const double tol = dt == DType::f32 ? 1e-5 : 1e-2;  // bf16: dlogits rounding 2⁻⁸
      FC_EXPECT_CLOSE(loss, Tensor::from_vector(r.loss, {rows}), 1e-4, 1e-5);
      FC_EXPECT_CLOSE(dl, Tensor::from_vector(r.grad, {3, 3, c}), tol * 1e-1, tol);
      // Forward only leaves nothing else to write.
      Tensor loss2 = Tensor::zeros({rows}, DType::f32);
      ops::softmax_cross_entropy(x, args, loss2);
      FC_EXPECT_CLOSE(loss2, loss, 0, 0);
    }
}

TEST(CrossEntropy, SoftTargetsUnnormalised) {
  Generator gen(34);
  const int64_t rows = 7, c = 65;
  Tensor x = randn({rows, c}, gen, 0, 2);
  // Targets in [0,1) that do not sum to 1: exercises the Σt·lse term.
  Tensor t = rand_uniform({rows, c}, gen, 0.f, 0.05f);
  Tensor loss = Tensor::zeros({rows}, DType::f32), dl = Tensor::zeros({rows, c}, DType::f32);
  ops::CrossEntropyArgs args;
  args.targets = t;
  ops::softmax_cross_entropy(x, args, loss, dl);
  const CeRef r = naive_ce(x.to_vector(), {}, t.to_vector(), {}, 1.f, rows, c);
  FC_EXPECT_CLOSE(loss, Tensor::from_vector(r.loss, {rows}), 1e-4, 1e-5);
  FC_EXPECT_CLOSE(dl, Tensor::from_vector(r.grad, {rows, c}), 1e-6, 1e-5);
  // bf16 logits with f32 targets are allowed.
  Tensor xb = x.to(DType::bf16), dlb = Tensor::zeros({rows, c}, DType::bf16);
  ops::softmax_cross_entropy(xb, args, loss, dlb);
  const CeRef rb = naive_ce(xb.to_vector(), {}, t.to_vector(), {}, 1.f, rows, c);
  FC_EXPECT_CLOSE(loss, Tensor::from_vector(rb.loss, {rows}), 1e-4, 1e-5);
  FC_EXPECT_CLOSE(dlb, Tensor::from_vector(rb.grad, {rows, c}), 1e-4, 1e-2);
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  Generator gen(35);
  const int64_t rows = 4, c = 6;
  Tensor x = randn({rows, c}, gen, 0, 2), t = rand_uniform({rows, c}, gen, 0.f, 0.4f);
  Tensor weights = rand_uniform({rows}, gen, 0.5f, 2.f);
  Tensor loss = Tensor::zeros({rows}, DType::f32);
  ops::CrossEntropyArgs args;
  args.targets = t;
  args.weights = weights;
  auto total = [&] {
    ops::softmax_cross_entropy(x, args, loss);
    return testing::weighted_sum(loss, Tensor::full({rows}, 1.0, DType::f32));
  };
  Tensor dl = Tensor::zeros({rows, c}, DType::f32);
  ops::softmax_cross_entropy(x, args, loss, dl);
  // dlogits = d(Σ loss)/dx with dscale = 1. lse is smooth; eps=1e-2: error ~1e-5.
  testing::check_gradient(total, x, dl, 1e-2, 5e-4, 1e-2);
}

TEST(CrossEntropy, RejectsBadArguments) {
  Generator gen(36);
  Tensor x = randn({4, 5}, gen), loss = Tensor::zeros({4}, DType::f32);
  ops::CrossEntropyArgs both;
  both.labels = Tensor::from_vector_i64({0, 1, 2, 3}, {4});
  both.targets = Tensor::zeros({4, 5}, DType::f32);
  EXPECT_THROW(ops::softmax_cross_entropy(x, both, loss), Error);
  EXPECT_THROW(ops::softmax_cross_entropy(x, ops::CrossEntropyArgs{}, loss), Error);
  ops::CrossEntropyArgs out_of_range;
  out_of_range.labels = Tensor::from_vector_i64({0, 1, 5, 3}, {4});
  EXPECT_THROW(ops::softmax_cross_entropy(x, out_of_range, loss), Error);
  ops::CrossEntropyArgs short_labels;
  short_labels.labels = Tensor::from_vector_i64({0, 1, 2}, {3});
  EXPECT_THROW(ops::softmax_cross_entropy(x, short_labels, loss), Error);
  EXPECT_THROW(ops::softmax_forward(x, Tensor::zeros({4, 6}, DType::f32)), Error);
}

// The vectorised row primitives behind the CPU softmax and attention: exp_shift_sum against double
// exp over the whole softmax range [−87, 0] (relative error bound 4e-7, a few fp32 ulp: the
// polynomial is accurate to ~1e-7 and the final scaling is exact), exact 0 for scores far below
// the max (−1e9 mask biases, −inf), NaN propagated; row_max on lengths around the lane count.
TEST(Softmax, RowPrimitivesMatchDoubleMath) {
  std::vector<float> x;
  for (float v = -87.f; v <= 0.f; v += 0.0137f) x.push_back(v);
  const std::vector<float> arg = x;
  const float sum = ops::cpu::exp_shift_sum(x.data(), static_cast<int64_t>(x.size()), 0.f);
  double ref_sum = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double e = std::exp(static_cast<double>(arg[j]));
    ref_sum += e;
    ASSERT_LE(std::fabs(x[j] - e), 4e-7 * e) << "exp(" << arg[j] << ")";
  }
  EXPECT_NEAR(sum, ref_sum, 1e-5 * ref_sum);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> odd{-1e9f, -inf, 3.f, std::nanf("")};
  ops::cpu::exp_shift_sum(odd.data(), 4, 3.f);
  EXPECT_EQ(odd[0], 0.f);
  EXPECT_EQ(odd[1], 0.f);
  EXPECT_EQ(odd[2], 1.f);
  EXPECT_TRUE(std::isnan(odd[3]));
  for (int64_t n : {0, 1, 15, 16, 17, 40}) {
    std::vector<float> r(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) r[j] = static_cast<float>((j * 7) % 11) - 5.f;
    if (n > 3) r[n - 2] = 9.f;  // the max in the scalar tail or the last vector block
    float want = -inf;
    for (float v : r) want = std::max(want, v);
    EXPECT_EQ(ops::cpu::row_max(r.data(), n), want) << "n = " << n;
  }
}

// exp_shift_sum runs 8-lane blocks (AVX2 where the CPU has it) and a scalar tail: an element gets
// the same bits in either, so a row's values do not depend on where its tile starts. Each element
// of rows of every length up to 40 (special values included) equals its own 1-element call (the
// scalar tail), bit for bit.
TEST(Softmax, ExpShiftSumLanesEqualTheScalarTail) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> pool{-1e9f, -inf, 0.f, -87.3f, -87.4f, -86.9f, 50.f, 100.f, std::nanf(""), -1e-8f};
  for (int j = 0; j < 64; ++j) pool.push_back(-0.731f * static_cast<float>(j) + 0.01f * static_cast<float>(j % 5));
  for (int64_t n = 1; n <= 40; ++n) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) row[j] = pool[static_cast<size_t>((j * 13 + n) % static_cast<int64_t>(pool.size()))];
    const std::vector<float> arg = row;
    ops::cpu::exp_shift_sum(row.data(), n, 1.5f);
    for (int64_t j = 0; j < n; ++j) {
      float one = arg[j];
      ops::cpu::exp_shift_sum(&one, 1, 1.5f);
      if (std::isnan(one)) {
        EXPECT_TRUE(std::isnan(row[j])) << "n = " << n << ", j = " << j;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(row[j]), std::bit_cast<uint32_t>(one))
            << "n = " << n << ", j = " << j << ", exp(" << arg[j] << " - 1.5)";
      }
    }
  }
}

// Every vector path of exp_shift_sum (AVX-512, AVX2, where this CPU has them) against the baseline
// scalar exponential with a separate 16-lane summing pass: the same bits, element by element and
// for the fused sum, over row lengths around the 8- and 16-lane blocks and with the special
// arguments (−inf, −1e9, NaN, beyond the clamps).
TEST(Softmax, ExpShiftSumVectorPathsEqualTheScalarPassBitForBit) {
  const float inf = std::numeric_limits<float>::infinity();
  Generator gen(11);
  const std::vector<float> noise = randn({400}, gen).to_vector();
  int checked = 0;
  for (ops::cpu::ExpIsa isa : {ops::cpu::ExpIsa::avx2, ops::cpu::ExpIsa::avx512}) {
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 47, 48, 63, 64, 65, 100, 257, 400}) {
      for (bool specials : {false, true}) {
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) row[j] = 4.f * noise[static_cast<size_t>(j)] - 3.f;
        if (specials && n > 5) row[1] = -inf, row[2] = -1e9f, row[n - 1] = std::nanf(""), row[3] = 95.f, row[4] = -90.f;
        std::vector<float> want = row, got = row;
        const float want_sum = ops::cpu::exp_shift_sum_unfused(want.data(), n, 0.25f);
        float got_sum = 0.f;
        if (!ops::cpu::exp_shift_sum_isa(isa, got.data(), n, 0.25f, &got_sum)) continue;
        ++checked;
        for (int64_t j = 0; j < n; ++j)
          EXPECT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want[j]))
              << "isa " << static_cast<int>(isa) << ", n = " << n << ", j = " << j;
        EXPECT_EQ(std::bit_cast<uint32_t>(got_sum), std::bit_cast<uint32_t>(want_sum))
            << "isa " << static_cast<int>(isa) << ", n = " << n << ", specials " << specials;
      }
    }
  }
  // A long row over the whole softmax range [−87, 0]: where a fused multiply-add would round
  // differently (an FMA in the AVX-512 polynomial changed 16 of these 20,000 elements).
  const int64_t n = 20000;
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) row[j] = -87.f * static_cast<float>(j) / static_cast<float>(n - 1);
  std::vector<float> want = row;
  const float want_sum = ops::cpu::exp_shift_sum_unfused(want.data(), n, 0.f);
  for (ops::cpu::ExpIsa isa : {ops::cpu::ExpIsa::avx2, ops::cpu::ExpIsa::avx512}) {
    std::vector<float> got = row;
    float got_sum = 0.f;
    if (!ops::cpu::exp_shift_sum_isa(isa, got.data(), n, 0.f, &got_sum)) continue;
    int64_t differ = 0;
    for (int64_t j = 0; j < n; ++j) differ += std::bit_cast<uint32_t>(got[j]) != std::bit_cast<uint32_t>(want[j]);
    EXPECT_EQ(differ, 0) << "isa " << static_cast<int>(isa);
    EXPECT_EQ(std::bit_cast<uint32_t>(got_sum), std::bit_cast<uint32_t>(want_sum)) << "isa " << static_cast<int>(isa);
  }
  if (checked == 0) GTEST_SKIP() << "neither AVX2 nor AVX-512 on this CPU";
}

}  // namespace
}  // namespace foldcore
