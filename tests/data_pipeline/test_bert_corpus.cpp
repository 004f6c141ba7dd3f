// The synthetic BERT corpus generator (no HDF5 needed): format invariants, BERT's masking and
// next-sentence statistics, the learnable grammar's predictability, seeding.
#include <gtest/gtest.h>

#include <cmath>

#include "data_pipeline/bert/bert_corpus.h"

namespace foldcore::data {
namespace {

BertCorpusOptions small_options(BertCorpusKind kind, int seq_len = 128, int max_pred = 20) {
  BertCorpusOptions o;
  o.kind = kind;
  o.seq_len = seq_len;
  o.max_predictions = max_pred;
  o.seed = 7;
  return o;
}

TEST(BertCorpus, RowsAreValidBertInstances) {
  for (BertCorpusKind kind : {BertCorpusKind::random, BertCorpusKind::learnable}) {
    const BertCorpusOptions o = small_options(kind);
    const BertExamples ex = generate_bert_examples(o, 300, 0);
    ASSERT_EQ(ex.num, 300);
    ex.validate("generated", o.vocab_size);  // mask prefix, ascending positions, ids in range
    for (int64_t i = 0; i < ex.num; ++i) {
      const int len = ex.length(i);
      const int32_t* ids = ex.input_ids.data() + i * o.seq_len;
      const int32_t* seg = ex.segment_ids.data() + i * o.seq_len;
      ASSERT_EQ(ids[0], kBertClsId);
      ASSERT_EQ(ids[len - 1], kBertSepId);
      // Segments: 0 over [CLS] A [SEP], then 1 over B [SEP]; both parts non-empty.
      int first_sep = 0;
      while (first_sep + 1 < len && seg[first_sep + 1] == 0) ++first_sep;
      ASSERT_EQ(ids[first_sep], kBertSepId) << "row " << i;
      ASSERT_GE(first_sep, 2);
      ASSERT_LE(first_sep, len - 3);
      for (int j = first_sep + 1; j < len; ++j) ASSERT_EQ(seg[j], 1) << "row " << i << " col " << j;
      // Masked positions never point at [CLS]/[SEP], and the count follows BERT's rounding rule.
      const int np = ex.num_predictions(i);
      EXPECT_EQ(np, std::min(o.max_predictions, std::max(1, static_cast<int>(std::lround(len * 0.15)))));
      for (int k = 0; k < np; ++k) {
        const int32_t orig = ex.masked_lm_ids[static_cast<size_t>(i * o.max_predictions + k)];
        EXPECT_NE(orig, kBertClsId);
        EXPECT_NE(orig, kBertSepId);
        EXPECT_GE(orig, 1000);
      }
    }
  }
}

TEST(BertCorpus, MaskingAndNextSentenceStatistics) {
  const BertCorpusOptions o = small_options(BertCorpusKind::learnable, 256, 40);
  const BertCorpusStats s = bert_corpus_stats(generate_bert_examples(o, 4000, 3));
  // 15% of all tokens (incl. the 3 specials, BERT's rule) over the non-special ones: ≈ 15.2%
  // for these lengths; ±1% covers the rounding of short rows.
  EXPECT_NEAR(s.mask_rate(), 0.15, 0.01) << s.predictions << " / " << s.maskable;
  // IsNext: exactly 1/2 per instance; 4000 rows: binomial sd 0.8%, ±3% is ~4 sd.
  EXPECT_NEAR(s.is_next_rate(), 0.5, 0.03);
  const double total = static_cast<double>(s.predictions);
  // 80/10/10; a random replacement equal to the original counts as kept (p ≈ 1/30522).
  EXPECT_NEAR(s.masked_as_mask / total, 0.8, 0.02);
  EXPECT_NEAR(s.masked_kept / total, 0.1, 0.015);
  EXPECT_NEAR(s.masked_random / total, 0.1, 0.015);
  // BERT's length spread: most rows reach the target L-3, documents ending early give shorter ones.
  EXPECT_GT(s.mean_length(), 0.5 * o.seq_len);
  EXPECT_LT(s.mean_length(), o.seq_len - 3);
}

// The Wikipedia-like shape: about half the slots padding at L = 512 (Krell et al. 2021), the
// same fraction at the small L of CPU runs, and a spread that packing can fill.
TEST(BertCorpus, WikipediaLikeLengths) {
  for (int seq_len : {512, 128}) {
    BertCorpusOptions o = small_options(BertCorpusKind::random, seq_len, seq_len * 15 / 100 + 1);
    o.vocab_size = 30522;
    o = wikipedia_like_lengths(o);
    const BertExamples ex = generate_bert_examples(o, 2000, 0);
    int64_t full = 0, under_quarter = 0;
    for (int64_t i = 0; i < ex.num; ++i) {
      full += ex.length(i) >= seq_len - 3;
      under_quarter += ex.length(i) < seq_len / 4;
    }
    const double mean = bert_corpus_stats(ex).mean_length() / seq_len;
    // Measured 0.49 (512) and 0.51 (128) over 4000 rows; ±0.05 is several standard errors of a
    // 2000-row mean (sd of length/L ≈ 0.3 → 0.007) and still "about half padding".
    EXPECT_NEAR(mean, 0.5, 0.05) << "L " << seq_len;
    EXPECT_GT(full, ex.num / 20) << "L " << seq_len;          // a full-length spike (≈ 13-17%)
    EXPECT_GT(under_quarter, ex.num / 5) << "L " << seq_len;  // many short rows (≈ 25-30%)
  }
  BertCorpusOptions bad;
  bad.seq_len = 4;
  EXPECT_THROW(wikipedia_like_lengths(bad), Error);
}

TEST(BertCorpus, LearnableTokensFollowTheGrammar) {
  const BertCorpusOptions o = small_options(BertCorpusKind::learnable);
  const BertGrammar g = BertGrammar::make(o.vocab_size);
  EXPECT_EQ(g.begin, 1000);
  EXPECT_EQ(g.size, 1000);
  const BertExamples ex = generate_bert_examples(o, 500, 0);
  // Masked tokens whose left neighbour is visible: the original is succ(neighbour) ~90% of the
  // time (the grammar's follow probability; truncation at a pair's front rarely breaks it).
  int64_t hits = 0, total = 0, random_hits = 0, random_total = 0;
  for (int64_t i = 0; i < ex.num; ++i) {
    for (int k = 0; k < ex.num_predictions(i); ++k) {
      const auto m = static_cast<size_t>(i * o.max_predictions + k);
      const int32_t p = ex.masked_lm_positions[m];
      const int32_t left = ex.input_ids[static_cast<size_t>(i * o.seq_len + p - 1)];
      if (left < g.begin || left >= g.begin + g.size) continue;  // special, or a masked/random neighbour
      if (k > 0 && ex.masked_lm_positions[m - 1] == p - 1) continue;
      ++total;
      hits += ex.masked_lm_ids[m] == g.next(left);
    }
  }
  ASSERT_GT(total, 1000);
  EXPECT_GT(static_cast<double>(hits) / static_cast<double>(total), 0.8);
  // The random kind has no such structure.
  const BertExamples rnd = generate_bert_examples(small_options(BertCorpusKind::random), 200, 0);
  for (int64_t i = 0; i < rnd.num; ++i)
    for (int k = 0; k < rnd.num_predictions(i); ++k) {
      const auto m = static_cast<size_t>(i * o.max_predictions + k);
      const int32_t left = rnd.input_ids[static_cast<size_t>(i * o.seq_len + rnd.masked_lm_positions[m] - 1)];
      if (left < g.begin || left >= g.begin + g.size) continue;
      ++random_total;
      random_hits += rnd.masked_lm_ids[m] == g.next(left);
    }
  EXPECT_LT(static_cast<double>(random_hits) / std::max<double>(1.0, static_cast<double>(random_total)), 0.05);
}

TEST(BertCorpus, IsNextPairsContinueAcrossTheBoundary) {
  // IsNext: B's first token follows A's last by the grammar (unless masked, truncated or noise);
  // NotNext: only by chance. This is the signal that makes NSP learnable.
  const BertCorpusOptions o = small_options(BertCorpusKind::learnable);
  const BertGrammar g = BertGrammar::make(o.vocab_size);
  const BertExamples ex = generate_bert_examples(o, 2000, 1);
  int64_t n[2] = {0, 0}, follow[2] = {0, 0};
  for (int64_t i = 0; i < ex.num; ++i) {
    const int32_t* ids = ex.input_ids.data() + i * o.seq_len;
    int sep = 1;
    while (ids[sep] != kBertSepId) ++sep;
    const int32_t a_last = ids[sep - 1], b_first = ids[sep + 1];
    if (a_last < g.begin || a_last >= g.begin + g.size) continue;
    const int label = ex.next_sentence_labels[static_cast<size_t>(i)];
    ++n[label];
    follow[label] += b_first == g.next(a_last);
  }
  ASSERT_GT(n[0], 300);
  ASSERT_GT(n[1], 300);
  EXPECT_GT(static_cast<double>(follow[0]) / static_cast<double>(n[0]), 0.5);
  EXPECT_LT(static_cast<double>(follow[1]) / static_cast<double>(n[1]), 0.05);
}

TEST(BertCorpus, SeededAndEvalIsSeparate) {
  BertCorpusOptions o = small_options(BertCorpusKind::learnable, 64, 10);
  const BertExamples a = generate_bert_examples(o, 50, 2), b = generate_bert_examples(o, 50, 2);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.masked_lm_positions, b.masked_lm_positions);
  EXPECT_NE(a.input_ids, generate_bert_examples(o, 50, 3).input_ids);  // another shard
  o.eval = true;
  EXPECT_NE(a.input_ids, generate_bert_examples(o, 50, 2).input_ids);  // eval documents
  o.eval = false;
  o.seed = 8;
  EXPECT_NE(a.input_ids, generate_bert_examples(o, 50, 2).input_ids);
}

TEST(BertCorpus, RejectsBadOptions) {
  BertCorpusOptions o = small_options(BertCorpusKind::learnable);
  o.max_predictions = o.seq_len;
  EXPECT_THROW(generate_bert_examples(o, 10, 0), Error);
  o = small_options(BertCorpusKind::learnable);
  o.vocab_size = 110;
  EXPECT_THROW(generate_bert_examples(o, 10, 0), Error);
  o = small_options(BertCorpusKind::random);
  o.vocab_size = 900;
  EXPECT_THROW(generate_bert_examples(o, 10, 0), Error);
}

}  // namespace
}  // namespace foldcore::data
