// BERT sequence packing: the best-fit decreasing plan, packed batch layout (positions, cu_seqlens,
// nsp positions, rebased masked-LM positions), lossless unpacking, efficiency on a Wikipedia-like
// length distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "data_pipeline/bert/bert_corpus.h"
#include "data_pipeline/bert/bert_packing.h"

namespace foldcore::data {
namespace {

void expect_partition(const BertPackPlan& plan, const std::vector<int>& lengths, int seq_len, int max_per_row) {
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& row : plan) {
    ASSERT_GE(row.size(), 1u);
    ASSERT_LE(static_cast<int>(row.size()), max_per_row);
    int used = 0;
    for (int64_t s : row) {
      ++seen[static_cast<size_t>(s)];
      used += lengths[static_cast<size_t>(s)];
    }
    ASSERT_LE(used, seq_len);
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "sequence " << i;
}

TEST(BertPacking, BestFitDecreasingByHand) {
  BertPackingOptions o;
  o.seq_len = 512;
  // Longest first: 300 → new row 0 (room 212); 250 → new row 1 (262); 212 → row 0 fits exactly;
  // 200 → row 1 (62 left); 100 → new row 2; 12 → the tightest fit is row 1 (62), its third.
  const std::vector<int> lengths = {300, 200, 250, 100, 212, 12};
  const BertPackPlan plan = pack_bert_sequences(lengths, {}, o);
  const BertPackPlan want = {{0, 4}, {2, 1, 5}, {3}};
  EXPECT_EQ(plan, want);
  // At most three sequences per row even when more would fit.
  const BertPackPlan tiny = pack_bert_sequences({5, 5, 5, 5, 5}, {}, o);
  EXPECT_EQ(tiny, (BertPackPlan{{0, 1, 2}, {3, 4}}));
  // The masked-LM budget opens a new row when the predictions would not fit.
  o.max_predictions = 10;
  EXPECT_EQ(pack_bert_sequences({10, 10, 10}, {6, 4, 5}, o), (BertPackPlan{{0, 1}, {2}}));
  EXPECT_THROW(pack_bert_sequences({10}, {11}, o), Error);
  EXPECT_THROW(pack_bert_sequences({513}, {}, o), Error);
  EXPECT_THROW(pack_bert_sequences({0}, {}, o), Error);
}

// A Wikipedia-like distribution of BERT pair lengths at L = 512 (our choice, documented): 30% of
// rows reach the target (uniform in [480, 512]: BERT fills to L-3 and truncation trims a little),
// 70% end with their document, log-normal with median 150 tokens and σ = 0.8, clipped to [8, 512].
// This reproduces the about-half padding that Krell et al. (2021) report for Wikipedia at 512.
std::vector<int> wikipedia_like_lengths(int64_t n, uint64_t seed) {
  BertRng rng(seed);
  std::vector<int> out;
  for (int64_t i = 0; i < n; ++i) {
    if (rng.uniform() < 0.3) {
      out.push_back(480 + static_cast<int>(rng.below(33)));
    } else {
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);  // Box-Muller
      out.push_back(std::clamp(static_cast<int>(std::lround(150.0 * std::exp(0.8 * z))), 8, 512));
    }
  }
  return out;
}

TEST(BertPacking, EfficiencyOnWikipediaLikeLengths) {
  const std::vector<int> lengths = wikipedia_like_lengths(20000, 11);
  BertPackingOptions o;
  const BertPackPlan plan = pack_bert_sequences(lengths, {}, o);
  expect_partition(plan, lengths, o.seq_len, o.max_per_row);
  const BertPackingStats s = bert_packing_stats(lengths, plan, o.seq_len);
  std::printf("packing %lld sequences: efficiency %.3f unpacked -> %.3f packed, %.2f sequences/row, speed-up %.2fx\n",
              static_cast<long long>(s.sequences), s.efficiency_unpacked(), s.efficiency_packed(),
              s.mean_sequences_per_row(), static_cast<double>(s.sequences) / static_cast<double>(s.rows));
  EXPECT_GT(s.efficiency_unpacked(), 0.45);
  EXPECT_LT(s.efficiency_unpacked(), 0.65);
  // Lower bound on the rows of any packing: ⌈Σ len / L⌉, the sequences longer than L/2 (no two
  // share a row) and ⌈N / 3⌉. The full-length 30% leave gaps only tiny sequences fill, so the
  // bound, not 100%, is the yardstick. It is not tight (the 480-512 rows' gaps take only the few
  // sequences of ≤ 32 tokens): BFD lands 9% above it here; 10% fails a regression.
  int64_t long_ones = 0;
  for (int len : lengths) long_ones += len > o.seq_len / 2;
  const int64_t bound = std::max({(s.tokens + o.seq_len - 1) / o.seq_len, long_ones, (s.sequences + 2) / 3});
  std::printf("rows %lld, lower bound %lld\n", static_cast<long long>(s.rows), static_cast<long long>(bound));
  EXPECT_LE(static_cast<double>(s.rows), 1.10 * static_cast<double>(bound));
  EXPECT_GT(s.efficiency_packed(), 0.9);
  EXPECT_LE(s.efficiency_packed(), 1.0);
  // Deterministic: the same lengths give the same plan.
  EXPECT_EQ(plan, pack_bert_sequences(lengths, {}, o));
}

BertExamples packing_corpus() {
  BertCorpusOptions c;
  c.kind = BertCorpusKind::learnable;
  c.seq_len = 128;
  c.max_predictions = 20;
  c.seed = 5;
  c.short_seq_prob = 0.5;  // many short rows, so rows really hold 2-3 sequences
  c.max_doc_sentences = 6;
  return generate_bert_examples(c, 400, 0);
}

TEST(BertPacking, PackedBatchLayout) {
  const BertExamples ex = packing_corpus();
  BertPackingOptions o;
  o.seq_len = 128;
  o.max_predictions = 20 + kMaxSequencesPerRow;
  const BertPackPlan plan = pack_bert_examples(ex, o);
  const BertBatch b = make_packed_bert_batch(ex, plan, o);
  const int64_t B = static_cast<int64_t>(plan.size()), L = o.seq_len, P = o.max_predictions;
  ASSERT_TRUE(b.packed);
  ASSERT_EQ(b.input_ids.shape(), Shape({B, L}));
  ASSERT_EQ(b.masked_lm_positions.shape(), Shape({B, P}));
  ASSERT_EQ(b.nsp_labels.numel(), ex.num);
  EXPECT_LT(B, ex.num * 3 / 4);  // packing did pack
  const int32_t* ids = b.input_ids.data<int32_t>();
  const int32_t* pos = b.position_ids.data<int32_t>();
  const int32_t* mask = b.input_mask.data<int32_t>();
  const int32_t* cu = b.cu_seqlens.data<int32_t>();
  const int32_t* nsp_pos = b.nsp_positions.data<int32_t>();
  const int64_t segs = b.cu_seqlens.numel() - 1;
  EXPECT_EQ(cu[0], 0);
  EXPECT_EQ(cu[segs], B * L);
  int64_t seq = 0, real = 0;
  for (int64_t g = 0; g < segs; ++g) {
    ASSERT_LT(cu[g], cu[g + 1]);
    ASSERT_EQ(cu[g] / L, (cu[g + 1] - 1) / L) << "segment " << g << " crosses a row";
    const bool is_seq = seq < ex.num && nsp_pos[seq] == cu[g];
    for (int32_t t = cu[g]; t < cu[g + 1]; ++t) {
      ASSERT_EQ(mask[t], is_seq ? 1 : 0);
      if (is_seq) {
        ASSERT_EQ(pos[t], t - cu[g]);  // positions restart per sequence
      }
    }
    if (is_seq) {
      EXPECT_EQ(ids[cu[g]], kBertClsId);
      EXPECT_EQ(ids[cu[g + 1] - 1], kBertSepId);
      real += cu[g + 1] - cu[g];
      ++seq;
    } else {
      EXPECT_EQ(cu[g + 1] % L, 0) << "padding only at a row's end";
    }
  }
  EXPECT_EQ(seq, ex.num);
  EXPECT_EQ(real, b.num_real_tokens);
  // Rebased masked positions point at the same shown token as in the unpacked row.
  const int32_t* mpos = b.masked_lm_positions.data<int32_t>();
  const float* mw = b.masked_lm_weights.data<float>();
  for (int64_t r = 0; r < B; ++r) {
    int64_t e = 0, off = 0;
    for (int64_t s : plan[static_cast<size_t>(r)]) {
      for (int k = 0; k < ex.num_predictions(s); ++k, ++e) {
        ASSERT_EQ(mw[r * P + e], 1.f);
        const int32_t p = ex.masked_lm_positions[static_cast<size_t>(s * ex.max_predictions + k)];
        ASSERT_EQ(mpos[r * P + e], p + off);
        ASSERT_EQ(ids[r * L + mpos[r * P + e]], ex.input_ids[static_cast<size_t>(s * ex.seq_len + p)]);
      }
      off += ex.length(s);
    }
    for (; e < P; ++e) ASSERT_EQ(mw[r * P + e], 0.f);
  }
}

TEST(BertPacking, UnpackingIsLossless) {
  const BertExamples ex = packing_corpus();
  BertPackingOptions o;
  o.seq_len = 128;
  o.max_predictions = 20 + kMaxSequencesPerRow;
  const BertPackPlan plan = pack_bert_examples(ex, o);
  const BertExamples back = unpack_bert_batch(make_packed_bert_batch(ex, plan, o), ex.seq_len, ex.max_predictions);
  // The sequences come back in plan order, each identical to its original row.
  BertExamples want = BertExamples::zeros(0, ex.seq_len, ex.max_predictions);
  for (const auto& row : plan)
    for (int64_t s : row) want.append(ex, s);
  ASSERT_EQ(back.num, want.num);
  EXPECT_EQ(back.input_ids, want.input_ids);
  EXPECT_EQ(back.input_mask, want.input_mask);
  EXPECT_EQ(back.segment_ids, want.segment_ids);
  EXPECT_EQ(back.masked_lm_positions, want.masked_lm_positions);
  EXPECT_EQ(back.masked_lm_ids, want.masked_lm_ids);
  EXPECT_EQ(back.next_sentence_labels, want.next_sentence_labels);
  // Efficiency of this corpus, for the record.
  std::vector<int> lengths;
  for (int64_t i = 0; i < ex.num; ++i) lengths.push_back(ex.length(i));
  const BertPackingStats s = bert_packing_stats(lengths, plan, o.seq_len);
  EXPECT_GT(s.efficiency_packed(), s.efficiency_unpacked() * 1.3);
}

TEST(BertPacking, RejectsBadRows) {
  const BertExamples ex = packing_corpus();
  BertPackingOptions o;
  o.seq_len = 128;
  EXPECT_THROW(make_packed_bert_batch(ex, {{0, 1, 2, 3}}, o), Error);  // four sequences
  EXPECT_THROW(make_packed_bert_batch(ex, {{ex.num}}, o), Error);      // out of range
  EXPECT_THROW(make_packed_bert_batch(ex, {{}}, o), Error);             // empty row
}

}  // namespace
}  // namespace foldcore::data
