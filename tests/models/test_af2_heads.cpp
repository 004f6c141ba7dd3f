// Output heads: official parameter names/shapes, parity with the reference (OpenFold fp32 on the
// reference weights) from the reference representations, gradients, and input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/heads/confidence.h"
#include "models/alphafold/heads/heads.h"
#include "models/af2_heads_test_util.h"
#include "models/af2_test_util.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

using heads_test::expect_parity;
using heads_test::ref;

TEST(Af2Heads, ParityWithReference) {
  Env e;
  Af2Config cfg;  // model_1_ptm widths: the reference has full widths
  Af2Heads heads(e.scope(), cfg);
  heads.train(false);
  e.ps.finalize();
  Af2ParamTable table;
  heads.add_af2_params(table);
  EXPECT_EQ(table.size(), 16u);  // distogram 2, masked msa 2, lddt 8, resolved 2, PAE 2
  EXPECT_EQ(load_af2_params(table, testing::shared_dir() + "/af2/ref/params.npz", {.allow_unused = true}), 16u);

  autograd::NoGradGuard no_grad;
  HeadInputs in;
  in.msa = Variable(ref("msa"));
  in.pair = Variable(ref("pair"));
  in.single = Variable(ref("single"));
  in.sm_single = Variable(ref("sm_single"));
  const HeadOutputs out = heads.forward(in);
  expect_parity(out.distogram_logits.value(), ref("distogram_logits"));
  expect_parity(out.masked_msa_logits.value(), ref("masked_msa_logits"));
  expect_parity(out.lddt_logits.value(), ref("lddt_logits"));
  expect_parity(out.experimentally_resolved_logits.value(), ref("experimentally_resolved_logits"));
  expect_parity(out.tm_logits.value(), ref("tm_logits"));

  // Confidence from our logits: pLDDT within 1e-3 (absolute, on a 0–100 scale; logit errors
  // ~1e-5 move the expectation by far less), PAE within 1e-4 Å, pTM within 1e-5.
  FC_EXPECT_CLOSE(compute_plddt(out.lddt_logits.value()), ref("plddt"), 1e-3, 0);
  const auto pae = compute_predicted_aligned_error(out.tm_logits.value(), cfg.heads.pae_max_error_bin);
  FC_EXPECT_CLOSE(pae.predicted_aligned_error, ref("predicted_aligned_error"), 1e-4, 0);
  FC_EXPECT_CLOSE(pae.aligned_confidence_probs, ref("aligned_confidence_probs"), 1e-6, 1e-4);
  EXPECT_NEAR(pae.max_predicted_aligned_error, ref("max_predicted_aligned_error").item(), 1e-6);
  EXPECT_NEAR(predicted_tm_score(out.tm_logits.value()), ref("ptm_score").item(), 1e-5);
}

TEST(Af2Heads, PairHeadsByRowsEqualTheWholeHeads) { heads_test::check_pair_heads_by_rows(Device::cpu(), 1e-6); }

TEST(Af2Heads, OfficialKeysMatchManifest) {
  // Every key the heads register exists in the official model_1_ptm manifest with that size.
  Env e;
  Af2Heads heads(e.scope(), Af2Config{});
  e.ps.finalize();
  Af2ParamTable table;
  heads.add_af2_params(table);
  const data::NpzReader npz(testing::shared_dir() + "/af2/ref/params.npz");
  int n = 0;
  for (const auto& entry : table.entries()) {
    const auto a = npz.read(entry.key);
    EXPECT_EQ(a.numel(), entry.target.numel()) << entry.key;
    ++n;
  }
  EXPECT_EQ(n, 16);
  Af2Config no_ptm;
  no_ptm.heads.ptm = false;
  Env e2;
  Af2Heads heads2(e2.scope(), no_ptm);
  e2.ps.finalize();
  Af2ParamTable t2;
  heads2.add_af2_params(t2);
  EXPECT_EQ(t2.size(), 14u);
  EXPECT_EQ(heads2.predicted_aligned_error(), nullptr);
}

TEST(Af2Heads, SmallShapesNaiveMathAndGradient) {
  // Odd sizes, small widths: distogram symmetry and the pLDDT MLP against naive loops.
  Env e;
  HeadsConfig hc;
  hc.distogram_bins = 5;
  hc.lddt_bins = 7;
  hc.lddt_channels = 6;
  DistogramHead dist(e.scope(), 3, hc);
  nn::Scope s2 = e.scope();
  s2.prefix = "lddt";
  PredictedLddtHead lddt(s2, 4, hc);
  e.ps.finalize();
  Generator g(3);
  // Non-trivial weights (the AF2 'final' init is zero).
  for (auto [name, v] : e.ps.named_values()) v.copy_(randn(v.shape(), g, 0.f, 0.5f));

  const int n = 3;
  Tensor pair = randn({n, n, 3}, g);
  const Tensor logits = dist.forward(Variable(pair)).value();
  const auto lv = logits.to_vector(), pv = pair.to_vector();
  const auto w = e.ps.get("half_logits/weight").value().to_vector();
  const auto bvec = e.ps.get("half_logits/bias").value().to_vector();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < 5; ++k) {
        double want = 2 * bvec[k];
        for (int c = 0; c < 3; ++c) want += (pv[(i * n + j) * 3 + c] + pv[(j * n + i) * 3 + c]) * w[c * 5 + k];
        EXPECT_NEAR(lv[(i * n + j) * 5 + k], want, 1e-5);
        EXPECT_EQ(lv[(i * n + j) * 5 + k], lv[(j * n + i) * 5 + k]);
      }

  // pLDDT head: LN (eps 1e-5) → relu(W0) → relu(W1) → W2, naive in double.
  Tensor s = randn({n, 4}, g);
  const auto sv = s.to_vector();
  auto get = [&](const std::string& name) { return e.ps.get("lddt/" + name).value().to_vector(); };
  const auto ls = get("input_layer_norm/scale"), lo = get("input_layer_norm/offset");
  const auto w0 = get("act_0/weight"), b0 = get("act_0/bias"), w1 = get("act_1/weight"), b1 = get("act_1/bias");
  const auto w2 = get("logits/weight"), b2 = get("logits/bias");
  const auto got = lddt.forward(Variable(s)).value().to_vector();
  for (int i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int c = 0; c < 4; ++c) mu += sv[i * 4 + c] / 4.0;
    for (int c = 0; c < 4; ++c) var += (sv[i * 4 + c] - mu) * (sv[i * 4 + c] - mu) / 4.0;
    std::vector<double> h(4), a0(6), a1(6);
    for (int c = 0; c < 4; ++c) h[c] = (sv[i * 4 + c] - mu) / std::sqrt(var + 1e-5) * ls[c] + lo[c];
    for (int o = 0; o < 6; ++o) {
      a0[o] = b0[o];
      for (int c = 0; c < 4; ++c) a0[o] += h[c] * w0[c * 6 + o];
      a0[o] = std::max(a0[o], 0.0);
    }
    for (int o = 0; o < 6; ++o) {
      a1[o] = b1[o];
      for (int c = 0; c < 6; ++c) a1[o] += a0[c] * w1[c * 6 + o];
      a1[o] = std::max(a1[o], 0.0);
    }
    for (int o = 0; o < 7; ++o) {
      double want = b2[o];
      for (int c = 0; c < 6; ++c) want += a1[c] * w2[c * 7 + o];
      EXPECT_NEAR(got[i * 7 + o], want, 1e-4);
    }
  }

  // Gradient of a weighted sum of distogram logits w.r.t. the pair (finite differences in f32:
  // the map is linear, so central differences are exact up to rounding; eps 1e-2, tol 2e-3).
  Variable px(pair.clone(), true);
  Tensor wsum = randn({n, n, 5}, g);
  Variable loss = autograd::sum(autograd::mul(dist.forward(px), Variable(wsum)), {0, 1, 2});
  autograd::backward(loss);
  testing::check_gradient(
      [&] {
        autograd::NoGradGuard ng;
        return testing::weighted_sum(dist.forward(Variable(px.value())).value(), wsum);
      },
      px.value(), px.grad(), 1e-2, 2e-3, 2e-3);
}

TEST(Af2Heads, BadInputsAreClearErrors) {
  Env e;
  Af2Heads heads(e.scope(), Af2Config{});
  e.ps.finalize();
  autograd::NoGradGuard ng;
  EXPECT_THROW(heads.distogram().forward(Variable(Tensor::zeros({4, 5, 128}, DType::f32))), Error);
  EXPECT_THROW(heads.distogram().forward(Variable(Tensor::zeros({4, 4, 64}, DType::f32))), Error);
  EXPECT_THROW(heads.predicted_lddt().forward(Variable(Tensor::zeros({4, 256}, DType::f32))), Error);
  EXPECT_THROW(heads.masked_msa().forward(Variable(Tensor::zeros({4, 256}, DType::f32))), Error);
}

}  // namespace
}  // namespace foldcore::af2
