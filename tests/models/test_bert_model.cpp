// BERT model: shapes, the loss against a hand computation of the heads, finite-difference
// gradients of the whole model, and packed ≡ unpacked.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/autograd.h"
#include "core/random.h"
#include "models/bert/bert_batch_builder.h"
#include "models/bert/bert_model.h"
#include "bert_test_util.h"
#include "test_util.h"

namespace foldcore::bert {
namespace {

std::vector<float> rows_of(const Tensor& t, int64_t row_start, int64_t rows) {
  return t.narrow(0, row_start, rows).contiguous().to_vector();
}

TEST(BertModel, ShapesAndParameterCount) {
  const BertModelConfig c = tiny_config();
  Model m(c);
  Generator g(1);
  const BertBatch b = make_unpacked_batch({random_sequence(12, c.vocab_size, g, 2), random_sequence(9, c.vocab_size, g, 3)},
                                          16, 4);
  const BertOutputs o = m.bert.forward(b, true);
  EXPECT_EQ(o.sequence.shape(), Shape({2, 16, c.hidden}));
  EXPECT_EQ(o.mlm_logits.shape(), Shape({5, c.vocab_size}));  // only the 2 + 3 real predictions
  EXPECT_EQ(o.nsp_logits.shape(), Shape({2, 2}));
  EXPECT_EQ(o.mlm_count, 5);
  EXPECT_EQ(o.loss.numel(), 1);
  // Embeddings V·d + P·d + 2·d + LN 2d; per layer 4(d²+d) + 2 LN·2d + d·ff + ff + ff·d + d;
  // MLM head d² + d + 2d + V (decoder tied); pooler d² + d; NSP 2d + 2.
  const int64_t d = c.hidden, ff = c.ffn, v = c.vocab_size;
  const int64_t layer = 4 * (d * d + d) + 4 * d + 2 * d * ff + ff + d;
  const int64_t expected = (v + c.max_positions + 2) * d + 2 * d + c.num_layers * layer + (d * d + 3 * d + v) +
                           (d * d + d) + (2 * d + 2);
  EXPECT_EQ(m.bert.num_parameters(), expected);
  EXPECT_THROW(m.bert.forward(make_unpacked_batch({random_sequence(30, c.vocab_size, g, 1)}, 30, 2)), Error);
}

// The heads and the loss recomputed in double from the encoder output and the parameter values.
TEST(BertModel, LossMatchesHandComputation) {
  const BertModelConfig c = tiny_config();
  Model m(c);
  Generator g(2);
  const BertBatch b = make_unpacked_batch({random_sequence(14, c.vocab_size, g, 3), random_sequence(10, c.vocab_size, g, 2)},
                                          16, 4);
  const BertOutputs o = m.bert.forward(b, true);
  const int64_t d = c.hidden, v = c.vocab_size, l = 16;
  const std::vector<float> seq = o.sequence.value().contiguous().to_vector();
  auto P = [&](const std::string& n) { return m.params.get(n).value().contiguous().to_vector(); };
  const auto wt = P("mlm/transform/weight"), bt = P("mlm/transform/bias"), gs = P("mlm/layer_norm/scale"),
             go = P("mlm/layer_norm/offset"), emb = P("embeddings/word_embeddings"), ob = P("mlm/output_bias"),
             wp = P("pooler/weight"), bp = P("pooler/bias"), wn = P("nsp/weight"), bn = P("nsp/bias");
  auto dense = [&](const std::vector<double>& x, const std::vector<float>& w, const std::vector<float>& bias,
                   int64_t out) {
    std::vector<double> y(static_cast<size_t>(out));
    for (int64_t j = 0; j < out; ++j) {
      double s = bias[static_cast<size_t>(j)];
      for (int64_t i = 0; i < d; ++i) s += x[static_cast<size_t>(i)] * w[static_cast<size_t>(i * out + j)];
      y[static_cast<size_t>(j)] = s;
    }
    return y;
  };
  auto ce = [](const std::vector<double>& z, int64_t label) {
    double mx = z[0];
    for (double x : z) mx = std::max(mx, x);
    double s = 0;
    for (double x : z) s += std::exp(x - mx);
    return mx + std::log(s) - z[static_cast<size_t>(label)];
  };
  auto row = [&](int64_t flat) {
    return std::vector<double>(seq.begin() + flat * d, seq.begin() + (flat + 1) * d);
  };
  const std::vector<int64_t> mpos = b.masked_lm_positions.to_vector_i64(), mids = b.masked_lm_ids.to_vector_i64();
  const std::vector<float> mw = b.masked_lm_weights.to_vector();
  double mlm = 0;
  int n = 0;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < 4; ++j) {
      const size_t k = static_cast<size_t>(r * 4 + j);
      if (mw[k] == 0.f) continue;
      std::vector<double> h = dense(row(r * l + mpos[k]), wt, bt, d);
      for (double& x : h) x = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
      double mean = 0, var = 0;
      for (double x : h) mean += x / static_cast<double>(d);
      for (double x : h) var += (x - mean) * (x - mean) / static_cast<double>(d);
      for (int64_t i = 0; i < d; ++i)
        h[static_cast<size_t>(i)] = (h[static_cast<size_t>(i)] - mean) / std::sqrt(var + c.ln_eps) * gs[static_cast<size_t>(i)] +
                                    go[static_cast<size_t>(i)];
      std::vector<double> z(static_cast<size_t>(v));
      for (int64_t t = 0; t < v; ++t) {
        double s = ob[static_cast<size_t>(t)];
        for (int64_t i = 0; i < d; ++i) s += h[static_cast<size_t>(i)] * emb[static_cast<size_t>(t * d + i)];
        z[static_cast<size_t>(t)] = s;
      }
      mlm += ce(z, mids[k]);
      ++n;
    }
  mlm /= n;
  const std::vector<int64_t> nl = b.nsp_labels.to_vector_i64();
  double nsp = 0;
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<double> p = dense(row(r * l), wp, bp, d);
    for (double& x : p) x = std::tanh(x);
    nsp += ce(dense(p, wn, bn, 2), nl[static_cast<size_t>(r)]) / 2;
  }
  // f32 forward vs double reference on O(1) values: 1e-5 relative.
  EXPECT_NEAR(o.mlm_loss.value().item(), mlm, 1e-5 * std::abs(mlm) + 1e-6);
  EXPECT_NEAR(o.nsp_loss.value().item(), nsp, 1e-5 * std::abs(nsp) + 1e-6);
  EXPECT_NEAR(o.loss.value().item(), mlm + nsp, 1e-5 * (mlm + nsp) + 1e-6);
  EXPECT_GE(o.mlm_correct, 0);
  EXPECT_LE(o.mlm_correct, 5);
}

// Central differences of the whole model's loss against backward, on sampled coordinates of
// parameters from every part (tied embedding, attention, FFN, LayerNorm, both heads). f32
// forward, eps 1e-2: truncation error O(eps²·f''') ~ 1e-4 and rounding ~1e-7/eps ~ 1e-5 on a loss
// of ~4, so atol 5e-4 + rtol 2e-2 separates real errors (wrong terms are O(grad)) from noise.
TEST(BertModel, GradientMatchesFiniteDifferences) {
  BertModelConfig c = tiny_config();
  c.hidden = 8;
  c.num_heads = 2;
  c.ffn = 16;
  Model m(c);
  Generator g(3);
  const BertBatch b = make_unpacked_batch({random_sequence(10, c.vocab_size, g, 3), random_sequence(7, c.vocab_size, g, 2)},
                                          12, 4);
  m.params.zero_grad();
  autograd::backward(m.bert.forward(b).loss);
  auto loss = [&] {
    autograd::NoGradGuard ng;
    return static_cast<double>(m.bert.forward(b).loss.value().item());
  };
  for (const char* name : {"embeddings/word_embeddings", "embeddings/position_embeddings",
                           "embeddings/layer_norm/scale", "encoder/layer_0/attention/q/weight",
                           "encoder/layer_0/attention/k/bias", "encoder/layer_1/ffn/fc1/weight",
                           "encoder/layer_1/ffn_layer_norm/offset", "mlm/transform/weight", "mlm/output_bias",
                           "pooler/weight", "nsp/bias"}) {
    SCOPED_TRACE(name);
    const autograd::Variable& p = m.params.get(name);
    testing::check_gradient(loss, p.value(), p.grad(), 1e-2, 5e-4, 2e-2, 8);
  }
}

// Three sequences, unpacked (3 rows) and packed (2 rows: two sequences share row 0): the same
// encoder outputs per token, the same logits and the same loss.
TEST(BertModel, PackedEqualsUnpacked) {
  BertModelConfig c = tiny_config();
  c.init_std = 0.3f;  // large weights: attention far from uniform, so leaks across sequences show
  Model m(c);
  Generator g(4);
  const BertSequence s0 = random_sequence(9, c.vocab_size, g, 2), s1 = random_sequence(6, c.vocab_size, g, 1),
                     s2 = random_sequence(13, c.vocab_size, g, 3);
  const BertBatch unpacked = make_unpacked_batch({s0, s1, s2}, 16, 4);
  const BertBatch packed = make_packed_batch({{s0, s1}, {s2}}, 16, 4);
  const BertOutputs u = m.bert.forward(unpacked, true), p = m.bert.forward(packed, true);
  const Tensor us = u.sequence.value().reshape({48, c.hidden}), ps = p.sequence.value().reshape({32, c.hidden});
  // f32; the packed rows differ only in which keys are skipped: 1e-4 on O(1) values.
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << i;
  };
  close(rows_of(ps, 0, 9), rows_of(us, 0, 9));     // s0
  close(rows_of(ps, 9, 6), rows_of(us, 16, 6));    // s1 (after s0 in row 0)
  close(rows_of(ps, 16, 13), rows_of(us, 32, 13));  // s2
  close(p.mlm_logits.value().to_vector(), u.mlm_logits.value().to_vector());
  close(p.nsp_logits.value().to_vector(), u.nsp_logits.value().to_vector());
  EXPECT_NEAR(p.loss.value().item(), u.loss.value().item(), 1e-4);
  EXPECT_EQ(p.mlm_correct, u.mlm_correct);
  // Without cu_seqlens the two sequences of row 0 would see each other: the outputs must differ.
  BertBatch leaky = packed;
  leaky.packed = false;
  leaky.cu_seqlens = Tensor();
  const BertOutputs lo = m.bert.forward(leaky);
  const std::vector<float> a = rows_of(lo.sequence.value().reshape({32, c.hidden}), 9, 6), e = rows_of(us, 16, 6);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - e[i])));
  EXPECT_GT(worst, 1e-3);  // measured ~4e-3: 40× the equivalence tolerance
}

}  // namespace
}  // namespace foldcore::bert
