// autograd::linears (several projections of one input in one op) against separate linear() calls
// and finite differences, and the engine's packed output gradients (Node::packed_output_grads)
// under every way a consumer hands a gradient over: an overwrite target (new_grad), its own tensor
// (put_grad), an accumulation (a second use), and none at all (an unused output).
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/param_cast_cache.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "grad_check.h"
#include "test_util.h"

namespace foldcore::autograd {
namespace {

using testing::expect_grads_match_fd;

// Widths 4, 4, 3, 4: runs {0, 1} (one strided-batch GEMM), {2}, {3}; biases on 0, 2 and 3.
constexpr int64_t kIn = 6;
const int64_t kOuts[] = {4, 4, 3, 4};
const bool kHasBias[] = {true, false, true, true};

struct Params {
  std::vector<Variable> w, b;
};

Params make_params(Generator& gen, bool requires_grad = true) {
  Params p;
  for (int i = 0; i < 4; ++i) {
    p.w.emplace_back(randn({kIn, kOuts[i]}, gen), requires_grad);
    p.b.push_back(kHasBias[i] ? Variable(randn({kOuts[i]}, gen), requires_grad) : Variable());
  }
  return p;
}

// Every output reaches the loss differently: y0 through a reshape (put_grad), y1 through a scale
// (new_grad), y2 not at all (its slice of the packed gradients stays zero), y3 twice (new_grad, then
// an accumulation).
Variable consume(const std::vector<Variable>& y) {
  const Variable a = reshape(y[0], {y[0].numel()});
  const Variable b = reshape(scale(y[1], 0.5f), {y[1].numel()});
  const Variable c = reshape(mul(y[3], y[3]), {y[3].numel()});
  return concat({a, b, c, reshape(y[3], {y[3].numel()})}, 0);
}

std::vector<Variable> separate(const Variable& x, const Params& p) {
  std::vector<Variable> y;
  for (int i = 0; i < 4; ++i) y.push_back(linear(x, p.w[i], p.b[i]));
  return y;
}

TEST(Linears, ValuesAndGradientsAreThoseOfSeparateLinears) {
  Generator gen(5);
  const Tensor xv = randn({2, 5, kIn}, gen);
  const Params p = make_params(gen);
  const Params q{p.w, p.b};  // the same leaves: gradients compared after each backward
  const Variable x(xv, true);
  const LinearsStats s0 = linears_stats();
  const std::vector<Variable> fused = linears(x, p.w, p.b);
  EXPECT_EQ(linears_stats().batched_runs - s0.batched_runs, 1);  // widths 4, 4 | 3 | 4
  const std::vector<Variable> ref = separate(x, p);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_EQ(fused[i].shape(), Shape({2, 5, kOuts[i]}));
    // fp32, the same K = 6 dot products; a batched BLAS call may sum them in another order.
    FC_EXPECT_CLOSE(fused[i].value(), ref[i].value(), 1e-6, 1e-6);
  }
  Generator wg(6);
  const Variable lf = consume(fused);
  const Tensor w = randn(lf.shape(), wg);
  backward({lf}, {w});
  std::vector<Tensor> g_fused{x.grad().clone()};
  for (int i = 0; i < 4; ++i) {
    g_fused.push_back(p.w[i].grad().clone());
    p.w[i].set_grad(Tensor());
    if (kHasBias[i]) {
      g_fused.push_back(p.b[i].grad().clone());
      p.b[i].set_grad(Tensor());
    }
  }
  x.set_grad(Tensor());
  backward({consume(separate(x, q))}, {w});
  // The separate path never reaches y2's linear: its parameters get no gradient there (zeros here).
  auto or_zeros = [](const Variable& v) { return v.grad().defined() ? v.grad() : Tensor::zeros(v.shape(), DType::f32); };
  std::vector<Tensor> g_ref{x.grad()};
  for (int i = 0; i < 4; ++i) {
    g_ref.push_back(or_zeros(p.w[i]));
    if (kHasBias[i]) g_ref.push_back(or_zeros(p.b[i]));
  }
  ASSERT_EQ(g_fused.size(), g_ref.size());
  for (size_t i = 0; i < g_ref.size(); ++i) {
    SCOPED_TRACE("gradient " + std::to_string(i));
    FC_EXPECT_CLOSE(g_fused[i], g_ref[i], 1e-5, 1e-5);
  }
  // y2 reached nothing: its weight's gradient is exactly zero, its bias's too.
  FC_EXPECT_CLOSE(g_fused[4], Tensor::zeros({kIn, kOuts[2]}, DType::f32), 0, 0);  // [x, w0, b0, w1, w2, …]
}

TEST(Linears, FiniteDifferencesWithShapes) {
  Generator gen(7);
  std::vector<Tensor> in{randn({3, 4, kIn}, gen)};
  for (int i = 0; i < 4; ++i) {
    in.push_back(randn({kIn, kOuts[i]}, gen));
    if (kHasBias[i]) in.push_back(randn({kOuts[i]}, gen));
  }
  expect_grads_match_fd(
      [](const std::vector<Variable>& v) {
        std::vector<Variable> w, b;
        size_t k = 1;
        for (int i = 0; i < 4; ++i) {
          w.push_back(v[k++]);
          b.push_back(kHasBias[i] ? v[k++] : Variable());
        }
        // Output 0 shaped per head ([3, 4, 2, 2]), the others as they come.
        const std::vector<Variable> y =
            linears(v[0], w, b, {{3, 4, 2, 2}, {3, 4, kOuts[1]}, {3, 4, kOuts[2]}, {3, 4, kOuts[3]}});
        EXPECT_EQ(y[0].shape(), Shape({3, 4, 2, 2}));
        return consume({reshape(y[0], {3, 4, 4}), y[1], y[2], y[3]});
      },
      in);
}

// Weight gradients that lie back to back in one buffer (as the ParamStore's flat buffer lays out
// q, k, v and the gate) take one batched GEMM for a run when the engine packed the outputs'
// gradients; the result is the per-weight products'. Outputs that are roots of the backward get
// their gradients from the caller, unpacked: the per-weight products, the same values.
TEST(Linears, BackToBackWeightGradientsTakeOneProduct) {
  Generator gen(8);
  for (const bool roots : {false, true}) {
    SCOPED_TRACE(roots ? "outputs are roots" : "outputs consumed");
    const Variable x(randn({7, kIn}, gen), true);
    std::vector<Variable> w;
    for (int i = 0; i < 3; ++i) w.emplace_back(randn({kIn, 5}, gen), true);
    Tensor flat = Tensor::zeros({3 * kIn * 5 + 1}, DType::f32);
    for (int i = 0; i < 3; ++i) w[i].set_grad(flat.narrow(0, i * kIn * 5, kIn * 5).view({kIn, 5}));
    flat.narrow(0, 3 * kIn * 5, 1).fill_(42.0);  // past the run: must stay untouched
    const std::vector<Variable> y = linears(x, w);
    Generator wg(9);
    std::vector<Tensor> dy;
    for (int i = 0; i < 3; ++i) dy.push_back(randn({7, 5}, wg));
    const LinearsStats before = linears_stats();
    if (roots) {
      backward(y, dy);
    } else {
      std::vector<Variable> scaled;
      std::vector<Tensor> dy2;
      for (int i = 0; i < 3; ++i) {
        scaled.push_back(scale(y[i], 2.f));
        dy2.push_back(dy[i].clone());
        ops::scale(dy[i], 0.5f, dy2.back());  // d(2y)·½: the same dy reaches y
      }
      backward(scaled, dy2);
    }
    EXPECT_EQ(linears_stats().batched_weight_grads - before.batched_weight_grads, roots ? 0 : 1);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE("weight " + std::to_string(i));
      FC_EXPECT_CLOSE(w[i].grad(), ops::matmul(x.value(), dy[i], true, false), 1e-5, 1e-5);
    }
    EXPECT_EQ(flat.narrow(0, 3 * kIn * 5, 1).to_vector()[0], 42.f);
    std::vector<float> dx_expected(7 * kIn, 0.f);
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> part = ops::matmul(dy[i], w[i].value(), false, true).to_vector();
      for (size_t e = 0; e < part.size(); ++e) dx_expected[e] += part[e];
    }
    FC_EXPECT_CLOSE(x.grad(), Tensor::from_vector(dx_expected, {7, kIn}), 1e-5, 1e-5);
  }
}

// Bias gradients that lie back to back (ParamStore::place_together, as the triangle
// multiplication's and the outer product mean's) take one batched column sum for a run over packed
// output gradients, with the bits of one sum per bias; a gap between them (or unpacked root
// gradients) takes one sum per bias, the same values.
TEST(Linears, BackToBackBiasGradientsTakeOneColumnSum) {
  Generator gen(10);
  for (const bool gap : {false, true}) {
    SCOPED_TRACE(gap ? "a gap between the biases" : "biases back to back");
    const Variable x(randn({7, kIn}, gen), true);
    std::vector<Variable> w, b;
    for (int i = 0; i < 3; ++i) {
      w.emplace_back(randn({kIn, 5}, gen), true);
      b.emplace_back(randn({5}, gen), true);
    }
    const int64_t stride = gap ? 6 : 5;
    Tensor flat = Tensor::full({3 * stride + 1}, 0.25, DType::f32);
    for (int i = 0; i < 3; ++i) b[i].set_grad(flat.narrow(0, i * stride, 5));
    flat.narrow(0, 3 * stride, 1).fill_(42.0);  // past the run: must stay untouched
    const std::vector<Variable> y = linears(x, w, b);
    Generator wg(11);
    std::vector<Variable> scaled;
    std::vector<Tensor> dy;
    for (int i = 0; i < 3; ++i) {
      scaled.push_back(scale(y[i], 1.f));
      dy.push_back(randn({7, 5}, wg));
    }
    const LinearsStats before = linears_stats();
    backward(scaled, dy);
    EXPECT_EQ(linears_stats().batched_bias_grads - before.batched_bias_grads, gap ? 0 : 1);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE("bias " + std::to_string(i));
      Tensor want = Tensor::full({5}, 0.25, DType::f32);
      ops::sum_rows_accumulate(dy[i], want);
      EXPECT_EQ(b[i].grad().to_vector(), want.to_vector());
    }
    EXPECT_EQ(flat.narrow(0, 3 * stride, 1).to_vector()[0], 42.f);
  }
}

// Under bf16 autocast: outputs bf16, the separate linears' values (both round one fp32 dot product
// to bf16: equal up to a bf16 ulp where the batched product sums in another order), gradients close
// (the fused dx sums the products in fp32, the separate path rounds each to bf16 first: ≲ 3 bf16
// ulps of the largest term, hence 2e-2), and inside a ParamCastScope the stacked weights and biases
// are made once.
TEST(Linears, Bf16AutocastAndStackedCastsOncePerScope) {
  Generator gen(10);
  const Params p = make_params(gen);
  const Variable x(randn({4, 6, kIn}, gen), true);
  const AutocastGuard bf16(DType::bf16);
  const ParamCastScope scope;
  const std::vector<Variable> y1 = linears(x, p.w, p.b);
  const ParamCastStats after_first = param_cast_stats();
  const std::vector<Variable> y2 = linears(x, p.w, p.b);
  EXPECT_EQ(param_cast_stats().made, after_first.made);
  EXPECT_GT(param_cast_stats().reused, after_first.reused);
  const std::vector<Variable> ref = separate(x, p);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_EQ(y1[i].dtype(), DType::bf16);
    FC_EXPECT_CLOSE(y1[i].value().to(DType::f32), ref[i].value().to(DType::f32), 1e-2, 1e-2);
    FC_EXPECT_CLOSE(y2[i].value().to(DType::f32), y1[i].value().to(DType::f32), 0, 0);
  }
  Generator wg(11);
  const Variable l = consume(y1);
  const Tensor w = randn(l.shape(), wg).to(l.dtype());
  backward({l}, {w});
  const Tensor dx = x.grad().clone(), dw0 = p.w[0].grad().clone(), db3 = p.b[3].grad().clone();
  x.set_grad(Tensor());
  p.w[0].set_grad(Tensor());
  p.b[3].set_grad(Tensor());
  backward({consume(ref)}, {w});
  EXPECT_EQ(dx.dtype(), DType::f32);
  FC_EXPECT_CLOSE(dx, x.grad(), 2e-2, 2e-2);
  FC_EXPECT_CLOSE(dw0, p.w[0].grad(), 2e-2, 2e-2);
  FC_EXPECT_CLOSE(db3, p.b[3].grad(), 2e-2, 2e-2);
}

TEST(Linears, BadArgumentsAreClearErrors) {
  Generator gen(12);
  const Variable x(randn({3, kIn}, gen));
  const Variable w(randn({kIn, 4}, gen)), w_bad(randn({kIn + 1, 4}, gen)), b_bad(randn({5}, gen));
  EXPECT_THROW(linears(x, {}), Error);
  EXPECT_THROW(linears(x, {w, w_bad}), Error);
  EXPECT_THROW(linears(x, {w}, {b_bad}), Error);
  EXPECT_THROW(linears(x, {w}, {}, {{3, 5}}), Error);
  // Without gradients: plain outputs, the same values.
  const NoGradGuard no_grad;
  const std::vector<Variable> y = linears(x, {w, w});
  EXPECT_FALSE(y[0].requires_grad());
  FC_EXPECT_CLOSE(y[1].value(), ops::matmul(x.value(), w.value()), 1e-6, 1e-6);
}

}  // namespace
}  // namespace foldcore::autograd
