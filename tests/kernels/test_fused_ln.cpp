// Fused bias + dropout + residual + LayerNorm (kernels/layernorm.h) on the CPU: equal to the
// unfused composition bias_dropout_residual → layernorm with the same dropout args, backward vs
// finite differences with p = 0 and with a fixed mask, and argument errors.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test_util.h"

namespace foldcore {
namespace {

constexpr float kEps = 1e-5f;

struct Inputs {
  Tensor x, bias, residual, gamma, beta, dy;
};

Inputs make_inputs(const Shape& shape, DType dt, Generator& gen) {
  const int64_t c = shape.back();
  Inputs in;
  in.x = randn(shape, gen, 0.2f, 1.f, dt);
  in.bias = randn({c}, gen, 0.f, 0.5f, dt);
  in.residual = randn(shape, gen, 0.5f, 2.f, dt);  // offset mean, non-unit scale: statistics matter
  in.gamma = randn({c}, gen, 1.f, 0.3f);
  in.beta = randn({c}, gen);
  in.dy = randn(shape, gen, 0.f, 1.f, dt);
  return in;
}

struct Result {
  Tensor h, y, mean, rstd, dx, dbias, dresidual, dgamma, dbeta;
};

Result alloc(const Inputs& in) {
  const Shape& s = in.x.shape();
  const int64_t c = s.back(), rows = s.product() / c;
  const DType dt = in.x.dtype();
  Result r;
  r.h = Tensor::zeros(s, dt), r.y = Tensor::zeros(s, dt), r.dx = Tensor::zeros(s, dt);
  r.dresidual = Tensor::zeros(s, dt);
  r.mean = Tensor::zeros({rows}, DType::f32), r.rstd = Tensor::zeros({rows}, DType::f32);
  // Accumulation targets start non-zero: the ops add (+=).
  r.dbias = Tensor::full({c}, 0.25, DType::f32);
  r.dgamma = Tensor::full({c}, 1.0, DType::f32), r.dbeta = Tensor::full({c}, -1.0, DType::f32);
  return r;
}

Result fused(const Inputs& in, const ops::DropoutArgs& d) {
  Result r = alloc(in);
  ops::bias_dropout_residual_layernorm_forward(in.x, in.bias, in.residual, d, in.gamma, in.beta, kEps, r.h, r.y,
                                               r.mean, r.rstd);
  ops::bias_dropout_residual_layernorm_backward(in.dy, r.h, in.gamma, r.mean, r.rstd, d, r.dx, r.dbias,
                                                r.dresidual, r.dgamma, r.dbeta);
  return r;
}

Result unfused(const Inputs& in, const ops::DropoutArgs& d) {
  Result r = alloc(in);
  ops::bias_dropout_residual_forward(in.x, in.bias, in.residual, d, r.h);
  ops::layernorm_forward(r.h, in.gamma, in.beta, kEps, r.y, r.mean, r.rstd);
  ops::layernorm_backward(in.dy, r.h, in.gamma, r.mean, r.rstd, r.dresidual, r.dgamma, r.dbeta);
  ops::bias_dropout_residual_backward(r.dresidual, d, r.dx, r.dbias);
  return r;
}

void expect_equal(const Result& a, const Result& b, double atol, double rtol) {
  FC_EXPECT_CLOSE(a.h, b.h, atol, rtol);
  FC_EXPECT_CLOSE(a.y, b.y, atol, rtol);
  FC_EXPECT_CLOSE(a.mean, b.mean, atol, rtol);
  FC_EXPECT_CLOSE(a.rstd, b.rstd, atol, rtol);
  FC_EXPECT_CLOSE(a.dresidual, b.dresidual, atol, rtol);
  FC_EXPECT_CLOSE(a.dx, b.dx, atol, rtol);
  // Column sums over rows: the fused op adds the same terms per thread partition as the unfused
  // ops (dbias sums the rounded dx, like sum_rows_accumulate), but its summation order may differ.
  const double rows = static_cast<double>(a.h.numel() / a.h.size(-1));
  FC_EXPECT_CLOSE(a.dbias, b.dbias, 1e-5 * rows, 1e-5);
  FC_EXPECT_CLOSE(a.dgamma, b.dgamma, 1e-5 * rows, 1e-5);
  FC_EXPECT_CLOSE(a.dbeta, b.dbeta, 1e-5 * rows, 1e-5);
}

ops::DropoutArgs dropout(float p, std::vector<int> shared = {}) {
  ops::DropoutArgs d;
  d.p = p;
  d.seed = 1234;
  d.offset = 7;
  d.shared_dims = std::move(shared);
  return d;
}

TEST(FusedLayerNorm, MatchesUnfusedCompositionF32) {
  Generator gen(31);
  // Odd row lengths (ragged Philox blocks across rows), a single element, BERT-like 1024.
  const Shape shapes[] = {{1, 1}, {3, 5, 7}, {17, 33}, {4, 130}, {6, 1024}};
  for (const Shape& s : shapes) {
    const Inputs in = make_inputs(s, DType::f32, gen);
    for (float p : {0.f, 0.3f}) {
      SCOPED_TRACE(s.str() + " p=" + std::to_string(p));
      // Same mask, same fp32 operations per element and the same row summation order: equal up to
      // ~1e-6 relative (stated tolerance; in practice bit-identical).
      expect_equal(fused(in, dropout(p)), unfused(in, dropout(p)), 1e-6, 1e-6);
    }
  }
}

TEST(FusedLayerNorm, MatchesUnfusedWithSharedMaskAndBf16) {
  Generator gen(32);
  {
    SCOPED_TRACE("shared mask over axis -2");
    const Inputs in = make_inputs({3, 5, 24}, DType::f32, gen);
    expect_equal(fused(in, dropout(0.4f, {-2})), unfused(in, dropout(0.4f, {-2})), 1e-6, 1e-6);
  }
  {
    SCOPED_TRACE("bf16");
    const Inputs in = make_inputs({9, 40}, DType::bf16, gen);
    // h is rounded to bf16 before the statistics, as the unfused op stores it, so the fused
    // result differs from the unfused one only by fp32 summation-order effects, which can flip a
    // bf16 rounding: one bf16 ulp (2^-8 relative).
    expect_equal(fused(in, dropout(0.2f)), unfused(in, dropout(0.2f)), 1e-2, 8e-3);
  }
}

TEST(FusedLayerNorm, HOptionalAndInPlaceResidual) {
  Generator gen(33);
  const Inputs in = make_inputs({5, 12}, DType::f32, gen);
  const Result ref = fused(in, dropout(0.25f));
  // No h (inference): same y and statistics.
  Tensor y = Tensor::zeros(in.x.shape(), DType::f32);
  Tensor mean = Tensor::zeros({5}, DType::f32), rstd = Tensor::zeros({5}, DType::f32);
  ops::bias_dropout_residual_layernorm_forward(in.x, in.bias, in.residual, dropout(0.25f), in.gamma, in.beta, kEps,
                                               Tensor(), y, mean, rstd);
  FC_EXPECT_CLOSE(y, ref.y, 0, 0);
  // h written over the residual it reads.
  Tensor res = in.residual.clone();
  ops::bias_dropout_residual_layernorm_forward(in.x, in.bias, res, dropout(0.25f), in.gamma, in.beta, kEps, res, y,
                                               mean, rstd);
  FC_EXPECT_CLOSE(res, ref.h, 0, 0);
  FC_EXPECT_CLOSE(y, ref.y, 0, 0);
}

// The pre-LN stream's form (autograd::residual_layer_norm, an Evoformer module's residual add and
// the next module's LayerNorm): an fp32 residual stream with a 16-bit or fp32 update x without
// bias and y in bf16 (for the GEMMs) or fp32, or a bf16 stream with an fp32 update (the outer
// product mean's, with bf16 training streams) and a bf16 y, with row- or column-shared dropout; h
// (in place over the residual too) and y equal bias_dropout_residual_forward then
// layernorm_forward bit for bit (the same fp32 sum per element, rounded once to h's dtype, and the
// same statistics code). A 16-bit x of the other 16-bit dtype, or an fp32 y beside a 16-bit
// residual, is an error.
TEST(FusedLayerNorm, PreLnStreamMixedDtypesMatchTheComposition) {
  Generator gen(34);
  for (const auto& [shape, xt, rt, yt, p, shared] :
       {std::tuple{Shape{6, 5, 128}, DType::bf16, DType::f32, DType::bf16, 0.25f, std::vector<int>{-3}},
        std::tuple{Shape{6, 5, 128}, DType::bf16, DType::f32, DType::bf16, 0.15f, std::vector<int>{-2}},
        std::tuple{Shape{4, 7, 33}, DType::bf16, DType::f32, DType::f32, 0.f, std::vector<int>{}},
        std::tuple{Shape{3, 9, 256}, DType::f32, DType::f32, DType::bf16, 0.f, std::vector<int>{}},
        std::tuple{Shape{3, 9, 20}, DType::f16, DType::f32, DType::f16, 0.3f, std::vector<int>{}},
        std::tuple{Shape{3, 9, 128}, DType::f32, DType::bf16, DType::bf16, 0.f, std::vector<int>{}},
        std::tuple{Shape{4, 7, 33}, DType::f32, DType::bf16, DType::bf16, 0.2f, std::vector<int>{-3}}}) {
    SCOPED_TRACE(shape.str() + " x " + std::string(dtype_name(xt)) + " residual " + std::string(dtype_name(rt)) +
                 " y " + std::string(dtype_name(yt)));
    const int64_t c = shape.back(), rows = shape.product() / c;
    const Tensor x = randn(shape, gen, 0.1f, 1.f, xt), residual = randn(shape, gen, 0.5f, 2.f, rt);
    const Tensor gamma = randn({c}, gen, 1.f, 0.3f), beta = randn({c}, gen);
    const ops::DropoutArgs d = dropout(p, shared);
    Tensor h_ref = Tensor::zeros(shape, rt), y_ref = Tensor::zeros(shape, yt);
    Tensor mean_ref = Tensor::zeros({rows}, DType::f32), rstd_ref = Tensor::zeros({rows}, DType::f32);
    ops::bias_dropout_residual_forward(x, Tensor(), residual, d, h_ref);
    ops::layernorm_forward(h_ref, gamma, beta, kEps, y_ref, mean_ref, rstd_ref);
    for (const bool in_place : {false, true}) {
      Tensor res = residual.clone();
      Tensor h = in_place ? res : Tensor::zeros(shape, rt), y = Tensor::zeros(shape, yt);
      Tensor mean = Tensor::zeros({rows}, DType::f32), rstd = Tensor::zeros({rows}, DType::f32);
      ops::bias_dropout_residual_layernorm_forward(x, Tensor(), res, d, gamma, beta, kEps, h, y, mean, rstd);
      FC_EXPECT_CLOSE(h.to(DType::f32), h_ref.to(DType::f32), 0, 0);
      FC_EXPECT_CLOSE(y.to(DType::f32), y_ref.to(DType::f32), 0, 0);
      FC_EXPECT_CLOSE(mean, mean_ref, 0, 0);
      FC_EXPECT_CLOSE(rstd, rstd_ref, 0, 0);
    }
  }
  const Tensor x16 = randn({4, 8}, gen, 0.f, 1.f, DType::bf16), gamma = randn({8}, gen), beta = randn({8}, gen);
  Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(ops::bias_dropout_residual_layernorm_forward(randn({4, 8}, gen, 0.f, 1.f, DType::f16), Tensor(), x16,
                                                            dropout(0.f), gamma, beta, kEps, Tensor(),
                                                            Tensor::zeros({4, 8}, DType::bf16), mean, rstd),
               Error);  // an f16 x beside a bf16 residual
  EXPECT_THROW(ops::bias_dropout_residual_layernorm_forward(x16, Tensor(), x16, dropout(0.f), gamma, beta, kEps,
                                                            Tensor(), Tensor::zeros({4, 8}, DType::f32), mean, rstd),
               Error);  // an fp32 y of a bf16 stream
}

// loss = Σ y ⊙ w with a fixed dropout stream (same args every call, so the same mask).
void check_fd(float p) {
  Generator gen(34);
  const int64_t rows = 3, c = 7;
  Inputs in = make_inputs({rows, c}, DType::f32, gen);
  const Tensor w = randn({rows, c}, gen);
  const ops::DropoutArgs d = dropout(p);
  Result r = alloc(in);
  auto loss = [&] {
    ops::bias_dropout_residual_layernorm_forward(in.x, in.bias, in.residual, d, in.gamma, in.beta, kEps, r.h, r.y,
                                                 r.mean, r.rstd);
    return testing::weighted_sum(r.y, w);
  };
  loss();
  for (Tensor* g : {&r.dbias, &r.dgamma, &r.dbeta}) *g = Tensor::zeros({c}, DType::f32);
  ops::bias_dropout_residual_layernorm_backward(w, r.h, in.gamma, r.mean, r.rstd, d, r.dx, r.dbias, r.dresidual,
                                                r.dgamma, r.dbeta);
  if (p > 0.f) {  // the mask really drops something in this case
    const std::vector<float> dx = r.dx.to_vector();
    int zeros = 0;
    for (float v : dx) zeros += v == 0.f;
    ASSERT_GT(zeros, 0);
  }
  // eps = 1e-2 on O(1) inputs: LayerNorm is smooth (rstd ≈ 0.5), truncation ~eps² ≈ 1e-4; f32
  // rounding of an O(10) loss ~1e-6/eps = 1e-4; a wrong term (e.g. a missing 1/(1−p)) is O(0.1).
  testing::check_gradient(loss, in.x, r.dx, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, in.bias, r.dbias, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, in.residual, r.dresidual, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, in.gamma, r.dgamma, 1e-2, 2e-3, 1e-2);
  testing::check_gradient(loss, in.beta, r.dbeta, 1e-2, 2e-3, 1e-2);
}

TEST(FusedLayerNorm, BackwardMatchesFiniteDifferencesNoDropout) { check_fd(0.f); }
TEST(FusedLayerNorm, BackwardMatchesFiniteDifferencesFixedMask) { check_fd(0.5f); }

TEST(FusedLayerNorm, BadArgumentsThrow) {
  Generator gen(35);
  const Inputs in = make_inputs({4, 8}, DType::f32, gen);
  Result r = alloc(in);
  auto fwd = [&](const Tensor& x, const Tensor& bias, const Tensor& res, const ops::DropoutArgs& d) {
    ops::bias_dropout_residual_layernorm_forward(x, bias, res, d, in.gamma, in.beta, kEps, r.h, r.y, r.mean, r.rstd);
  };
  EXPECT_NO_THROW(fwd(in.x, in.bias, in.residual, dropout(0.1f)));
  EXPECT_NO_THROW(fwd(in.x, Tensor(), in.residual, dropout(0.1f)));  // bias is optional
  EXPECT_THROW(fwd(in.x, Tensor::zeros({7}, DType::f32), in.residual, dropout(0.1f)), Error);  // bias length
  EXPECT_THROW(fwd(in.x, in.bias.to(DType::bf16), in.residual, dropout(0.1f)), Error);         // bias dtype
  EXPECT_THROW(fwd(in.x, in.bias, Tensor::zeros({4, 7}, DType::f32), dropout(0.1f)), Error);  // residual shape
  EXPECT_THROW(fwd(in.x, in.bias, Tensor(), dropout(0.1f)), Error);                           // residual required
  EXPECT_THROW(fwd(in.x, in.bias, in.residual, dropout(1.f)), Error);                         // p out of range
  EXPECT_THROW(fwd(in.x, in.bias, in.residual, dropout(0.1f, {5})), Error);                   // shared axis
  EXPECT_THROW(ops::bias_dropout_residual_layernorm_forward(in.x, in.bias, in.residual, dropout(0.f), in.gamma,
                                                            in.beta, kEps, Tensor::zeros({4, 8}, DType::bf16), r.y,
                                                            r.mean, r.rstd),
               Error);  // h dtype
  // dbias = Σ dx needs dx.
  EXPECT_THROW(ops::bias_dropout_residual_layernorm_backward(in.dy, r.h, in.gamma, r.mean, r.rstd, dropout(0.f),
                                                             Tensor(), r.dbias, r.dresidual, r.dgamma, r.dbeta),
               Error);
  EXPECT_THROW(ops::bias_dropout_residual_layernorm_backward(in.dy, r.h, in.gamma, r.mean, r.rstd, dropout(0.f),
                                                             r.dx, Tensor::zeros({3}, DType::f32), r.dresidual,
                                                             r.dgamma, r.dbeta),
               Error);
}

}  // namespace
}  // namespace foldcore
