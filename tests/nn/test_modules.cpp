// Transformer-core modules: hierarchical parameter names, AF2 initialisers, shapes, gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "core/random.h"
#include "nn/transformer.h"
#include "../autograd/grad_check.h"

namespace foldcore::nn {
namespace {

struct Env {
  autograd::ParamStore ps;
  Generator init{1}, rng{2};
  Scope scope(const std::string& prefix = "") { return Scope{&ps, &init, &rng, prefix}; }
};

TEST(NnModules, LinearInitialisersAndNames) {
  Env e;
  Linear lecun(e.scope("m/lecun"), 400, 300), relu(e.scope("m/relu"), 400, 300, {Init::relu});
  Linear glorot(e.scope("m/glorot"), 400, 300, {Init::glorot, false});
  Linear gating(e.scope("m/gating"), 8, 4, {Init::gating}), final(e.scope("m/final"), 8, 4, {Init::final});
  e.ps.finalize();
  EXPECT_TRUE(e.ps.contains("m/lecun/weight") && e.ps.contains("m/lecun/bias"));
  EXPECT_FALSE(e.ps.contains("m/glorot/bias"));
  auto stats = [](const Tensor& t) {
    double s = 0, s2 = 0, mx = 0;
    for (float v : t.to_vector()) {
      s += v;
      s2 += v * v;
      mx = std::max(mx, static_cast<double>(std::abs(v)));
    }
    const double n = static_cast<double>(t.numel());
    return std::make_tuple(s / n, std::sqrt(s2 / n - (s / n) * (s / n)), mx);
  };
  // 120k samples: the sample std is within ~0.5 % of the target; 2 % tolerance.
  auto [m1, sd1, mx1] = stats(lecun.weight().value());
  EXPECT_NEAR(sd1, std::sqrt(1.0 / 400), 0.02 * std::sqrt(1.0 / 400));
  EXPECT_LE(mx1, 2 * std::sqrt(1.0 / 400) / 0.8796 + 1e-6);  // truncated at 2 σ of the base normal
  EXPECT_NEAR(m1, 0, 1e-3);
  auto [m2, sd2, mx2] = stats(relu.weight().value());
  EXPECT_NEAR(sd2, std::sqrt(2.0 / 400), 0.02 * std::sqrt(2.0 / 400));
  auto [m3, sd3, mx3] = stats(glorot.weight().value());
  EXPECT_LE(mx3, std::sqrt(6.0 / 700) + 1e-6);
  EXPECT_NEAR(sd3, std::sqrt(6.0 / 700) / std::sqrt(3.0), 0.02 * std::sqrt(2.0 / 700));
  for (float v : gating.weight().value().to_vector()) EXPECT_EQ(v, 0.f);
  for (float v : gating.bias().value().to_vector()) EXPECT_EQ(v, 1.f);
  for (float v : final.weight().value().to_vector()) EXPECT_EQ(v, 0.f);
  for (float v : final.bias().value().to_vector()) EXPECT_EQ(v, 0.f);
  (void)m2, (void)mx2, (void)m3;
  const auto segs = e.ps.segments();
  EXPECT_TRUE(segs[0].weight_decay);   // m/lecun/weight
  EXPECT_FALSE(segs[1].weight_decay);  // m/lecun/bias
}

TEST(NnModules, EncoderLayerShapesNamesAndGradients) {
  Env e;
  EncoderLayerOptions o;
  o.d_model = 16;
  o.num_heads = 4;
  o.d_ff = 24;
  o.dropout = 0.1f;
  TransformerEncoderLayer layer(e.scope("layer_0"), o);
  e.ps.finalize();
  EXPECT_TRUE(e.ps.contains("layer_0/attention/q/weight"));
  EXPECT_TRUE(e.ps.contains("layer_0/attention/output/bias"));
  EXPECT_TRUE(e.ps.contains("layer_0/ffn/fc1/weight"));
  EXPECT_TRUE(e.ps.contains("layer_0/ffn_layer_norm/scale"));
  EXPECT_FALSE(e.ps.contains("layer_0/attention/gate/weight"));  // BERT mode: no gate
  EXPECT_EQ(layer.named_parameters().size(), e.ps.names().size());
  Generator g(3);
  autograd::Variable x(randn({2, 5, 16}, g));
  // Padding mask: the last two keys of sequence 1 are masked.
  std::vector<float> mb(10, 0.f);
  mb[8] = mb[9] = -1e9f;
  autograd::Variable mask(Tensor::from_vector(mb, {2, 1, 1, 5}));
  autograd::Variable y = layer.forward(x, mask);
  EXPECT_EQ(y.shape(), Shape({2, 5, 16}));
  autograd::backward(autograd::mean(autograd::mul(y, y), {0, 1, 2}));
  for (const auto& [name, v] : layer.named_parameters()) {
    double n = 0;
    for (float gv : v.grad().to_vector()) n += gv * gv;
    EXPECT_GT(n, 0) << name << " got no gradient";
  }
  // Eval mode: dropout off, and no-grad inference gives the same values twice.
  layer.train(false);
  autograd::NoGradGuard ng;
  const Tensor a = layer.forward(x, mask).value(), b = layer.forward(x, mask).value();
  FC_EXPECT_CLOSE(a, b, 0, 0);
}

TEST(NnModules, GatedAttentionTransitionGlobalAttentionFiniteDifferences) {
  Env e;
  Attention att(e.scope("msa_row_attention"), AttentionOptions::alphafold(6, 6, 2, 3, 6));
  Transition tr(e.scope("transition"), 6, 2);
  GlobalAttention ga(e.scope("global"), 6, 2, 3);
  e.ps.finalize();
  EXPECT_TRUE(e.ps.contains("msa_row_attention/gate/bias"));
  EXPECT_FALSE(e.ps.contains("msa_row_attention/q/bias"));
  // AF2 zero-initialises output/gating weights; randomise everything for a meaningful check.
  Generator g(4);
  Tensor vals = e.ps.values();
  vals.copy_(randn(vals.shape(), g, 0, 0.4f));
  // MSA [S=2, R=4, c=6] with a pair bias [1, H, R, R] (from a pair projection).
  const Tensor m = randn({2, 4, 6}, g), pair_bias = randn({1, 2, 4, 4}, g);
  const Tensor mask = Tensor::from_vector({1, 1, 0, 1, 1, 1, 1, 1}, {2, 4});
  autograd::testing::expect_grads_match_fd(
      [&](const auto& v) {
        autograd::Variable h = att.forward(v[0], v[0], {v[1]});
        h = autograd::add(tr.forward(h), h);
        return ga.forward(h, mask);
      },
      {m, pair_bias});
  autograd::Variable x(m);
  EXPECT_EQ(ga.forward(x, mask).shape(), Shape({2, 4, 6}));
}

// Attention::InputBias (the triangle attention's pair bias projected in the projections' run):
// the values and every gradient of the same attention with that bias made by a separate Linear
// and passed as a bias (fp32: the same products in another grouping, 1e-5), along the rows and
// along the first axis (forward_seq_major, the bias swapped); the row form's x-gradient against
// finite differences too. A Linear of another input width is an error.
TEST(NnModules, AttentionInputBiasEqualsASeparateProjection) {
  Env e;
  Attention att(e.scope("att"), AttentionOptions::alphafold(8, 8, 2, 4, 8));
  Linear feat(e.scope("feat_2d_weights"), 8, 2, {Init::lecun, false});
  Linear wrong(e.scope("wrong"), 6, 2, {Init::lecun, false});
  e.ps.finalize();
  Generator g(5);
  Tensor vals = e.ps.values();
  vals.copy_(randn(vals.shape(), g, 0, 0.4f));
  const Tensor x0 = randn({4, 4, 8}, g), w = randn({4, 4, 8}, g);
  const Tensor mask_bias = Tensor::from_vector({0, 0, -1e9f, 0, 0, 0, 0, 0, 0, -1e9f, 0, 0, 0, 0, 0, 0}, {4, 1, 1, 4});
  for (const bool seq_major : {false, true}) {
    SCOPED_TRACE(seq_major ? "along the first axis" : "along the rows");
    const auto layout = [seq_major](const autograd::Variable& b) {
      return autograd::unsqueeze(autograd::contiguous(autograd::permute(b, seq_major ? std::vector<int>{2, 1, 0}
                                                                                       : std::vector<int>{2, 0, 1})),
                                 0);
    };
    const Attention::InputBias input_bias{&feat, layout};
    auto run = [&](bool joined) {
      e.ps.zero_grad();
      autograd::Variable x(x0.clone(), true);
      const std::vector<autograd::Variable> biases{autograd::Variable(mask_bias)};
      autograd::Variable y;
      if (joined) {
        y = seq_major ? att.forward_seq_major(x, biases, input_bias) : att.forward(x, biases, input_bias);
      } else {
        std::vector<autograd::Variable> all = biases;
        all.push_back(layout(feat.forward(x)));
        y = seq_major ? att.forward_seq_major(x, all) : att.forward(x, x, all);
      }
      autograd::backward({y}, {w});
      return std::vector<Tensor>{y.value().clone(), x.grad().clone(), e.ps.grads().clone()};
    };
    const std::vector<Tensor> joined = run(true), separate = run(false);
    for (size_t i = 0; i < joined.size(); ++i) {
      SCOPED_TRACE("result " + std::to_string(i));
      FC_EXPECT_CLOSE(joined[i], separate[i], 1e-5, 1e-5);
    }
    EXPECT_THROW(att.forward(autograd::Variable(x0), {}, Attention::InputBias{&wrong, layout}), Error);
  }
  autograd::testing::expect_grads_match_fd(
      [&](const auto& v) {
        const Attention::InputBias ib{&feat, [](const autograd::Variable& b) {
                                         return autograd::unsqueeze(autograd::contiguous(autograd::permute(b, {2, 0, 1})), 0);
                                       }};
        return att.forward(v[0], {autograd::Variable(mask_bias)}, ib);
      },
      {x0});
}

}  // namespace
}  // namespace foldcore::nn
