// CPU reference of kernels/reduce.h against naive loops and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "test_util.h"

namespace foldcore {
namespace {

// Naive Σ over `axes` (normalised, any order) of a contiguous row-major host copy of x.
std::vector<double> naive_sum(const Tensor& x, const std::vector<int>& axes) {
  const auto xv = x.contiguous().to_vector();
  std::vector<bool> red(x.dim(), false);
  for (int a : axes) red[a < 0 ? a + x.dim() : a] = true;
  int64_t k = 1;
  for (int a = 0; a < x.dim(); ++a)
    if (!red[a]) k *= x.size(a);
  std::vector<double> out(k, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0, mult = 1;
    for (int a = x.dim() - 1; a >= 0; --a) {
      const int64_t c = rem % x.size(a);
      rem /= x.size(a);
      if (!red[a]) {
        o += c * mult;
        mult *= x.size(a);
      }
    }
    out[o] += xv[i];
  }
  return out;
}

Shape kept_shape(const Tensor& x, const std::vector<int>& axes) {
  std::vector<bool> red(x.dim(), false);
  for (int a : axes) red[a < 0 ? a + x.dim() : a] = true;
  Shape s;
  for (int a = 0; a < x.dim(); ++a)
    if (!red[a]) s.push_back(x.size(a));
  return s;
}

void expect_near_vec(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  const auto g = got.to_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " @" << i;
}

TEST(Reduce, SumOverAxisSetsMatchesNaive) {
  Generator gen(31);
  Tensor x = randn({3, 5, 7, 2}, gen);
  const std::vector<std::vector<int>> cases = {{}, {0}, {1}, {3}, {-1}, {0, 1}, {1, 2}, {0, 2}, {0, 3}, {0, 1, 2}, {1, 2, 3}, {0, 1, 2, 3}};
  for (const auto& axes : cases) {
    Tensor out = Tensor::empty(kept_shape(x, axes), DType::f32);
    ops::sum(x, axes, out);
    // f32 output of a double sum: relative 1e-6.
    expect_near_vec(out, naive_sum(x, axes), 1e-6, "axes " + std::to_string(axes.size()));
  }
}

TEST(Reduce, StridedInputKeepdimAccumulateAndDtypes) {
  Generator gen(32);
  Tensor base = randn({6, 4, 9}, gen);
  Tensor x = base.permute({2, 0, 1}).narrow(0, 1, 7);  // [7,6,4], non-contiguous with an offset
  ops::sum(x, {1}, Tensor::empty({7, 4}, DType::f32));  // runs
  Tensor out = Tensor::empty({7, 1, 4}, DType::f32);      // keepdim-style output
  ops::sum(x, {1}, out);
  expect_near_vec(out, naive_sum(x, {1}), 1e-6, "strided keepdim");
  auto want = naive_sum(x, {1});
  ops::sum(x, {-2}, out, /*accumulate=*/true);
  for (double& v : want) v *= 2;
  expect_near_vec(out, want, 1e-6, "accumulate");
  // bf16 input, bf16 output: one rounding of the exact sum (relative 2^-8).
  Tensor xb = x.to(DType::bf16);
  Tensor ob = Tensor::empty({7, 4}, DType::bf16);
  ops::sum(xb, {1}, ob);
  expect_near_vec(ob, naive_sum(xb, {1}), 4e-3, "bf16");
  // All axes: {} and [1] outputs.
  Tensor s0 = Tensor::empty({}, DType::f32), s1 = Tensor::empty({1}, DType::f32);
  ops::sum(x, {0, 1, 2}, s0);
  ops::sum(x, {2, 0, 1}, s1);
  const double total = naive_sum(x, {0, 1, 2})[0];
  EXPECT_NEAR(s0.item(), total, 1e-5 * (1 + std::fabs(total)));
  EXPECT_NEAR(s1.item(), total, 1e-5 * (1 + std::fabs(total)));
  EXPECT_THROW(ops::sum(x, {1, -2}, out), Error);                                  // repeated axis
  EXPECT_THROW(ops::sum(x, {3}, out), Error);                                      // out of range
  EXPECT_THROW(ops::sum(x, {1}, Tensor::empty({7, 5}, DType::f32)), Error);        // wrong out shape
  EXPECT_THROW(ops::sum(x, {1}, Tensor::empty({7, 4}, DType::i32)), Error);        // non-float out
}

TEST(Reduce, MeanAndSumRowsAccumulate) {
  Generator gen(33);
  Tensor x = randn({4, 3, 11}, gen);
  Tensor m = Tensor::empty({3}, DType::f32);
  ops::mean(x, {0, 2}, m);
  auto want = naive_sum(x, {0, 2});
  for (double& v : want) v /= 44;
  expect_near_vec(m, want, 1e-6, "mean");
  Tensor b = Tensor::full({11}, 0.5, DType::f32);
  ops::sum_rows_accumulate(x, b);
  want = naive_sum(x, {0, 1});
  for (double& v : want) v += 0.5;
  expect_near_vec(b, want, 1e-6, "sum_rows");
  ops::sum_rows_accumulate(x.to(DType::bf16), b);  // bf16 input into the f32 accumulator
  const auto xb = naive_sum(x.to(DType::bf16), {0, 1});
  for (size_t i = 0; i < want.size(); ++i) want[i] += xb[i];
  expect_near_vec(b, want, 1e-6, "sum_rows bf16");
  EXPECT_THROW(ops::sum_rows_accumulate(x, Tensor::zeros({11}, DType::bf16)), Error);
  EXPECT_THROW(ops::sum_rows_accumulate(x, Tensor::zeros({3}, DType::f32)), Error);
}

// B column-sum problems at once: each batch the bits of its own sum_rows_accumulate call; C = 1
// (whose plan merges away) too; bad shapes and dtypes are errors naming the op.
TEST(Reduce, SumRowsAccumulateBatchedEqualsOneCallPerBatch) {
  Generator gen(35);
  for (const int64_t c : {int64_t{11}, int64_t{1}}) {
    SCOPED_TRACE("C " + std::to_string(c));
    const Tensor x = randn({3, 7, c}, gen).to(DType::bf16);
    Tensor batched = randn({3, c}, gen), separate = batched.clone();
    ops::sum_rows_accumulate_batched(x, batched);
    for (int64_t b = 0; b < 3; ++b) ops::sum_rows_accumulate(x.select(0, b), separate.select(0, b));
    EXPECT_EQ(batched.to_vector(), separate.to_vector());
  }
  const Tensor x = randn({3, 7, 11}, gen);
  EXPECT_THROW(ops::sum_rows_accumulate_batched(x, Tensor::zeros({3, 11}, DType::bf16)), Error);
  EXPECT_THROW(ops::sum_rows_accumulate_batched(x, Tensor::zeros({2, 11}, DType::f32)), Error);
  EXPECT_THROW(ops::sum_rows_accumulate_batched(x.select(0, 0), Tensor::zeros({7, 11}, DType::f32)), Error);
  EXPECT_THROW(ops::sum_rows_accumulate_batched(x.permute({1, 0, 2}), Tensor::zeros({7, 11}, DType::f32)), Error);
}

// The activation backward with its bias gradient equals relu_backward / gelu_backward followed by
// sum_rows_accumulate, bit for bit (the CPU runs the two); relu's saved output is its sign (0 where
// the pre-activation was ≤ 0), gelu's derivative against finite differences of gelu_forward
// (central, h = 1e-3 in double-rounded fp32: 2e-3 absolute). Bad arguments are errors naming the op.
TEST(Reduce, ActivationBackwardWithBiasGradient) {
  Generator gen(36);
  for (const ops::Activation act : {ops::Activation::relu, ops::Activation::gelu}) {
    for (DType t : {DType::f32, DType::bf16}) {
      Tensor in = randn({3, 5, 16}, gen);
      if (act == ops::Activation::relu) {
        Tensor y = Tensor::empty(in.shape(), DType::f32);
        ops::relu_forward(in, y);
        in = y;
      }
      in = in.to(t);
      const Tensor dy = randn({3, 5, 16}, gen).to(t);
      Tensor dx = Tensor::empty(in.shape(), t), dx_two = Tensor::empty(in.shape(), t);
      Tensor db = randn({16}, gen), db_two = db.clone();
      ops::activation_backward_sum_rows(act, in, dy, dx, db);
      if (act == ops::Activation::relu) {
        ops::relu_backward(in, dy, dx_two);
      } else {
        ops::gelu_backward(in, dy, dx_two);
      }
      ops::sum_rows_accumulate(dx_two, db_two);
      EXPECT_EQ(dx.to_vector(), dx_two.to_vector());
      EXPECT_EQ(db.to_vector(), db_two.to_vector());
      if (act == ops::Activation::gelu && t == DType::f32) {
        const std::vector<float> xv = in.to_vector(), dyv = dy.to_vector(), dxv = dx.to_vector();
        for (size_t i = 0; i < xv.size(); ++i) {
          Tensor p = Tensor::from_vector({xv[i] + 1e-3f, xv[i] - 1e-3f}, {2}), q = Tensor::empty({2}, DType::f32);
          ops::gelu_forward(p, q);
          const std::vector<float> g = q.to_vector();
          EXPECT_NEAR(dxv[i], dyv[i] * (g[0] - g[1]) / 2e-3, 2e-3) << i;
        }
      }
    }
  }
  const Tensor x = randn({4, 8}, gen), db = Tensor::zeros({8}, DType::f32);
  const Tensor dx = Tensor::empty({4, 8}, DType::f32);
  EXPECT_THROW(ops::activation_backward_sum_rows(ops::Activation::none, x, x, dx, db), Error);
  EXPECT_THROW(ops::activation_backward_sum_rows(ops::Activation::relu, x.to(DType::bf16), x, dx, db), Error);
  EXPECT_THROW(ops::activation_backward_sum_rows(ops::Activation::relu, x, x.transpose(0, 1).contiguous().transpose(0, 1), dx, db), Error);
  EXPECT_THROW(ops::activation_backward_sum_rows(ops::Activation::relu, x, x, dx, Tensor::zeros({8}, DType::bf16)), Error);
  EXPECT_THROW(ops::activation_backward_sum_rows(ops::Activation::relu, x, x, dx, Tensor::zeros({4}, DType::f32)), Error);
  EXPECT_THROW(ops::activation_backward_sum_rows(ops::Activation::gelu, x, x.view({8, 4}), dx, db), Error);
}

TEST(Reduce, SumSquaresAndMaxAbs) {
  Generator gen(34);
  Tensor x = randn({13, 17}, gen, 0, 3);
  const auto xv = x.to_vector();
  double ss = 0, ma = 0;
  for (float v : xv) {
    ss += double(v) * v;
    ma = std::max(ma, double(std::fabs(v)));
  }
  EXPECT_NEAR(ops::sum_squares(x), ss, 1e-9 * ss);
  EXPECT_EQ(ops::max_abs(x), ma);
  EXPECT_NEAR(ops::sum_squares(x.transpose(0, 1)), ss, 1e-9 * ss);
  EXPECT_EQ(ops::max_abs(x.to(DType::bf16)), ops::max_abs(x.to(DType::bf16).to(DType::f32)));
  std::vector<float> nan = xv;
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ops::max_abs(Tensor::from_vector(nan, {13, 17}))));
  EXPECT_TRUE(std::isnan(ops::sum_squares(Tensor::from_vector(nan, {13, 17}))));
  EXPECT_EQ(ops::max_abs(Tensor::empty({0, 3}, DType::f32)), 0.0);
}

TEST(Reduce, SumAndMeanMatchFiniteDifferences) {
  // sum/mean are linear: d(Σ_o w_o·out_o)/dx = w broadcast over the reduced axes (÷R for mean).
  // The central difference is exact up to f32 rounding of the loss (~1e-6·|loss|/eps ≈ 1e-2 at
  // worst for |loss| ~ 10, eps 1e-3), hence atol 1e-2, rtol 1e-2.
  Generator gen(35);
  Tensor x = randn({5, 4, 3}, gen);
  Tensor w = randn({5, 3}, gen), out = Tensor::empty({5, 3}, DType::f32);
  auto loss_sum = [&] {
    ops::sum(x, {1}, out);
    return testing::weighted_sum(out, w);
  };
  Tensor g = w.unsqueeze(1).expand({5, 4, 3}).contiguous();
  testing::check_gradient(loss_sum, x, g, 1e-3, 1e-2, 1e-2);
  auto loss_mean = [&] {
    ops::mean(x, {1}, out);
    return testing::weighted_sum(out, w);
  };
  std::vector<float> gm = g.to_vector();
  for (float& v : gm) v /= 4;
  testing::check_gradient(loss_mean, x, Tensor::from_vector(gm, {5, 4, 3}), 1e-3, 1e-2, 1e-2);
}

}  // namespace
}  // namespace foldcore
