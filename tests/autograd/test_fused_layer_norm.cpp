// autograd::bias_dropout_residual_layer_norm: equal (value and every gradient) to the unfused
// layer_norm(bias_dropout_residual(...)) with the same generator state, finite differences with a
// fixed mask, and the no-grad path.
#include <gtest/gtest.h>

#include "autograd/autograd.h"
#include "grad_check.h"

namespace foldcore::autograd {
namespace {

constexpr float kEps = 1e-5f;

TEST(FusedLayerNormFn, EqualsUnfusedComposition) {
  Generator data(41);
  const Tensor x = randn({2, 5, 24}, data), b = randn({24}, data), r = randn({2, 5, 24}, data, 0.5f, 2.f);
  const Tensor g = randn({24}, data, 1.f, 0.3f), be = randn({24}, data), w = randn({2, 5, 24}, data);
  struct Out {
    Tensor y, dx, db, dr, dg, dbe;
  };
  auto run = [&](bool fused) {
    Variable vx(x.clone(), true), vb(b.clone(), true), vr(r.clone(), true), vg(g.clone(), true), vbe(be.clone(), true);
    Generator gen(5);
    const DropoutSpec d{0.3f, &gen, {}};
    const Variable y = fused ? bias_dropout_residual_layer_norm(vx, vb, vr, d, vg, vbe, kEps)
                             : layer_norm(bias_dropout_residual(vx, vb, vr, d), vg, vbe, kEps);
    backward({y}, {w});
    return Out{y.value(), vx.grad(), vb.grad(), vr.grad(), vg.grad(), vbe.grad()};
  };
  const Out f = run(true), u = run(false);
  // Same mask and per-element arithmetic; only column-sum order may differ (≤ ~10 terms here).
  FC_EXPECT_CLOSE(f.y, u.y, 1e-6, 1e-6);
  FC_EXPECT_CLOSE(f.dx, u.dx, 1e-6, 1e-6);
  FC_EXPECT_CLOSE(f.dr, u.dr, 1e-6, 1e-6);
  FC_EXPECT_CLOSE(f.db, u.db, 1e-5, 1e-5);
  FC_EXPECT_CLOSE(f.dg, u.dg, 1e-5, 1e-5);
  FC_EXPECT_CLOSE(f.dbe, u.dbe, 1e-5, 1e-5);
}

TEST(FusedLayerNormFn, GradientsMatchFiniteDifferences) {
  Generator data(42);
  const std::vector<Tensor> in = {randn({3, 6}, data), randn({6}, data), randn({3, 6}, data, 0.3f, 1.5f),
                                  randn({6}, data, 1.f, 0.3f), randn({6}, data)};
  for (float p : {0.f, 0.4f}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    // A fresh generator per call: every evaluation draws the same mask.
    testing::expect_grads_match_fd(
        [p](const std::vector<Variable>& v) {
          Generator gen(9);
          return bias_dropout_residual_layer_norm(v[0], v[1], v[2], DropoutSpec{p, &gen, {}}, v[3], v[4], kEps);
        },
        in);
  }
}

TEST(FusedLayerNormFn, NoGradAndInPlaceResidual) {
  Generator data(43);
  const Tensor x = randn({4, 8}, data), r = randn({4, 8}, data), g = randn({8}, data), b = randn({8}, data);
  const Variable ref = layer_norm(bias_dropout_residual(Variable(x), {}, Variable(r), {}), Variable(g), Variable(b));
  {
    NoGradGuard ng;
    const Tensor r2 = r.clone();
    const Variable y = bias_dropout_residual_layer_norm(Variable(x), {}, Variable(r2), {}, Variable(g), Variable(b),
                                                        1e-5f, /*in_place=*/true);
    FC_EXPECT_CLOSE(y.value(), ref.value(), 0, 0);
    FC_EXPECT_CLOSE(r2, r, 0, 0);  // no backward: h is not stored, the residual is untouched
  }
  // With grad, in_place on a residual nothing else references puts h into its storage.
  Variable vx(x.clone(), true);
  Variable res = scale(Variable(r.clone(), true), 1.f);  // a non-leaf, solely owned activation
  const void* storage = res.value().data_ptr();
  const Variable y = bias_dropout_residual_layer_norm(vx, {}, res, {}, Variable(g), Variable(b), 1e-5f, true);
  FC_EXPECT_CLOSE(y.value(), ref.value(), 1e-6, 1e-6);
  EXPECT_EQ(res.value().data_ptr(), storage);
}

TEST(FusedLayerNormFn, BadShapesThrow) {
  const Variable x(Tensor::zeros({2, 4}, DType::f32)), g(Tensor::full({4}, 1.0, DType::f32)), b(Tensor::zeros({4}, DType::f32));
  EXPECT_THROW(bias_dropout_residual_layer_norm(x, {}, Variable(Tensor::zeros({2, 3}, DType::f32)), {}, g, b, 1e-5f),
               Error);
  EXPECT_THROW(bias_dropout_residual_layer_norm(x, Variable(Tensor::zeros({3}, DType::f32)), x, {}, g, b, 1e-5f),
               Error);
  EXPECT_THROW(bias_dropout_residual_layer_norm(x, {}, x, {}, Variable(Tensor::full({5}, 1.0, DType::f32)), b, 1e-5f),
               Error);
  EXPECT_THROW(bias_dropout_residual_layer_norm(x, {}, {}, {}, g, b, 1e-5f), Error);
}

}  // namespace
}  // namespace foldcore::autograd
