// Template embedding: feature layouts against naive construction, the pointwise attention against
// naive math, masking, chunking, official keys, and parity with the reference: the template
// angle rows of the Evoformer's MSA input (evo_m rows S..S+T) and mask, and the pair entering
// the extra-MSA stack (extra_z = input embedding + recycling + template embedding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/structure/residue_constants.h"
#include "models/alphafold/evoformer/embedders.h"
#include "models/alphafold/evoformer/template.h"
#include "models/af2_template_parity.h"
#include "models/af2_test_util.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

namespace rc = data::rc;

TEST(Af2Template, PairFeatLayout) {
  TemplateConfig cfg;
  ASSERT_EQ(template_pair_feat_dim(cfg), 88);
  const int64_t n = 4, c = 88;
  Generator g(3);
  Tensor pos = randn({n, 37, 3}, g, 0.f, 8.f);
  std::vector<float> am(n * 37, 1.f);
  am[2 * 37 + rc::atom_order("C")] = 0.f;  // residue 2 lacks a backbone atom
  Tensor amask = Tensor::from_vector(am, {n, 37});
  Tensor aa = Tensor::from_vector_i64({0, 7, 21, 5}, {n});
  Tensor pb = pseudo_beta(aa, pos), pbm = Tensor::from_vector({1, 1, 1, 0}, {n});
  const auto f = template_pair_feat(aa, pb, pbm, pos, amask, cfg);
  ASSERT_EQ(f.shape(), Shape({n, n, c}));
  const auto v = f.to_vector();
  const auto dg = dgram_from_positions(pb, 3.25f, 50.75f, 39).to_vector();
  const int64_t aav[] = {0, 7, 21, 5};
  const float bb[] = {1, 1, 0, 1}, pm[] = {1, 1, 1, 0};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float* o = v.data() + (i * n + j) * c;
      const float m2 = bb[i] * bb[j];
      for (int b = 0; b < 39; ++b) EXPECT_EQ(o[b], dg[(i * n + j) * 39 + b] * m2);
      EXPECT_EQ(o[39], pm[i] * pm[j] * m2);
      for (int k = 0; k < 22; ++k) {
        EXPECT_EQ(o[40 + k], (k == aav[j] ? 1.f : 0.f) * m2) << i << "," << j;
        EXPECT_EQ(o[62 + k], (k == aav[i] ? 1.f : 0.f) * m2);
      }
      for (int d = 0; d < 3; ++d) EXPECT_EQ(o[84 + d], 0.f);  // unit vector off (model_1)
      EXPECT_EQ(o[87], m2);
    }
  EXPECT_THROW(template_pair_feat(aa, pb, pbm, pos.narrow(1, 0, 14).contiguous(), amask, cfg), Error);
}

TEST(Af2Template, UnitVectorsInBackboneFrame) {
  // Residue 0: CA at p, C at p + 1.5·x̂', N at p + (·)·ŷ' in a rotated frame; residue 1 elsewhere.
  TemplateConfig cfg;
  cfg.use_template_unit_vector = true;
  const int64_t n = 2;
  std::vector<float> x(n * 37 * 3, 0.f);
  const int in = rc::atom_order("N"), ica = rc::atom_order("CA"), ic = rc::atom_order("C");
  // Frame axes (rotation about z by 90°): e1 = ŷ, e2 = −x̂, e3 = ẑ.
  const float p0[3] = {1, 2, 3};
  auto set = [&](int r, int a, float px, float py, float pz) {
    x[(r * 37 + a) * 3 + 0] = px;
    x[(r * 37 + a) * 3 + 1] = py;
    x[(r * 37 + a) * 3 + 2] = pz;
  };
  set(0, ica, p0[0], p0[1], p0[2]);
  set(0, ic, p0[0], p0[1] + 1.5f, p0[2]);                 // along e1
  set(0, in, p0[0] - 1.2f, p0[1] - 0.5f, p0[2]);          // e2 component positive (−x̂)
  set(1, ica, p0[0] + 3.f, p0[1] + 4.f, p0[2] + 12.f);    // Δ = (3, 4, 12): local (4, −3, 12)
  set(1, ic, p0[0] + 3.f, p0[1] + 5.f, p0[2] + 12.f);
  set(1, in, p0[0] + 2.f, p0[1] + 4.f, p0[2] + 12.f);
  Tensor pos = Tensor::from_vector(x, {n, 37, 3});
  Tensor am = Tensor::full({n, 37}, 1.0, DType::f32);
  Tensor aa = Tensor::from_vector_i64({0, 0}, {n});
  const auto f = template_pair_feat(aa, pseudo_beta(aa, pos), Tensor::full({n}, 1.0, DType::f32), pos, am, cfg);
  const auto v = f.to_vector();
  const float* u01 = v.data() + (0 * n + 1) * 88 + 84;
  const double len = std::sqrt(1e-6 + 169.0);
  EXPECT_NEAR(u01[0], 4 / len, 1e-5);
  EXPECT_NEAR(u01[1], -3 / len, 1e-5);
  EXPECT_NEAR(u01[2], 12 / len, 1e-5);
  const float* u00 = v.data() + 84;  // self: zero vector
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(u00[d], 0.f, 1e-6);
}

TEST(Af2Template, AngleFeatAndMsaMask) {
  Generator g(8);
  const int64_t t = 2, n = 3;
  Tensor aa = Tensor::from_vector_i64({0, 21, 7, 3, 20, 1}, {t, n});
  Tensor sc = randn({t, n, 7, 2}, g), alt = randn({t, n, 7, 2}, g), mk = rand_uniform({t, n, 7}, g);
  const auto f = template_angle_feat(aa, sc, alt, mk);
  ASSERT_EQ(f.shape(), Shape({t, n, 57}));
  const auto v = f.to_vector(), scv = sc.to_vector(), altv = alt.to_vector(), mkv = mk.to_vector();
  const auto aav = aa.to_vector_i64();
  for (int64_t r = 0; r < t * n; ++r) {
    for (int k = 0; k < 22; ++k) EXPECT_EQ(v[r * 57 + k], k == aav[r] ? 1.f : 0.f);
    for (int q = 0; q < 14; ++q) {
      EXPECT_EQ(v[r * 57 + 22 + q], scv[r * 14 + q]);
      EXPECT_EQ(v[r * 57 + 36 + q], altv[r * 14 + q]);
    }
    for (int q = 0; q < 7; ++q) EXPECT_EQ(v[r * 57 + 50 + q], mkv[r * 7 + q]);
  }
  const auto m = template_msa_mask(mk);
  ASSERT_EQ(m.shape(), Shape({t, n}));
  for (int64_t r = 0; r < t * n; ++r) EXPECT_EQ(m.to_vector()[r], mkv[r * 7 + 2]);
}

TEST(Af2Template, PointwiseAttentionNaiveMaskAndChunks) {
  Env e;
  TemplateConfig cfg;
  cfg.c_t = 3;
  cfg.pointwise_att = {2, 2, false, 0.f};
  const int64_t c_z = 5, n = 3, nt = 3;
  TemplatePointwiseAttention att(e.scope("tpa"), c_z, cfg);
  e.ps.finalize();
  e.randomize(12);
  Generator g(13);
  Tensor z = randn({n, n, c_z}, g), t = randn({nt, n, n, 3}, g);
  Tensor mask = Tensor::from_vector({1, 0, 1}, {nt});
  autograd::NoGradGuard ng;
  const Tensor out = att.forward(Variable(z), Variable(t), mask).value();
  ASSERT_EQ(out.shape(), Shape({n, n, c_z}));
  auto p = [&](const std::string& name) { return e.ps.get("tpa/attention/" + name).value().to_vector(); };
  const auto wq = p("q/weight"), wk = p("k/weight"), wv = p("v/weight"), wo = p("output/weight"), bo = p("output/bias");
  const auto zv = z.to_vector(), tv = t.to_vector(), ov = out.to_vector();
  const int h = 2, d = 2;
  for (int64_t ij = 0; ij < n * n; ++ij) {
    std::vector<double> o(h * d, 0.0);
    for (int hh = 0; hh < h; ++hh) {
      std::vector<double> q(d, 0.0), logit(nt);
      for (int dd = 0; dd < d; ++dd)
        for (int c = 0; c < c_z; ++c) q[dd] += zv[ij * c_z + c] * wq[c * h * d + hh * d + dd];
      double mx = -1e300, s = 0;
      for (int64_t k = 0; k < nt; ++k) {
        double dot = 0;
        for (int dd = 0; dd < d; ++dd) {
          double kk = 0;
          for (int c = 0; c < 3; ++c) kk += tv[(k * n * n + ij) * 3 + c] * wk[c * h * d + hh * d + dd];
          dot += q[dd] * kk;
        }
        logit[k] = dot / std::sqrt(static_cast<double>(d)) + (mask.to_vector()[k] > 0 ? 0.0 : -1e9);
        mx = std::max(mx, logit[k]);
      }
      for (int64_t k = 0; k < nt; ++k) s += std::exp(logit[k] - mx);
      for (int64_t k = 0; k < nt; ++k) {
        const double a = std::exp(logit[k] - mx) / s;
        for (int dd = 0; dd < d; ++dd) {
          double vv = 0;
          for (int c = 0; c < 3; ++c) vv += tv[(k * n * n + ij) * 3 + c] * wv[c * h * d + hh * d + dd];
          o[hh * d + dd] += a * vv;
        }
      }
    }
    for (int c = 0; c < c_z; ++c) {
      double want = bo[c];
      for (int q = 0; q < h * d; ++q) want += o[q] * wo[q * c_z + c];
      EXPECT_NEAR(ov[ij * c_z + c], want, 1e-4);
    }
  }
  // Chunking over rows gives the same numbers.
  FC_EXPECT_CLOSE(att.forward(Variable(z), Variable(t), mask, 2).value(), out, 1e-6, 1e-6);
}

TEST(Af2Template, PointwiseAttentionGradient) {
  // d/dt and d/dz of a weighted sum through permute → attention → reshape. Softmax attention is
  // smooth; f32 central differences with eps 1e-2 have truncation ~1e-4 relative and rounding
  // ~1e-5 / eps: tolerance 3e-3.
  Env e;
  TemplateConfig cfg;
  cfg.c_t = 3;
  cfg.pointwise_att = {2, 2, false, 0.f};
  const int64_t c_z = 4, n = 3, nt = 2;
  TemplatePointwiseAttention att(e.scope("tpa"), c_z, cfg);
  e.ps.finalize();
  e.randomize(21);
  Generator g(22);
  Variable z(randn({n, n, c_z}, g), true), t(randn({nt, n, n, 3}, g), true);
  const Tensor mask = Tensor::from_vector({1, 1}, {nt});
  const Tensor w = randn({n, n, c_z}, g);
  autograd::backward(autograd::sum(autograd::mul(att.forward(z, t, mask), Variable(w)), {0, 1, 2}));
  auto loss = [&] {
    autograd::NoGradGuard ng;
    return testing::weighted_sum(att.forward(Variable(z.value()), Variable(t.value()), mask).value(), w);
  };
  testing::check_gradient(loss, t.value(), t.grad(), 1e-2, 3e-3, 3e-3, 24);
  testing::check_gradient(loss, z.value(), z.grad(), 1e-2, 3e-3, 3e-3, 24);
}

// A small template embedding: c_t 8, 2 heads of 4, `blocks` pair blocks.
TEST(Af2Template, EmbedderWithoutTemplatesIsZero) {
  Env e;
  const int64_t n = 3, c_z = 6;
  TemplateEmbedder emb(e.scope("te"), c_z, small_templates(1));
  e.ps.finalize();
  e.randomize(4);
  Generator g(1);
  TemplateInputs in;
  in.aatype = Tensor::zeros({2, n}, DType::i64);
  in.all_atom_positions = randn({2, n, 37, 3}, g, 0.f, 5.f);
  in.all_atom_mask = Tensor::full({2, n, 37}, 1.0, DType::f32);
  in.template_mask = Tensor::zeros({2}, DType::f32);
  autograd::NoGradGuard ng;
  Tensor z = randn({n, n, c_z}, g), pm = Tensor::full({n, n}, 1.0, DType::f32);
  EXPECT_EQ(max_abs(emb.forward(Variable(z), in, pm).value()), 0.0);
  in.template_mask = Tensor::from_vector({0, 1}, {2});
  const Tensor u = emb.forward(Variable(z), in, pm).value();
  ASSERT_EQ(u.shape(), Shape({n, n, c_z}));
  EXPECT_GT(max_abs(u), 0.0);
  FC_EXPECT_CLOSE(emb.forward(Variable(z), in, pm, 2).value(), u, 1e-5, 1e-5);  // chunked
  in.template_mask = Tensor::zeros({3}, DType::f32);
  EXPECT_THROW(emb.forward(Variable(z), in, pm), Error);
}

// Training (with autograd) runs the pair stack of the present templates only: a masked slot's
// key bias 1e9·(mask − 1) gives it a softmax weight of exactly 0 in fp32, so it adds nothing and
// its gradient is zero. Its features are not even read: NaN coordinates and atom masks in the
// masked slots (which make a computed stack NaN, and 0·NaN is NaN) leave the update and every
// gradient finite and bit for bit those of the same templates without the masked slots.
TEST(Af2Template, TrainingSkipsMaskedSlots) {
  Env e;
  const int64_t n = 5, c_z = 6;
  TemplateEmbedder emb(e.scope("te"), c_z, small_templates(1));
  e.ps.finalize();
  e.randomize(8);
  Generator g(9);
  const TemplateInputs all = random_template_inputs(n, {1, 0, 1, 0}, g);
  TemplateInputs poisoned = all;
  poisoned.all_atom_positions = all.all_atom_positions.clone();
  poisoned.all_atom_mask = all.all_atom_mask.clone();
  for (const int64_t k : {1, 3}) {
    poisoned.all_atom_positions.select(0, k).fill_(std::nanf(""));
    poisoned.all_atom_mask.select(0, k).fill_(std::nanf(""));  // NaN pair masks: a computed stack is NaN
  }
  const auto slots_0_2 = [](const Tensor& x) {  // [T, …] → x[{0, 2}]
    Shape shape = x.shape();
    shape[0] = 2;
    Tensor y = Tensor::empty(shape, x.dtype());
    y.select(0, 0).copy_(x.select(0, 0));
    y.select(0, 1).copy_(x.select(0, 2));
    return y;
  };
  TemplateInputs two;
  two.aatype = slots_0_2(all.aatype);
  two.all_atom_positions = slots_0_2(all.all_atom_positions);
  two.all_atom_mask = slots_0_2(all.all_atom_mask);
  two.template_mask = Tensor::from_vector({1, 1}, {2});
  const Tensor z0 = randn({n, n, c_z}, g), w = randn({n, n, c_z}, g);
  const Tensor pm = Tensor::full({n, n}, 1.0, DType::f32);
  struct Run {
    Tensor out, z_grad;
    std::map<std::string, Tensor> grads;
  };
  const auto run = [&](const TemplateInputs& in) {
    e.ps.zero_grad();
    Variable z(z0.clone(), true);
    const Variable out = emb.forward(z, in, pm);
    autograd::backward(autograd::sum(autograd::mul(out, Variable(w)), {0, 1, 2}));
    Run r{out.value().clone(), z.grad().clone(), {}};
    for (const auto& [name, grad] : e.ps.named_grads()) r.grads[name] = grad.clone();
    return r;
  };
  const Run a = run(poisoned), b = run(two);
  EXPECT_EQ(a.out.to_vector(), b.out.to_vector());
  EXPECT_EQ(a.z_grad.to_vector(), b.z_grad.to_vector());
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double gmax = 0;
  for (const auto& [name, grad] : a.grads) {
    SCOPED_TRACE(name);
    for (float v : grad.to_vector()) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(grad.to_vector(), b.grads.at(name).to_vector());
    gmax = std::max(gmax, max_abs(grad));
  }
  EXPECT_GT(gmax, 0.0);  // the present templates' stacks did receive gradients
  EXPECT_GT(max_abs(a.out), 0.0);
}

// Inference adds the embedding into the pair one template at a time (pair stack with in-place
// chunk updates; pointwise attention merged per template by attention_combine in one pass, or
// scores first and weighted values second in two passes): equal to z + forward(z) up to the
// merges' fp32 rounding, chunked or not, written into a copy of z or into z's own storage, with a
// template of mask 0 skipped and one of mask 0.5 (bias −5e8: weight exactly 0 in both) included;
// nothing is added when every template is masked. A gated pointwise attention (whose gate would
// read z while pass 2 writes it) runs two passes as one.
class Af2TemplateAddInto : public ::testing::TestWithParam<std::tuple<TemplatePasses, bool>> {};

TEST_P(Af2TemplateAddInto, EqualsForwardOneTemplateAtATime) {
  const auto [passes, gating] = GetParam();
  Env e;
  const int64_t n = 7, c_z = 6, t = 4;
  TemplateConfig cfg = small_templates(2);
  cfg.pointwise_att.gating = gating;
  TemplateEmbedder emb(e.scope("te"), c_z, cfg);
  EXPECT_EQ(emb.attention().two_pass_supported(), !gating);
  e.ps.finalize();
  e.randomize(6);
  Generator g(2);
  TemplateInputs in = random_template_inputs(n, {1, 0, 1, 0.5f}, g);
  autograd::NoGradGuard ng;
  const Tensor z = randn({n, n, c_z}, g);
  std::vector<float> pmv(n * n, 1.f);
  pmv[3] = 0.f;  // one masked pair
  const Tensor pm = Tensor::from_vector(pmv, {n, n});
  const Tensor want = autograd::add(Variable(z), emb.forward(Variable(z), in, pm)).value();
  for (const int64_t chunk : {0, 2, 3}) {
    SCOPED_TRACE(chunk);
    Tensor into = z.clone();
    emb.add_into(Variable(z), in, pm, chunk, into, passes);
    // Two merges (templates 0 and 2, and the 0.5 one) of O(1) fp32 values, or three projected
    // terms summed into z instead of one: a few ulps.
    FC_EXPECT_CLOSE(into, want, 1e-5, 1e-5);
    Tensor self = z.clone();
    // One pass reads z row by row before each row is written; two passes read z only in pass 1.
    emb.add_into(Variable(self), in, pm, chunk, self, passes);
    FC_EXPECT_CLOSE(self, want, 1e-5, 1e-5);
  }
  // One unmasked template: two passes run as one (nothing to save), bit for bit.
  in.template_mask = Tensor::from_vector({0, 0, 1, 0}, {t});
  const Tensor one_want = autograd::add(Variable(z), emb.forward(Variable(z), in, pm)).value();
  Tensor a = z.clone(), b = z.clone();
  emb.add_into(Variable(z), in, pm, 3, a, TemplatePasses::one);
  emb.add_into(Variable(z), in, pm, 3, b, passes);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  FC_EXPECT_CLOSE(a, one_want, 1e-5, 1e-5);
  in.template_mask = Tensor::zeros({t}, DType::f32);
  Tensor into = z.clone();
  emb.add_into(Variable(z), in, pm, 2, into, passes);
  EXPECT_EQ(into.to_vector(), z.to_vector());
}

INSTANTIATE_TEST_SUITE_P(Passes, Af2TemplateAddInto,
                         ::testing::Values(std::tuple{TemplatePasses::one, false},
                                           std::tuple{TemplatePasses::two, false},
                                           std::tuple{TemplatePasses::two, true}),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == TemplatePasses::one ? "one" : "two") +
                                  (std::get<1>(info.param) ? "_gated" : "");
                         });

// The two-pass pieces on their own: the scores are q·k/√d + 1e9·(mask − 1) per (i, j, head), the
// weights their softmax over the templates (chunked or not, the same), and add_weighted adds
// Wo·(w ⊙ v) (+ bo once) into the target.
TEST(Af2Template, TwoPassScoresAndWeightsMatchNaiveMath) {
  Env e;
  const int64_t n = 5, c_z = 6;
  const TemplateConfig cfg = small_templates(1);
  TemplatePointwiseAttention att(e.scope("pa"), c_z, cfg);
  e.ps.finalize();
  e.randomize(9);
  Generator g(4);
  autograd::NoGradGuard ng;
  const Tensor z = randn({n, n, c_z}, g), t0 = randn({n, n, cfg.c_t}, g), t1 = randn({n, n, cfg.c_t}, g);
  const int64_t h = cfg.pointwise_att.num_head, d = cfg.pointwise_att.head_dim;
  Tensor scores = Tensor::empty({n * n, h, 2}, DType::f32);
  att.add_scores(Variable(z), Variable(t0), 1.f, 2, scores, 0);
  att.add_scores(Variable(z), Variable(t1), 0.75f, 0, scores, 1);
  // Naive: q = z·Wq, k = t·Wk, v = t·Wv per head, out = (w ⊙ v)·Wo + bo, in double from the
  // module's parameters.
  const auto params = e.ps.named_values();
  auto param = [&](const std::string& name) {
    const auto it = params.find("pa/attention/" + name);
    EXPECT_NE(it, params.end()) << name;
    return it == params.end() ? std::vector<float>{} : it->second.to_vector();
  };
  // x [P, c_in] times w [c_in, c_out], as a [P, c_out] row-major vector.
  auto matmul = [](const std::vector<float>& x, const std::vector<float>& w, int64_t c_in) {
    const int64_t c_out = static_cast<int64_t>(w.size()) / c_in, rows = static_cast<int64_t>(x.size()) / c_in;
    std::vector<double> y(static_cast<size_t>(rows * c_out), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < c_in; ++i)
        for (int64_t o = 0; o < c_out; ++o) y[r * c_out + o] += static_cast<double>(x[r * c_in + i]) * w[i * c_out + o];
    return y;
  };
  const std::vector<double> qv = matmul(z.to_vector(), param("q/weight"), c_z),
                            k0 = matmul(t0.to_vector(), param("k/weight"), cfg.c_t),
                            k1 = matmul(t1.to_vector(), param("k/weight"), cfg.c_t);
  const std::vector<float> sv = scores.to_vector();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t p = 0; p < n * n; ++p)
    for (int64_t hh = 0; hh < h; ++hh) {
      double s0 = 0, s1 = 0;
      for (int64_t c = 0; c < d; ++c) {
        s0 += qv[p * h * d + hh * d + c] * k0[p * h * d + hh * d + c];
        s1 += qv[p * h * d + hh * d + c] * k1[p * h * d + hh * d + c];
      }
      EXPECT_NEAR(sv[(p * h + hh) * 2], s0 * scale, 1e-4);
      EXPECT_NEAR(sv[(p * h + hh) * 2 + 1], s1 * scale + 1e9 * (0.75 - 1), 1e-4 * 2.5e8);
    }
  Tensor chunked = scores.clone();
  TemplatePointwiseAttention::scores_to_weights(scores, 0);
  TemplatePointwiseAttention::scores_to_weights(chunked, 2 * n + 3);  // blocks of 13 positions
  EXPECT_EQ(scores.to_vector(), chunked.to_vector());
  const std::vector<float> wv = scores.to_vector();
  for (int64_t r = 0; r < n * n * h; ++r) {
    EXPECT_FLOAT_EQ(wv[r * 2], 1.f);  // the 0.75 template's bias −2.5e8: weight exactly 0
    EXPECT_EQ(wv[r * 2 + 1], 0.f);
  }
  // Weights (1, 0): t0's values projected, with the output bias once.
  Tensor into = Tensor::zeros({n, n, c_z}, DType::f32);
  att.add_weighted(Variable(t0), scores, 0, true, 2, into);
  att.add_weighted(Variable(t1), scores, 1, false, 0, into);
  const std::vector<double> v0 = matmul(t0.to_vector(), param("v/weight"), cfg.c_t);
  std::vector<float> v0f(v0.begin(), v0.end());
  const std::vector<double> out = matmul(v0f, param("output/weight"), h * d);
  const std::vector<float> bo = param("output/bias"), got = into.to_vector();
  for (int64_t p = 0; p < n * n; ++p)
    for (int64_t c = 0; c < c_z; ++c) EXPECT_NEAR(got[p * c_z + c], out[p * c_z + c] + bo[c], 1e-4) << p << " " << c;
  EXPECT_THROW(att.add_scores(Variable(z), Variable(t0), 1.f, 0, scores, 2), Error);  // slot out of range
  EXPECT_THROW(att.add_scores(Variable(z), Variable(t0), 0.f, 0, scores, 0), Error);  // masked template
}

using template_test::run_parity;

TEST(Af2Template, ParityWithReference) { run_parity(Device::cpu()); }

}  // namespace
}  // namespace foldcore::af2
