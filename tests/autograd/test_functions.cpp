// Every autograd Function's backward (through the engine) against finite differences.
#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/grad_mode.h"
#include "grad_check.h"
#include "kernels/gemm.h"

namespace foldcore::autograd {
namespace {

using testing::expect_grads_match_fd;
using testing::randn_away;

// A key mask bias [B, 1, 1, L] (no gradient): 0, and −1e9 at flat index `masked` of [B, L].
Tensor key_mask_bias(int64_t b, int64_t l, int64_t masked) {
  std::vector<float> mask(static_cast<size_t>(b * l), 0.f);
  mask[static_cast<size_t>(masked)] = -1e9f;
  return Tensor::from_vector(mask, {b, 1, 1, l});
}

TEST(AutogradFunctions, LinearEpilogues) {
  Generator g(1);
  for (ops::Activation act : {ops::Activation::none, ops::Activation::relu, ops::Activation::gelu}) {
    SCOPED_TRACE(static_cast<int>(act));
    expect_grads_match_fd([act](const auto& v) { return linear(v[0], v[1], v[2], act); },
                          {randn_away({2, 3, 5}, g), randn({5, 7}, g, 0, 0.5f), randn({7}, g)});
  }
  expect_grads_match_fd([](const auto& v) { return linear(v[0], v[1]); }, {randn({4, 3}, g), randn({3, 2}, g)});
}

TEST(AutogradFunctions, MatmulTransposesAndSharedOperand) {
  Generator g(2);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(std::to_string(ta) + std::to_string(tb));
      const Tensor a = ta ? randn({2, 5, 3}, g) : randn({2, 3, 5}, g);
      const Tensor b = tb ? randn({2, 4, 5}, g) : randn({2, 5, 4}, g);
      expect_grads_match_fd([=](const auto& v) { return matmul(v[0], v[1], ta, tb); }, {a, b});
    }
  // b 2-D, shared by the batch: its gradient sums over the batch.
  expect_grads_match_fd([](const auto& v) { return matmul(v[0], v[1]); }, {randn({3, 2, 5}, g), randn({5, 3}, g)});
}

// outer_product_project (C ≠ E, so a weight read in the wrong channel order cannot pass): gradients
// of all four inputs against finite differences; and values and gradients against the composition
// it replaces: the outer products as one product aᵀ·b [(i, c), (j, e)] transposed to [i, j, c, e],
// then a linear with w as it is. In fp32 the same products summed in another order (the projection
// over (e, c) instead of (c, e); the operands' gradients over (e, j) instead of (j, e)): within
// 1e-6 of the largest. Under bf16 autocast the composition stores its outer products and their
// gradient in bf16 as the op does, so the values agree within one bf16 rounding of the largest
// (2^-8) and the gradients within 1e-2 of the largest (sums of terms each rounded to 2^-9).
TEST(AutogradFunctions, OuterProductProjectEqualsTheComposition) {
  Generator g(41);
  expect_grads_match_fd([](const auto& v) { return outer_product_project(v[0], v[1], v[2], v[3]); },
                        {randn({5, 3, 2}, g), randn({5, 4, 3}, g), randn({6, 4}, g), randn({4}, g)});
  expect_grads_match_fd([](const auto& v) { return outer_product_project(v[0], v[1], v[2]); },
                        {randn({4, 2, 3}, g), randn({4, 3, 2}, g), randn({6, 5}, g)});
  const int64_t s = 6, ni = 3, nj = 5, c = 4, e = 2, z = 7;
  const Tensor a = randn({s, ni, c}, g), b = randn({s, nj, e}, g), w = randn({c * e, z}, g), bias = randn({z}, g),
               d = randn({ni, nj, z}, g);
  auto run = [&](bool fused, const Tensor& d0) {
    Variable va(a.clone(), true), vb(b.clone(), true), vw(w.clone(), true), vbias(bias.clone(), true);
    Variable out;
    if (fused) {
      out = outer_product_project(va, vb, vw, vbias);
    } else {
      const Variable prod = reshape(matmul(reshape(va, {s, ni * c}), reshape(vb, {s, nj * e}), true, false),
                                    {ni, c, nj, e});
      out = linear(reshape(contiguous(permute(prod, {0, 2, 1, 3})), {ni, nj, c * e}), vw, vbias);
    }
    EXPECT_EQ(out.shape(), Shape({ni, nj, z}));
    backward({out}, {d0.to(out.dtype())});
    EXPECT_EQ(va.grad().dtype(), DType::f32);
    return std::vector<std::vector<float>>{out.value().to(DType::f32).to_vector(), va.grad().to_vector(),
                                           vb.grad().to_vector(), vw.grad().to_vector(), vbias.grad().to_vector()};
  };
  auto expect_close = [](const std::vector<std::vector<float>>& x, const std::vector<std::vector<float>>& y,
                         float value_tol, float grad_tol, const char* what) {
    for (size_t i = 0; i < x.size(); ++i) {
      float largest = 0;
      for (const float v : y[i]) largest = std::max(largest, std::fabs(v));
      ASSERT_EQ(x[i].size(), y[i].size());
      for (size_t k = 0; k < x[i].size(); ++k)
        EXPECT_NEAR(x[i][k], y[i][k], (i == 0 ? value_tol : grad_tol) * largest) << what << ", tensor " << i;
    }
  };
  expect_close(run(true, d), run(false, d), 1e-6f, 1e-6f, "fp32");
  {
    AutocastGuard ac(DType::bf16);
    EXPECT_EQ(outer_product_project(Variable(a), Variable(b), Variable(w)).dtype(), DType::bf16);
    expect_close(run(true, d), run(false, d), 1.f / 256, 1e-2f, "bf16");
  }
  EXPECT_THROW(outer_product_project(Variable(randn({5, 3, 2}, g)), Variable(randn({4, 3, 2}, g)),
                                     Variable(randn({4, 2}, g))), Error);
  EXPECT_THROW(outer_product_project(Variable(a), Variable(b), Variable(randn({c * e + 1, z}, g))), Error);
  EXPECT_THROW(outer_product_project(Variable(a), Variable(b), Variable(w), Variable(randn({z + 1}, g))), Error);
}

TEST(AutogradFunctions, LayerNormSoftmax) {
  Generator g(3);
  expect_grads_match_fd([](const auto& v) { return layer_norm(v[0], v[1], v[2]); },
                        {randn({3, 7}, g), randn({7}, g), randn({7}, g)});
  expect_grads_match_fd([](const auto& v) { return softmax(v[0]); }, {randn({4, 6}, g)});
}

// The channel-major LayerNorm (x [C, rows...], y [rows..., C]) against finite differences, alone
// and with x's gradient summed over a second use; and its values and gradients equal, bit for bit,
// those of layer_norm of x's transpose (the composition it replaces: the CPU computes exactly that),
// in fp32 and with a bf16 x under autocast (a bf16 y, the GEMM's fp32 gradient read as it comes).
TEST(AutogradFunctions, ChannelMajorLayerNormEqualsTheTransposedComposition) {
  Generator g(37);
  expect_grads_match_fd([](const auto& v) { return layer_norm_channel_major(v[0], v[1], v[2]); },
                        {randn({7, 2, 3}, g), randn({7}, g), randn({7}, g)});
  expect_grads_match_fd(
      [](const auto& v) {
        return add(layer_norm_channel_major(v[0], v[1], v[2]), scale(contiguous(permute(v[0], {1, 2, 0})), 2.f));
      },
      {randn({5, 3, 2}, g), randn({5}, g), randn({5}, g)});
  const Tensor x = randn({16, 3, 5}, g, 0.5f, 2.f), gamma = randn({16}, g, 1.f, 0.3f), beta = randn({16}, g);
  const Tensor w = randn({16, 8}, g), d = randn({3, 5, 8}, g);
  for (const bool sixteen : {false, true}) {
    SCOPED_TRACE(sixteen ? "bf16" : "f32");
    std::optional<AutocastGuard> ac;
    if (sixteen) ac.emplace(DType::bf16);
    auto run = [&](bool channel_major) {
      Variable vx(sixteen ? x.to(DType::bf16) : x.clone(), true), vg(gamma.clone(), true), vb(beta.clone(), true);
      Variable vw(w.clone(), true);
      const Variable y = channel_major ? layer_norm_channel_major(vx, vg, vb)
                                       : layer_norm(contiguous(permute(vx, {1, 2, 0})), vg, vb);
      const Variable o = linear(y, vw);
      backward({o}, {d.to(o.dtype())});
      return std::vector<std::vector<float>>{y.value().to(DType::f32).to_vector(), o.value().to(DType::f32).to_vector(),
                                             vx.grad().to(DType::f32).to_vector(), vg.grad().to_vector(),
                                             vb.grad().to_vector(), vw.grad().to_vector()};
    };
    const auto a = run(true), b = run(false);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "tensor " << i;
  }
  EXPECT_THROW(layer_norm_channel_major(Variable(randn({4}, g)), Variable(randn({4}, g)), Variable(randn({4}, g))),
               Error);
  EXPECT_THROW(layer_norm_channel_major(Variable(randn({4, 3}, g)), Variable(randn({3}, g)), Variable(randn({3}, g))),
               Error);
}

// LayerNorm and a head-major projection: finite differences (fp32), and the composition it
// replaces, permute(linear(layer_norm(x), w), heads first): in fp32 the same values and gradients
// bit for bit (the CPU computes exactly that); under bf16 autocast the same values bit for bit and
// the gradients within bf16 rounding (the composition rounded LN's input gradient to bf16; the op
// keeps it in fp32 and reads its output's gradient in fp32 as it comes).
TEST(AutogradFunctions, LayerNormProjectHeadsEqualsTheComposition) {
  Generator g(38);
  expect_grads_match_fd([](const auto& v) { return layer_norm_project_heads(v[0], v[1], v[2], v[3]); },
                        {randn({3, 2, 7}, g), randn({7}, g), randn({7}, g), randn({7, 3}, g)});
  const Tensor x = randn({5, 4, 16}, g, 0.5f, 2.f), gamma = randn({16}, g, 1.f, 0.3f), beta = randn({16}, g);
  const Tensor w = randn({16, 4}, g, 0.f, 0.3f), d = randn({4, 5, 4}, g);
  for (const bool sixteen : {false, true}) {
    SCOPED_TRACE(sixteen ? "bf16" : "f32");
    std::optional<AutocastGuard> ac;
    if (sixteen) ac.emplace(DType::bf16);
    auto run = [&](bool fused) {
      Variable vx(x.clone(), true), vg(gamma.clone(), true), vb(beta.clone(), true), vw(w.clone(), true);
      const Variable ln = sixteen ? layer_norm(vx, vg, vb, 1e-5f, DType::bf16) : layer_norm(vx, vg, vb);
      const Variable o = fused ? layer_norm_project_heads(vx, vg, vb, vw)
                               : contiguous(permute(linear(ln, vw), {2, 0, 1}));
      backward({o}, {d.to(o.dtype())});
      return std::vector<std::vector<float>>{o.value().to(DType::f32).to_vector(), vx.grad().to_vector(),
                                             vg.grad().to_vector(), vb.grad().to_vector(), vw.grad().to_vector()};
    };
    const auto a = run(true), b = run(false);
    EXPECT_EQ(a[0], b[0]);
    for (size_t i = 1; i < a.size(); ++i) {
      if (!sixteen) {
        EXPECT_EQ(a[i], b[i]) << "gradient " << i;
        continue;
      }
      ASSERT_EQ(a[i].size(), b[i].size());
      float largest = 0;
      for (const float v : b[i]) largest = std::max(largest, std::fabs(v));
      for (size_t k = 0; k < a[i].size(); ++k) EXPECT_NEAR(a[i][k], b[i][k], 2e-2f * largest) << "gradient " << i;
    }
  }
  EXPECT_THROW(layer_norm_project_heads(Variable(randn({4, 3}, g)), Variable(randn({3}, g)), Variable(randn({3}, g)),
                                        Variable(randn({4, 2}, g))),
               Error);
}

// x used by a LayerNorm and by another op: the LayerNorm's backward adds into the gradient the
// other use left (grad_to_add) or writes it first (the other use's backward runs after it); both
// orders against finite differences.
TEST(AutogradFunctions, LayerNormGradientAddedIntoAnotherUsesGradient) {
  Generator g(31);
  expect_grads_match_fd([](const auto& v) { return add(layer_norm(v[0], v[1], v[2]), scale(v[0], 2.f)); },
                        {randn({3, 7}, g), randn({7}, g), randn({7}, g)});
  expect_grads_match_fd(
      [](const auto& v) {
        const Variable s = scale(v[0], -1.5f);  // before the LayerNorm: its backward runs after it
        return add(layer_norm(v[0], v[1], v[2]), s);
      },
      {randn({3, 7}, g), randn({7}, g), randn({7}, g)});
}

// layer_norm with a bf16 output equals the f32 one cast to bf16: the same values, and the same
// gradients of x, gamma and beta (the bf16 gradient read as it comes), bit for bit.
TEST(AutogradFunctions, LayerNormSixteenBitOutputEqualsCastComposition) {
  Generator g(32);
  const Tensor x = randn({6, 24}, g, 0.5f, 2.f), gamma = randn({24}, g, 1.f, 0.3f), beta = randn({24}, g);
  const Tensor w = randn({6, 24}, g).to(DType::bf16);
  struct Grads {
    std::vector<float> y, dx, dg, db;
  };
  auto run = [&](bool fused) {
    Variable vx(x.clone(), true), vg(gamma.clone(), true), vb(beta.clone(), true);
    const Variable base = add(vx, scale(vx, 0.5f));  // x's gradient summed over two uses
    const Variable y = fused ? layer_norm(base, vg, vb, 1e-5f, DType::bf16) : cast(layer_norm(base, vg, vb), DType::bf16);
    backward({y}, {w});
    return Grads{y.value().to(DType::f32).to_vector(), vx.grad().to_vector(), vg.grad().to_vector(),
                 vb.grad().to_vector()};
  };
  const Grads a = run(true), b = run(false);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dg, b.dg);
  EXPECT_EQ(a.db, b.db);
}

// Under bf16 autocast the GEMMs reading a LayerNorm's bf16 output hand their dx on in fp32
// (BackwardCtx::grad_dtype), through views of that output (a transposed copy) and summed over two
// consumers in fp32, and the LayerNorm's backward reads it as it is. So every gradient equals, bit
// for bit, that of an fp32 LayerNorm output cast to bf16 inside the GEMMs (whose fp32 dx was never
// rounded). Rounding the dx to bf16 on its way, as a conversion pass did, changes the bits.
TEST(AutogradFunctions, GemmsHandAnFp32GradientToASixteenBitLayerNormOutput) {
  Generator g(34);
  const Tensor x = randn({4, 6, 16}, g, 0.5f, 2.f), gamma = randn({16}, g, 1.f, 0.3f), beta = randn({16}, g);
  const Tensor w1 = randn({16, 8}, g), w2 = randn({16, 8}, g), b1 = randn({8}, g), b2 = randn({8}, g);
  const Tensor w3 = randn({16, 12}, g);
  const Tensor d1 = randn({4, 6, 8}, g), d2 = randn({4, 6, 8}, g), d3 = randn({6, 4, 12}, g);
  const AutocastGuard bf16(DType::bf16);
  auto run = [&](bool sixteen) {
    Variable vx(x.clone(), true), vg(gamma.clone(), true), vb(beta.clone(), true);
    Variable v1(w1.clone(), true), v2(w2.clone(), true), vb1(b1.clone(), true), vb2(b2.clone(), true);
    Variable v3(w3.clone(), true);
    const Variable y = sixteen ? layer_norm(vx, vg, vb, 1e-5f, DType::bf16) : layer_norm(vx, vg, vb);
    const std::vector<Variable> p = linears(y, {v1, v2}, {vb1, vb2}, {});  // one consumer: fp32 dx
    const Variable t = linear(contiguous(transpose(y, 0, 1)), v3);                 // another, through views
    backward({p[0], p[1], t}, {d1.to(p[0].dtype()), d2.to(p[1].dtype()), d3.to(t.dtype())});
    return std::vector<std::vector<float>>{vx.grad().to_vector(), vg.grad().to_vector(), vb.grad().to_vector(),
                                           v1.grad().to_vector(), v2.grad().to_vector(), v3.grad().to_vector()};
  };
  const auto a = run(true), b = run(false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "gradient " << i;
}

// A LayerNorm of a 16-bit x (a bf16 stream) computes its backward in fp32 whatever dy's dtype, so
// a `linear`, or a `linears` run of two projections, that is its output's only consumer writes dx
// in bf16 (Node::narrow_output_grads, BackwardCtx::sole_consumer_of_narrow_output; the run's fp32
// sum of both products rounded once by gemm_sum_nt): every gradient is, bit for bit, that of the
// same graph with an exact op between them (scale by 1, whose node takes bf16 gradients only).
// With a second consumer (its gradient zero) the two sum in fp32 as before, and x's gradient
// differs from the lone consumer's in its bits (the rounding of dy is what the rule changes); of
// an fp32 x, a lone consumer still hands its dx on in fp32 (the reference with the exact op
// differs).
TEST(AutogradFunctions, LoneGemmConsumerOfASixteenBitLayerNormHandsItsGradientInBf16) {
  Generator g(36);
  const Tensor x = randn({4, 6, 16}, g, 0.5f, 2.f), gamma = randn({16}, g, 1.f, 0.3f), beta = randn({16}, g);
  const Tensor w1 = randn({16, 8}, g), b1 = randn({8}, g), w2 = randn({16, 8}, g), w3 = randn({16, 4}, g);
  const Tensor d1 = randn({4, 6, 8}, g), d3 = randn({4, 6, 4}, g);
  const AutocastGuard bf16(DType::bf16);
  enum class Form { lone, exact_op_between, second_consumer };
  for (const bool run_of_two : {false, true}) {
    SCOPED_TRACE(run_of_two ? "linears" : "linear");
    auto run = [&](Form form, DType x_dtype) {
      Variable vx(x.to(x_dtype), true), vg(gamma.clone(), true), vb(beta.clone(), true);
      Variable v1(w1.clone(), true), vb1(b1.clone(), true), v2(w2.clone(), true), v3(w3.clone(), true);
      const Variable y = layer_norm(vx, vg, vb, 1e-5f, DType::bf16);
      const Variable in = form == Form::exact_op_between ? scale(y, 1.f) : y;
      std::vector<Variable> outs;
      if (run_of_two) outs = linears(in, {v1, v3}, {vb1, Variable()});
      else outs = {linear(in, v1, vb1)};
      if (form == Form::second_consumer) outs.push_back(linear(y, v2));
      std::vector<Tensor> grads{d1.to(outs[0].dtype())};
      if (run_of_two) grads.push_back(d3.to(outs[1].dtype()));
      if (form == Form::second_consumer) grads.push_back(Tensor::zeros(outs.back().shape(), outs.back().dtype()));
      backward(outs, grads);
      std::vector<std::vector<float>> r{vx.grad().to(DType::f32).to_vector(), vg.grad().to_vector(),
                                        vb.grad().to_vector(), v1.grad().to_vector(), vb1.grad().to_vector()};
      if (run_of_two) r.push_back(v3.grad().to_vector());
      return r;
    };
    const auto lone = run(Form::lone, DType::bf16), between = run(Form::exact_op_between, DType::bf16);
    ASSERT_EQ(lone.size(), between.size());
    for (size_t i = 0; i < lone.size(); ++i) EXPECT_EQ(lone[i], between[i]) << "gradient " << i;
    EXPECT_NE(run(Form::second_consumer, DType::bf16)[0], lone[0]);
    EXPECT_NE(run(Form::lone, DType::f32)[0], run(Form::exact_op_between, DType::f32)[0]);
  }
}

// The masked gated edge, channel-major: gradients of g and x against finite differences (a mask
// with zeros), and its values and gradients equal to the composition it replaces.
TEST(AutogradFunctions, MaskedGateChannelMajor) {
  Generator g(33);
  const Tensor mask = Tensor::from_vector({1.f, 0.f, 1.f, 1.f, 1.f, 0.f}, {2, 3});
  expect_grads_match_fd([&](const auto& v) { return masked_gate_channel_major(v[0], v[1], mask); },
                        {randn({2, 3, 5}, g), randn({2, 3, 5}, g)});
  const Tensor gv = randn({3, 4, 6}, g), xv = randn({3, 4, 6}, g), w = randn({6, 3, 4}, g);
  const Tensor m = Tensor::from_vector({1.f, 1.f, 0.f, 1.f, 1.f, 1.f, 1.f, 0.f, 1.f, 0.f, 1.f, 1.f}, {3, 4});
  auto run = [&](bool fused) {
    Variable vg(gv.clone(), true), vx(xv.clone(), true);
    const Variable y = fused ? masked_gate_channel_major(vg, vx, m)
                             : contiguous(permute(mul(sigmoid_gate(vg, vx), Variable(m.unsqueeze(-1))), {2, 0, 1}));
    backward({y}, {w});
    return std::vector<std::vector<float>>{y.value().to_vector(), vg.grad().to_vector(), vx.grad().to_vector()};
  };
  EXPECT_EQ(run(true), run(false));
}

// attention(seq_major): q, k, v, gate and o laid out [L, B, H, D] (the column-wise attentions on
// projections as they lie; finite differences in GatedAttentionWithBiases): bit for bit the [B, L, H, D] attention
// on transposed copies of the inputs with its output transposed back (the same kernel on the same
// values, read through other strides), gradients of every input and bias included.
TEST(AutogradFunctions, SeqMajorAttentionEqualsTheTransposedComposition) {
  Generator g(35);
  const int64_t l = 5, b = 3, h = 2, d = 4;
  const Tensor mask_bias = key_mask_bias(b, l, b * l - 2);
  const Tensor q = randn({l, b, h, d}, g), k = randn({l, b, h, d}, g), v = randn({l, b, h, d}, g);
  const Tensor gate = randn({l, b, h, d}, g), pair = randn({1, h, l, l}, g), w = randn({l, b, h, d}, g);
  auto run = [&](bool seq_major) {
    Variable vq(q.clone(), true), vk(k.clone(), true), vv(v.clone(), true), vg(gate.clone(), true);
    Variable vp(pair.clone(), true);
    const std::vector<Variable> biases{vp, Variable(mask_bias)};
    auto t = [](const Variable& x) { return contiguous(transpose(x, 0, 1)); };
    const Variable o = seq_major ? attention(vq, vk, vv, biases, vg, {}, 0.5f, true)
                                 : transpose(attention(t(vq), t(vk), t(vv), biases, t(vg), {}, 0.5f), 0, 1);
    backward({o}, {w});
    return std::vector<std::vector<float>>{contiguous(o).value().to_vector(), vq.grad().to_vector(),
                                           vk.grad().to_vector(), vv.grad().to_vector(), vg.grad().to_vector(),
                                           vp.grad().to_vector()};
  };
  const auto a = run(true), c = run(false);
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], c[i]) << "result " << i;
}

TEST(AutogradFunctions, CrossEntropyHardSoftWeighted) {
  Generator g(4);
  CrossEntropyOptions hard;
  hard.labels = Tensor::from_vector_i64({2, -1, 0, 4, 1, 3}, {2, 3});
  hard.weights = Tensor::from_vector({1.f, 2.f, 0.5f, 1.f, 1.5f, 1.f}, {6});
  expect_grads_match_fd([&](const auto& v) { return softmax_cross_entropy(v[0], hard); }, {randn({2, 3, 5}, g)});
  CrossEntropyOptions soft;
  soft.targets = softmax(Variable(randn({4, 5}, g))).value();
  expect_grads_match_fd([&](const auto& v) { return softmax_cross_entropy(v[0], soft); }, {randn({4, 5}, g)});
  // Mean over the non-ignored rows: 2 rows, one ignored → loss = loss of the other row.
  CrossEntropyOptions one;
  one.labels = Tensor::from_vector_i64({1, -1}, {2});
  const Tensor x = Tensor::from_vector({0.f, 0.f, 5.f, 1.f}, {2, 2});
  EXPECT_NEAR(softmax_cross_entropy(Variable(x), one).value().item(), std::log(2.0), 1e-6);
}

// Both layouts: [B, L, H, D] and seq_major's [L, B, H, D].
TEST(AutogradFunctions, GatedAttentionWithBiases) {
  Generator g(5);
  const int64_t b = 2, l = 5, h = 2, d = 3;
  const Tensor mask_bias = key_mask_bias(b, l, b * l - 1);  // the last key of the last row masked
  for (bool seq_major : {false, true}) {
    SCOPED_TRACE(seq_major);
    const Shape s = seq_major ? Shape{l, b, h, d} : Shape{b, l, h, d};
    expect_grads_match_fd(
        [&](const auto& v) {
          return attention(v[0], v[1], v[2], {v[4], Variable(mask_bias)}, v[3], {}, 0.5f, seq_major);
        },
        {randn(s, g), randn(s, g), randn(s, g), randn(s, g), randn({1, h, l, l}, g)});
  }
}

TEST(AutogradFunctions, AttentionFromProjectionViewsAndPackedSequences) {
  Generator g(6);
  // q/k/v as views of one [1, L, 3·H·D] projection (strided, no copy), packed segments.
  const Tensor cu = Tensor::from_vector_i64({0, 2, 5}, {3}, DType::i32);
  expect_grads_match_fd(
      [&](const auto& v) {
        Variable qkv = reshape(v[0], {1, 5, 3, 2, 2});
        auto part = [&](int i) { return reshape(narrow(qkv, 2, i, 1), {1, 5, 2, 2}); };
        return attention(part(0), part(1), part(2), {}, {}, cu, 0.7f);
      },
      {randn({1, 5, 12}, g)});
}

TEST(AutogradFunctions, GlobalAttention) {
  Generator g(7);
  const Tensor bias = Tensor::from_vector({0, 0, -1e9f, 0, 0, 0, 0, 0}, {2, 4});
  expect_grads_match_fd([&](const auto& v) { return global_attention(v[0], v[1], v[2], bias, v[3], 0.5f); },
                        {randn({2, 3, 2}, g), randn({2, 4, 2}, g), randn({2, 4, 2}, g), randn({2, 4, 3, 2}, g)});
}

TEST(AutogradFunctions, Pointwise) {
  Generator g(8);
  expect_grads_match_fd([](const auto& v) { return add(v[0], v[1]); }, {randn({3, 4}, g), randn({4}, g)});
  expect_grads_match_fd([](const auto& v) { return mul(v[0], v[1]); }, {randn({2, 3, 4}, g), randn({3, 1}, g)});
  expect_grads_match_fd([](const auto& v) { return scale(v[0], -1.5f); }, {randn({5}, g)});
  expect_grads_match_fd([](const auto& v) { return relu(v[0]); }, {randn_away({3, 5}, g)});
  expect_grads_match_fd([](const auto& v) { return gelu(v[0]); }, {randn({3, 5}, g)});
  expect_grads_match_fd([](const auto& v) { return sigmoid(v[0]); }, {randn({3, 5}, g)});
  expect_grads_match_fd([](const auto& v) { return sigmoid_gate(v[0], v[1]); }, {randn({3, 5}, g), randn({3, 5}, g)});
}

TEST(AutogradFunctions, DropoutSharedMaskAndBiasResidual) {
  Generator g(9);
  // A fresh generator per evaluation: every FD evaluation draws the same mask.
  expect_grads_match_fd(
      [](const auto& v) {
        Generator rng(3);
        return bias_dropout_residual(v[0], v[1], v[2], DropoutSpec{0.3f, &rng, {-3}});
      },
      {randn({3, 4, 5}, g), randn({5}, g), randn({3, 4, 5}, g)});
  // Row-shared mask: identical along axis -3.
  Generator rng(4);
  const Tensor y = dropout(Variable(Tensor::full({4, 3, 6}, 1.0, DType::f32)), DropoutSpec{0.5f, &rng, {-3}}).value();
  const std::vector<float> yv = y.to_vector();
  int dropped = 0;
  for (int i = 0; i < 18; ++i) {
    for (int r = 1; r < 4; ++r) EXPECT_EQ(yv[static_cast<size_t>(i)], yv[static_cast<size_t>(r * 18 + i)]);
    dropped += yv[static_cast<size_t>(i)] == 0.f;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 18);
}

// A bf16 update of an fp32 stream takes the mixed kernels: the output and both gradients are bit
// for bit those of casting the update to fp32 first (the former path), dropout on.
TEST(AutogradFunctions, Bf16UpdateOfAnFp32StreamEqualsTheCastOne) {
  Generator g(10);
  const Tensor xv = randn({4, 5, 16}, g).to(DType::bf16), rv = randn({4, 5, 16}, g), w = randn({4, 5, 16}, g);
  const auto run = [&](bool cast_first) {
    const Variable x(xv, true), r(rv, true);
    Generator rng(5);
    const Variable y = bias_dropout_residual(cast_first ? cast(x, DType::f32) : x, {}, r, DropoutSpec{0.3f, &rng, {-2}});
    EXPECT_EQ(y.dtype(), DType::f32);
    backward({y}, {w});
    EXPECT_EQ(x.grad().dtype(), DType::bf16);
    return std::vector<Tensor>{y.value(), x.grad().to(DType::f32), r.grad()};
  };
  const auto mixed = run(false), cast_first = run(true);
  for (size_t i = 0; i < mixed.size(); ++i) {
    SCOPED_TRACE(i);
    FC_EXPECT_CLOSE(mixed[i], cast_first[i], 0, 0);
  }
}

// residual_layer_norm: {h, y} and every gradient bit for bit those of bias_dropout_residual then
// layer_norm (the same two nodes), with dropout: a bf16 update of an fp32 stream with y in bf16 (an
// Evoformer module's residual add and the next module's LayerNorm for its GEMMs), fp32 throughout,
// an fp32 update of a bf16 stream with y in bf16 (the outer product mean's, with bf16 training
// streams: h stays bf16), and a dtype mix the fused kernel does not take (an f16 update of a bf16
// stream: the two ops). The LayerNorm output feeds a product with w and h feeds one with w2, so
// both paths reach the stream.
TEST(AutogradFunctions, ResidualLayerNormEqualsTheTwoOps) {
  Generator g(12);
  const Shape s{4, 5, 16};
  const Tensor gv = randn({16}, g, 1.f, 0.3f), bv = randn({16}, g);
  for (const auto& [xt, rt, yt] : {std::tuple{DType::bf16, DType::f32, DType::bf16},
                                   std::tuple{DType::f32, DType::f32, DType::f32},
                                   std::tuple{DType::f32, DType::bf16, DType::bf16},
                                   std::tuple{DType::f16, DType::bf16, DType::bf16}}) {
    SCOPED_TRACE(std::string(dtype_name(xt)) + " update, " + std::string(dtype_name(rt)) + " stream, " +
                 std::string(dtype_name(yt)) + " y");
    const Tensor xv = randn(s, g).to(xt), rv = randn(s, g, 0.5f, 2.f).to(rt);
    const Tensor w = randn(s, g).to(yt), w2 = randn(s, g).to(rt);
    const auto run = [&](bool fused) {
      const Variable x(xv.clone(), true), r(rv.clone(), true), gamma(gv.clone(), true), beta(bv.clone(), true);
      Generator rng(5);
      const DropoutSpec d{0.3f, &rng, {-2}};
      Variable h, y;
      if (fused) {
        std::tie(h, y) = residual_layer_norm(x, r, d, gamma, beta, 1e-5f, yt);
      } else {
        h = bias_dropout_residual(x, {}, r, d);
        y = layer_norm(h, gamma, beta, 1e-5f, yt);
      }
      EXPECT_EQ(y.dtype(), yt);
      backward({y, h}, {w, w2});
      return std::vector<Tensor>{h.value().to(DType::f32), y.value().to(DType::f32), x.grad().to(DType::f32),
                                 r.grad().to(DType::f32), gamma.grad(), beta.grad()};
    };
    const auto a = run(true), b = run(false);
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(i);
      FC_EXPECT_CLOSE(a[i], b[i], 0, 0);
    }
  }
}

// With in_place, the fused residual + LayerNorm ops write the pre-LN sum h into the residual's own
// storage where nothing else can see it (bias_dropout_residual's rule: a stream made by an earlier
// op and held only by its Variable), and into a new tensor where something can (a leaf that takes
// a gradient), with the same values either way.
TEST(AutogradFunctions, FusedResidualLayerNormsUpdateTheStreamInPlace) {
  Generator g(13);
  const Shape s{3, 4, 8};
  const Tensor xv = randn(s, g), rv = randn(s, g), gv = randn({8}, g, 1.f, 0.2f), bv = randn({8}, g);
  const Variable gamma(gv, true), beta(bv, true);
  const DropoutSpec none;
  for (const bool leaf : {false, true}) {
    SCOPED_TRACE(leaf ? "a leaf residual" : "a residual only its Variable holds");
    const Variable base(rv.clone(), true);
    Variable r1 = leaf ? base : scale(base, 1.f), r2 = leaf ? base : scale(base, 1.f);
    const void* p1 = r1.value().data_ptr();
    const void* p2 = r2.value().data_ptr();
    const auto [h1, y1] = residual_layer_norm(Variable(xv, true), r1, none, gamma, beta, 1e-5f, std::nullopt, true);
    const Variable y2 = bias_dropout_residual_layer_norm(Variable(xv, true), Variable(), r2, none, gamma, beta, 1e-5f, true);
    EXPECT_EQ(h1.value().data_ptr() == p1, !leaf);
    EXPECT_EQ(y2.node()->name, "bias_dropout_residual_layer_norm");
    if (!leaf) {
      EXPECT_NE(y2.value().data_ptr(), p2);
      EXPECT_EQ(r2.value().to_vector(), h1.value().to_vector());  // r2's storage now holds h
    } else {
      EXPECT_EQ(base.value().to_vector(), rv.to_vector());  // the leaf is untouched
    }
    EXPECT_EQ(y1.value().to_vector(), y2.value().to_vector());
  }
}

TEST(AutogradFunctions, EmbeddingAndOneHot) {
  Generator g(10);
  const Tensor idx = Tensor::from_vector_i64({1, 3, 1, 0}, {2, 2});
  expect_grads_match_fd([&](const auto& v) { return embedding(v[0], idx); }, {randn({4, 3}, g)});
  const std::vector<float> oh = one_hot(idx, 4).to_vector();
  EXPECT_EQ(oh.size(), 16u);
  EXPECT_EQ(oh[1], 1.f);
  EXPECT_EQ(oh[4 + 3], 1.f);
  EXPECT_EQ(oh[4 + 2], 0.f);
}

TEST(AutogradFunctions, ViewsReductionsConcat) {
  Generator g(11);
  const Tensor x = randn({2, 3, 4}, g);
  expect_grads_match_fd([](const auto& v) { return reshape(v[0], {6, 4}); }, {x});
  expect_grads_match_fd([](const auto& v) { return contiguous(permute(v[0], {2, 0, 1})); }, {x});
  expect_grads_match_fd([](const auto& v) { return transpose(v[0], 0, 2); }, {x});
  expect_grads_match_fd([](const auto& v) { return narrow(v[0], 2, 1, 2); }, {x});
  expect_grads_match_fd([](const auto& v) { return unsqueeze(v[0], 1); }, {x});
  expect_grads_match_fd([](const auto& v) { return sum(v[0], {0, 2}); }, {x});
  expect_grads_match_fd([](const auto& v) { return mean(v[0], {-1}); }, {x});
  expect_grads_match_fd([](const auto& v) { return concat({v[0], v[1]}, 1); }, {x, randn({2, 2, 4}, g)});
  // The same input used by two views of itself.
  expect_grads_match_fd([](const auto& v) { return add(narrow(v[0], 1, 0, 2), narrow(v[0], 1, 1, 2)); }, {x});
}

TEST(AutogradFunctions, CastRoundTripsGradients) {
  const Tensor x = Tensor::from_vector({1.f, 2.f, 3.f}, {3});
  Variable v(x, true);
  Variable y = cast(cast(v, DType::bf16), DType::f32);
  backward({y}, {Tensor::from_vector({0.5f, 1.f, 2.f}, {3})});
  EXPECT_EQ(v.grad().to_vector(), (std::vector<float>{0.5f, 1.f, 2.f}));  // exact in bf16
}

// mul of a 16-bit a by an fp32 b (a bf16 GEMM output times an fp32 normaliser) is one mixed
// multiply, no cast node: its value and both gradients equal the composition's (cast a to fp32,
// multiply, a's gradient cast back), bit for bit, with b broadcast over the last axis and b both
// with and without a gradient.
TEST(AutogradFunctions, MulOfSixteenBitByFp32EqualsTheCastComposition) {
  Generator g(12);
  const Shape s{4, 5, 8};
  for (const DType t : {DType::bf16, DType::f16})
    for (const bool b_grad : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (b_grad ? ", b with a gradient" : ", b constant"));
      const Tensor a = randn(s, g).to(t), b = randn({4, 5, 1}, g), w = randn(s, g);
      Variable a1(a.clone(), true), b1(b.clone(), b_grad), a2(a.clone(), true), b2(b.clone(), b_grad);
      const Variable y1 = mul(a1, b1);
      const Variable y2 = mul(cast(a2, DType::f32), b2);
      EXPECT_EQ(y1.dtype(), DType::f32);
      EXPECT_EQ(y1.node()->name, "mul");  // no cast node before it
      EXPECT_EQ(y1.value().to_vector(), y2.value().to_vector());
      backward({y1}, {w});
      backward({y2}, {w});
      EXPECT_EQ(a1.grad().dtype(), t);
      EXPECT_EQ(a1.grad().to(DType::f32).to_vector(), a2.grad().to(DType::f32).to_vector());
      if (b_grad) {
        EXPECT_EQ(b1.grad().to_vector(), b2.grad().to_vector());
      }
    }
}

TEST(AutogradFunctions, BadShapesAreClearErrors) {
  Variable x(Tensor::zeros({2, 3}, DType::f32)), w(Tensor::zeros({4, 5}, DType::f32));
  try {
    linear(x, w);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add(x, Variable(Tensor::zeros({4}, DType::f32))), Error);
}

}  // namespace
}  // namespace foldcore::autograd
