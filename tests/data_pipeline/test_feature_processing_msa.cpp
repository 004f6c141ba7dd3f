// The MSA transforms of feature_processing_msa.h on small hand-made inputs (hand-computed results)
// and on large synthetic ones (statistics of the seeded sampling).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <set>

#include "core/error.h"
#include "data_pipeline/features/feature_processing_msa.h"

namespace foldcore::data::msa_tf {
namespace {

MsaRows rows_of(const std::vector<std::vector<int32_t>>& tokens, const std::vector<std::vector<float>>& deletions = {}) {
  MsaRows m;
  m.num_res = static_cast<int64_t>(tokens[0].size());
  for (size_t r = 0; r < tokens.size(); ++r) {
    m.msa.insert(m.msa.end(), tokens[r].begin(), tokens[r].end());
    if (deletions.empty()) m.deletion.insert(m.deletion.end(), tokens[r].size(), 0.0f);
    else m.deletion.insert(m.deletion.end(), deletions[r].begin(), deletions[r].end());
  }
  m.mask.assign(m.msa.size(), 1.0f);
  return m;
}

TEST(FeatureProcessingMsa, PhiloxStreamIsSeededAndUniform) {
  PhiloxStream a(5, 0), b(5, 0), c(6, 0), d(5, 1);
  int differ_seed = 0, differ_offset = 0;
  for (int i = 0; i < 100; ++i) {
    const uint32_t x = a.bits();
    EXPECT_EQ(x, b.bits());
    differ_seed += x != c.bits();
    differ_offset += x != d.bits();
  }
  EXPECT_GT(differ_seed, 95);
  EXPECT_GT(differ_offset, 95);
  // below(n): every value reached, roughly uniformly (60000 draws over 6 bins: σ ≈ 91 per bin).
  PhiloxStream e(1, 2);
  std::vector<int> hist(6, 0);
  for (int i = 0; i < 60000; ++i) ++hist[e.below(6)];
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
  EXPECT_THROW(e.below(0), Error);
}

TEST(FeatureProcessingMsa, SampleMsaKeepsQueryFirstAndPartitionsRows) {
  std::vector<std::vector<int32_t>> tokens;
  for (int r = 0; r < 50; ++r) tokens.push_back({r % 20, (r / 20) % 20});  // row r identified by its tokens
  const MsaRows msa = rows_of(tokens);
  std::set<std::vector<int32_t>> firsts;
  for (uint64_t offset = 0; offset < 20; ++offset) {
    PhiloxStream rng(9, offset);
    const SampledMsa s = sample_msa(msa, 10, rng);
    ASSERT_EQ(s.sampled.rows(), 10);
    ASSERT_EQ(s.extra.rows(), 40);
    EXPECT_EQ(s.sampled.msa[0], 0);  // the query
    EXPECT_EQ(s.sampled.msa[1], 0);
    std::multiset<int32_t> ids;
    auto collect = [&](const MsaRows& m) {
      for (int64_t r = 0; r < m.rows(); ++r) ids.insert(m.msa[2 * r] + 20 * m.msa[2 * r + 1]);
    };
    collect(s.sampled);
    collect(s.extra);
    std::multiset<int32_t> all;
    for (int r = 0; r < 50; ++r) all.insert(r);
    EXPECT_EQ(ids, all);  // a permutation: every row exactly once
    firsts.insert({s.sampled.msa[2], s.sampled.msa[3], s.sampled.msa[4], s.sampled.msa[5]});
  }
  EXPECT_GT(firsts.size(), 15u);  // different offsets shuffle differently
  PhiloxStream rng(1, 0);
  const SampledMsa all = sample_msa(msa, 100, rng);  // more clusters than rows: no extra rows
  EXPECT_EQ(all.sampled.rows(), 50);
  EXPECT_EQ(all.extra.rows(), 0);
}

// The 10/10/10/70 split and the 15 % replacement rate: every row the token D (3) and the profile
// all on G (7), so among replaced positions P(mask) = 0.7, P(D) = same 0.1 + uniform 0.005,
// P(G) = profile 0.1 + 0.005, each other amino acid 0.005 (together 0.09), gap/X never.
TEST(FeatureProcessingMsa, MaskedMsaStatistics) {
  const int64_t s = 400, n = 100;
  MsaRows m;
  m.num_res = n;
  m.msa.assign(static_cast<size_t>(s * n), 3);
  m.deletion.assign(m.msa.size(), 0.0f);
  m.mask.assign(m.msa.size(), 1.0f);
  std::vector<float> profile(static_cast<size_t>(n) * 22, 0.0f);
  for (int64_t i = 0; i < n; ++i) profile[static_cast<size_t>(i * 22 + 7)] = 1.0f;
  PhiloxStream rng(42, 7);
  const MaskedMsa out = make_masked_msa(m, profile, MaskedMsaConfig{}, rng);
  double selected = 0, mask_tok = 0, same = 0, prof = 0, other = 0;
  for (size_t k = 0; k < out.msa.size(); ++k) {
    EXPECT_EQ(out.true_msa[k], 3);
    if (out.bert_mask[k] == 0.0f) {
      EXPECT_EQ(out.msa[k], 3);
      continue;
    }
    ++selected;
    const int32_t t = out.msa[k];
    if (t == kMaskToken) ++mask_tok;
    else if (t == 3) ++same;
    else if (t == 7) ++prof;
    else {
      EXPECT_LT(t, 20) << "gap or X drawn";
      ++other;
    }
  }
  const double total = static_cast<double>(out.msa.size());
  // Binomial standard deviations: rate sqrt(.15·.85/40000) ≈ 0.0018; split fractions over ~6000
  // selected positions ≤ sqrt(.21/6000) ≈ 0.006. Tolerances are 4-5 σ.
  EXPECT_NEAR(selected / total, 0.15, 0.008);
  EXPECT_NEAR(mask_tok / selected, 0.70, 0.03);
  EXPECT_NEAR(same / selected, 0.105, 0.02);
  EXPECT_NEAR(prof / selected, 0.105, 0.02);
  EXPECT_NEAR(other / selected, 0.09, 0.02);
  // Seeded: the same stream gives the same result, another stream a different one.
  PhiloxStream again(42, 7), other_rng(43, 7);
  EXPECT_EQ(make_masked_msa(m, profile, MaskedMsaConfig{}, again).msa, out.msa);
  EXPECT_NE(make_masked_msa(m, profile, MaskedMsaConfig{}, other_rng).msa, out.msa);
  // replace_fraction 0: nothing changes.
  MaskedMsaConfig none;
  none.replace_fraction = 0.0;
  PhiloxStream r0(1, 1);
  const MaskedMsa unchanged = make_masked_msa(m, profile, none, r0);
  EXPECT_EQ(unchanged.msa, m.msa);
  MaskedMsaConfig bad;
  bad.profile_prob = 0.9;
  EXPECT_THROW(make_masked_msa(m, profile, bad, r0), Error);
}

TEST(FeatureProcessingMsa, HhblitsProfileIsTheColumnMean) {
  const MsaRows m = rows_of({{0, 21}, {0, 5}, {3, 5}, {0, 20}});
  const std::vector<float> p = hhblits_profile(m);
  ASSERT_EQ(p.size(), 44u);
  EXPECT_FLOAT_EQ(p[0], 0.75f);
  EXPECT_FLOAT_EQ(p[3], 0.25f);
  EXPECT_FLOAT_EQ(p[22 + 21], 0.25f);
  EXPECT_FLOAT_EQ(p[22 + 5], 0.5f);
  EXPECT_FLOAT_EQ(p[22 + 20], 0.25f);
}

// Hand-computed nearest-neighbour assignment and cluster summaries.
TEST(FeatureProcessingMsa, ClustersByHammingAgreement) {
  // Centres (after masking; 22 = mask token): c0 = A A A A, c1 = R R 22 21, c2 = A R R R.
  const MsaRows centres = rows_of({{0, 0, 0, 0}, {1, 1, 22, 21}, {0, 1, 1, 1}}, {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 2, 0, 0}});
  // e0 = A A A R: c0 3, c1 0, c2 2 → 0.   e1 = R R R 21: c0 0, c1 2 (gap agreement weight 0), c2 2 → 1 (tie:
  // lowest index).   e2 = 21 21 21 21: no agreement anywhere → 0.   e3 = A R R R: c2 4 → 2.
  // e4 = R R 22 R: the mask token never agrees; c1 2, c2 2 → 1.
  MsaRows extra = rows_of({{0, 0, 0, 1}, {1, 1, 1, 21}, {21, 21, 21, 21}, {0, 1, 1, 1}, {1, 1, 22, 1}},
                          {{0, 0, 0, 3}, {6, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 9}, {0, 0, 0, 0}});
  const std::vector<int32_t> a = nearest_neighbor_clusters(centres, extra);
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 0, 2, 1}));
  // A masked-out extra position does not agree: e0 with its first three positions masked → c0 0,
  // c1 0 (gap at position 3), c2 1 → 2.
  MsaRows masked = extra;
  masked.mask[0] = masked.mask[1] = masked.mask[2] = 0.0f;
  EXPECT_EQ(nearest_neighbor_clusters(centres, masked)[0], 2);

  const ClusterSummary sum = summarize_clusters(centres, extra, a);
  ASSERT_EQ(sum.profile.size(), 3u * 4 * kMsaOneHot);
  auto prof = [&](int s, int i, int t) { return sum.profile[static_cast<size_t>((s * 4 + i) * kMsaOneHot + t)]; };
  auto del = [&](int s, int i) { return sum.deletion_mean[static_cast<size_t>(s * 4 + i)]; };
  const float eps = 1e-6f;
  // Cluster 0 = {c0, e0, e2}: position 3 holds A, R, gap; deletions 0, 3, 0.
  EXPECT_FLOAT_EQ(prof(0, 3, 0), 1.0f / (3 + eps));
  EXPECT_FLOAT_EQ(prof(0, 3, 1), 1.0f / (3 + eps));
  EXPECT_FLOAT_EQ(prof(0, 3, 21), 1.0f / (3 + eps));
  EXPECT_FLOAT_EQ(del(0, 3), 3.0f / (3 + eps));
  // Cluster 1 = {c1, e1, e4}: position 2 holds 22, R, 22; position 0 deletions 1, 6, 0.
  EXPECT_FLOAT_EQ(prof(1, 2, 22), 2.0f / (3 + eps));
  EXPECT_FLOAT_EQ(prof(1, 2, 1), 1.0f / (3 + eps));
  EXPECT_FLOAT_EQ(del(1, 0), 7.0f / (3 + eps));
  // Cluster 2 = {c2, e3}.
  EXPECT_FLOAT_EQ(prof(2, 3, 1), 2.0f / (2 + eps));
  EXPECT_FLOAT_EQ(del(2, 3), 9.0f / (2 + eps));
  EXPECT_FLOAT_EQ(del(2, 1), 2.0f / (2 + eps));
  // Rows sum to 1 (up to the 1e-6).
  for (size_t cell = 0; cell < 12; ++cell) {
    double s = 0;
    for (int t = 0; t < kMsaOneHot; ++t) s += sum.profile[cell * kMsaOneHot + static_cast<size_t>(t)];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  // Masked extra positions count neither in the profile nor in the denominator.
  const ClusterSummary msum = summarize_clusters(centres, masked, a);
  EXPECT_FLOAT_EQ(msum.profile[static_cast<size_t>((0 * 4 + 0) * kMsaOneHot + 0)], 1.0f / (2 + eps));  // c0 + e2(gap)
  EXPECT_THROW(summarize_clusters(centres, extra, {0, 1}), Error);
  EXPECT_THROW(summarize_clusters(centres, extra, {0, 1, 0, 3, 1}), Error);
}

TEST(FeatureProcessingMsa, CropExtraMsaAndMsaFeat) {
  std::vector<std::vector<int32_t>> tokens;
  for (int r = 0; r < 30; ++r) tokens.push_back({r % 20, r / 20});
  const MsaRows extra = rows_of(tokens);
  PhiloxStream rng(3, 3);
  const MsaRows kept = crop_extra_msa(extra, 12, rng);
  ASSERT_EQ(kept.rows(), 12);
  std::set<int32_t> ids;
  for (int64_t r = 0; r < 12; ++r) ids.insert(kept.msa[2 * r] + 20 * kept.msa[2 * r + 1]);
  EXPECT_EQ(ids.size(), 12u);  // a subset without repetition
  PhiloxStream rng2(3, 3);
  EXPECT_EQ(crop_extra_msa(extra, 100, rng2).rows(), 30);

  // msa_feat channels for one hand-made cell.
  const MsaRows c = rows_of({{4, 22}}, {{0.0f, 5.0f}});
  ClusterSummary s;
  s.profile.assign(2 * kMsaOneHot, 0.0f);
  s.profile[3] = 0.25f;
  s.profile[kMsaOneHot + 22] = 0.5f;
  s.deletion_mean = {1.5f, 0.0f};
  const std::vector<float> f = make_msa_feat(c, s);
  ASSERT_EQ(f.size(), 2u * kMsaFeatDim);
  EXPECT_EQ(f[4], 1.0f);
  EXPECT_EQ(f[23], 0.0f);
  EXPECT_EQ(f[24], 0.0f);
  EXPECT_EQ(f[25 + 3], 0.25f);
  EXPECT_FLOAT_EQ(f[48], static_cast<float>(std::atan(0.5) * 2 / std::numbers::pi));
  EXPECT_EQ(f[kMsaFeatDim + 22], 1.0f);
  EXPECT_EQ(f[kMsaFeatDim + 23], 1.0f);  // has_deletion = clip(5, 0, 1)
  EXPECT_FLOAT_EQ(f[kMsaFeatDim + 24], static_cast<float>(std::atan(5.0 / 3.0) * 2 / std::numbers::pi));
  EXPECT_EQ(f[kMsaFeatDim + 25 + 22], 0.5f);
  double one_hot_sum = 0;
  for (int k = 0; k < 23; ++k) one_hot_sum += f[static_cast<size_t>(k)];
  EXPECT_EQ(one_hot_sum, 1.0);
}

}  // namespace
}  // namespace foldcore::data::msa_tf
