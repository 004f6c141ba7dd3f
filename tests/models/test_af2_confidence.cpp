// Confidence metrics (pLDDT, PAE, pTM): against naive math on small hand-checkable inputs, and
// against the reference outputs (OpenFold, fp32) computed from the reference logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/random.h"
#include "data_pipeline/formats/npy.h"
#include "models/alphafold/heads/confidence.h"
#include "test_util.h"

namespace foldcore::af2 {
namespace {

Tensor ref(const std::string& name) {
  static const data::NpzReader npz(testing::shared_dir() + "/af2/ref/outputs.npz");
  return npz.read(name).to_tensor();
}

TEST(Af2Confidence, PlddtIsExpectedBinCentreTimes100) {
  // Uniform logits: mean of the centres (b+½)/B over b = ½ → 50. A dominant bin k → 100·(k+½)/B.
  Tensor uniform = Tensor::zeros({3, 50}, DType::f32);
  for (float v : compute_plddt(uniform).to_vector()) EXPECT_NEAR(v, 50.f, 1e-4f);
  std::vector<float> peaked(2 * 5, -1e4f);
  peaked[0 * 5 + 4] = 0.f;  // row 0: last of 5 bins → 90
  peaked[1 * 5 + 1] = 0.f;  // row 1: bin 1 → 30
  const auto p = compute_plddt(Tensor::from_vector(peaked, {2, 5})).to_vector();
  EXPECT_NEAR(p[0], 90.f, 1e-4f);
  EXPECT_NEAR(p[1], 30.f, 1e-4f);
  // Random logits with an odd bin count against the direct formula.
  Generator g(7);
  Tensor x = randn({4, 3, 7}, g);
  const auto xv = x.to_vector();
  const auto got = compute_plddt(x);
  ASSERT_EQ(got.shape(), Shape({4, 3}));
  const auto gv = got.to_vector();
  for (int r = 0; r < 12; ++r) {
    double z = 0, e = 0;
    for (int k = 0; k < 7; ++k) z += std::exp(xv[r * 7 + k]);
    for (int k = 0; k < 7; ++k) e += std::exp(xv[r * 7 + k]) / z * (k + 0.5) / 7.0;
    EXPECT_NEAR(gv[r], 100 * e, 1e-4);
  }
}

TEST(Af2Confidence, PaeBinCentres) {
  // AF2: breaks linspace(0, 31, 63) (step ½) → centres 0.25, 0.75, …, 31.25 and 31.75.
  const auto c = pae_bin_centers(31.0, 64);
  ASSERT_EQ(c.size(), 64u);
  EXPECT_DOUBLE_EQ(c[0], 0.25);
  EXPECT_DOUBLE_EQ(c[62], 31.25);
  EXPECT_DOUBLE_EQ(c[63], 31.75);
  EXPECT_THROW(pae_bin_centers(31.0, 2), Error);
}

TEST(Af2Confidence, PaeAndPtmNaive) {
  const int n = 5, b = 9;
  Generator g(11);
  Tensor x = randn({n, n, b}, g);
  const auto xv = x.to_vector();
  const auto c = pae_bin_centers(7.0, b);  // breaks linspace(0, 7, 8), step 1: 0.5 … 7.5, 8.5
  EXPECT_DOUBLE_EQ(c[b - 1], 8.5);
  const auto pae = compute_predicted_aligned_error(x, 7.0);
  EXPECT_FLOAT_EQ(pae.max_predicted_aligned_error, 8.5f);
  const auto probs = pae.aligned_confidence_probs.to_vector();
  const auto pv = pae.predicted_aligned_error.to_vector();
  // Naive pTM with weights w: n_eff = max(Σw, 19) = 19 → d0 = 1.24·4^(1/3) − 1.8.
  const std::vector<float> w = {1, 0, 1, 1, 1};
  const double d0 = 1.24 * std::cbrt(4.0) - 1.8;
  std::vector<double> per(n);
  for (int i = 0; i < n; ++i) {
    double num = 0, den = 0;
    for (int j = 0; j < n; ++j) {
      double z = 0, e = 0, tm = 0;
      for (int k = 0; k < b; ++k) z += std::exp(xv[(i * n + j) * b + k]);
      for (int k = 0; k < b; ++k) {
        const double p = std::exp(xv[(i * n + j) * b + k]) / z;
        EXPECT_NEAR(probs[(i * n + j) * b + k], p, 1e-6);
        e += p * c[k];
        tm += p / (1 + c[k] * c[k] / (d0 * d0));
      }
      EXPECT_NEAR(pv[i * n + j], e, 1e-5);
      num += tm * w[i] * w[j];
      den += w[i] * w[j];
    }
    per[i] = num / (1e-8 + den);
  }
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (per[i] * w[i] > per[best] * w[best]) best = i;
  EXPECT_NEAR(predicted_tm_score(x, Tensor::from_vector(w, {n}), 7.0), per[best], 1e-6);
  EXPECT_GT(per[best], 0.0);
  // A masked-out residue's row never wins, even if its own score is the largest.
  std::vector<float> only1(n, 0.f);
  only1[3] = 1.f;
  double num3 = 0;
  {
    double z = 0;
    for (int k = 0; k < b; ++k) z += std::exp(xv[(3 * n + 3) * b + k]);
    for (int k = 0; k < b; ++k) num3 += std::exp(xv[(3 * n + 3) * b + k]) / z / (1 + c[k] * c[k] / (d0 * d0));
  }
  EXPECT_NEAR(predicted_tm_score(x, Tensor::from_vector(only1, {n}), 7.0), num3 / (1 + 1e-8), 1e-6);
  EXPECT_THROW(predicted_tm_score(x, Tensor::zeros({n + 1}, DType::f32), 7.0), Error);
  EXPECT_THROW(compute_predicted_aligned_error(Tensor::zeros({3, 4, 9}, DType::f32)), Error);
}

TEST(Af2Confidence, MatchesReferenceFromReferenceLogits) {
  // The reference computed these in fp32 from its own logits; we compute in double and round:
  // differences are float rounding (≤ ~1e-6 relative), so 1e-5 relative bounds are safe yet
  // would catch any wrong bin centre (a ½-bin shift moves PAE by 0.25 Å) or d0.
  const Tensor lddt_logits = ref("lddt_logits"), tm_logits = ref("tm_logits");
  FC_EXPECT_CLOSE(compute_plddt(lddt_logits), ref("plddt"), 1e-4, 1e-5);
  const auto pae = compute_predicted_aligned_error(tm_logits);
  FC_EXPECT_CLOSE(pae.aligned_confidence_probs, ref("aligned_confidence_probs"), 1e-6, 1e-5);
  FC_EXPECT_CLOSE(pae.predicted_aligned_error, ref("predicted_aligned_error"), 1e-4, 1e-5);
  EXPECT_NEAR(pae.max_predicted_aligned_error, ref("max_predicted_aligned_error").item(), 1e-6);
  const Tensor seq_mask = Tensor::full({tm_logits.size(0)}, 1.0, DType::f32);
  EXPECT_NEAR(predicted_tm_score(tm_logits, seq_mask), ref("ptm_score").item(), 1e-6);
  EXPECT_NEAR(predicted_tm_score(tm_logits), ref("ptm_score").item(), 1e-6);
}

// PaeStream over blocks of rows, in any order and block sizes, gives the whole-array functions'
// results bit for bit (each pair's softmax is the same double computation; each row's pTM sum runs
// over j in j's order); a row added twice, rows outside N, a wrong shape or an incomplete stream
// are refused.
TEST(Af2Confidence, PaeStreamByBlocksEqualsTheWholeArray) {
  const int64_t n = 23, b = 16;
  Generator g(11);
  const Tensor logits = randn({n, n, b}, g, 0.f, 3.f);
  std::vector<float> wv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) wv[i] = i % 5 == 0 ? 0.f : 1.f;
  const Tensor w = Tensor::from_vector(wv, {n});
  const PredictedAlignedError whole = compute_predicted_aligned_error(logits, 7.0);
  const float ptm = predicted_tm_score(logits, w, 7.0);
  for (const int64_t rows : {int64_t{1}, int64_t{4}, n}) {
    SCOPED_TRACE(rows);
    PaeStream s(n, b, 7.0, w, /*keep_probs=*/true);
    std::vector<int64_t> starts;
    for (int64_t i0 = 0; i0 < n; i0 += rows) starts.push_back(i0);
    std::reverse(starts.begin(), starts.end());  // any order
    for (const int64_t i0 : starts) {
      EXPECT_FALSE(s.complete());
      s.add_rows(i0, logits.narrow(0, i0, std::min(rows, n - i0)));
    }
    ASSERT_TRUE(s.complete());
    const PredictedAlignedError r = s.result();
    EXPECT_EQ(r.predicted_aligned_error.to_vector(), whole.predicted_aligned_error.to_vector());
    EXPECT_EQ(r.aligned_confidence_probs.to_vector(), whole.aligned_confidence_probs.to_vector());
    EXPECT_EQ(r.max_predicted_aligned_error, whole.max_predicted_aligned_error);
    EXPECT_EQ(s.ptm(), ptm);
  }
  // bf16 logits stream as their f32 values.
  PaeStream s16(n, b, 7.0, {}, false);
  s16.add_rows(0, logits.to(DType::bf16));
  EXPECT_EQ(s16.ptm(), predicted_tm_score(logits.to(DType::bf16).to(DType::f32), {}, 7.0));
  EXPECT_FALSE(s16.result().aligned_confidence_probs.defined());

  PaeStream bad(n, b, 7.0);
  EXPECT_THROW(bad.result(), Error);  // no rows yet
  EXPECT_THROW(bad.ptm(), Error);
  bad.add_rows(2, logits.narrow(0, 2, 3));
  EXPECT_THROW(bad.add_rows(4, logits.narrow(0, 4, 2)), Error);  // row 4 again
  EXPECT_THROW(bad.add_rows(n - 1, logits.narrow(0, 0, 2)), Error);  // past N
  EXPECT_THROW(bad.add_rows(0, logits.narrow(2, 0, b - 1)), Error);  // wrong bin count
  EXPECT_THROW(PaeStream(n, b, 7.0, Tensor::zeros({n + 1}, DType::f32)), Error);
}

}  // namespace
}  // namespace foldcore::af2
