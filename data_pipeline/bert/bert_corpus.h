// Synthetic BERT pre-training data in MLPerf's shard format, for throughput runs (kind random)
// and for checking that training learns (kind learnable), without the Wikipedia dump.
//
// Both kinds go through BERT's own instance builder (create_pretraining_data.py,
// create_instances_from_document): documents are lists of sentences; an instance takes sentences
// until a target length (L-3, or with probability 0.1 a shorter uniform one), splits them at a
// random sentence boundary into A and B, and with probability 1/2 replaces B by sentences from a
// random other document (NotNext, label 1); the pair is truncated to L-3 by dropping tokens from
// the longer side's front or back at random. Two deviations from BERT: a one-sentence chunk drawn
// as IsNext is split inside the sentence (BERT makes it NotNext, biasing the labels), and the
// learnable kind truncates only at the outer ends (keeping the A/B boundary intact). Then
// [CLS]=101 A [SEP]=102 B [SEP]; 15% of the non-special tokens (at least 1, at most P) are chosen
// for prediction, of which 80% become [MASK]=103, 10% a random id, 10% stay; positions sorted.
// Documents ending mid-target give BERT's natural spread of sequence lengths (what packing
// exploits).
//
// The kinds differ only in the tokens of a sentence:
//  - random: ids uniform in [1000, vocab).
//  - learnable: a fixed "grammar" over the region [1000, 2000) (smaller for small vocabularies):
//    a successor table succ[w] drawn once from a fixed grammar seed; each token is succ(previous)
//    with probability 0.9, else uniform in the region, and a sentence starts from the successor
//    of the previous sentence's last token. A masked token is thus predictable from its left
//    neighbour (≈90% top-1 at best), and IsNext pairs are recognisable at the A/B boundary (B's
//    first token follows A's last one) where NotNext pairs match by chance only. The grammar does
//    not depend on the data seed, so an eval set (other seed, other documents) tests the same
//    language.
#pragma once

#include <cstdint>
#include <string>

#include "data_pipeline/bert/bert_data.h"

namespace foldcore::data {

enum class BertCorpusKind { random, learnable };

struct BertCorpusOptions {
  BertCorpusKind kind = BertCorpusKind::random;
  int seq_len = 512;         // L
  int max_predictions = 76;  // P
  int vocab_size = 30522;
  uint64_t seed = 0;
  bool eval = false;              // eval documents: a different stream from the same grammar
  double short_seq_prob = 0.1;    // BERT's probability of a shorter target length
  double masked_lm_prob = 0.15;
  int min_doc_sentences = 2, max_doc_sentences = 40;
  int min_sentence_len = 6, max_sentence_len = 48;
};

// A document shape that gives the pair lengths of MLPerf's phase-2 Wikipedia set at any L: more
// than half of the token slots padding at L = 512 (Krell et al. 2021, "Efficient sequence packing
// without cross-contamination": "up to 50%" padding, packing's "2x" speed-up). The default shape
// (2-40 sentences) fills rows too well (mean length 0.63·L); documents of 2-22 sentences end
// mid-target about twice as often: mean length ≈ 0.49·L (251 of 512), ≈ 13% of the rows
// full-length, the rest spread down to a few tokens (tests/data_pipeline/test_bert_corpus.cpp).
// Sentence lengths scale with L/512 (6-48 tokens at 512) so the distribution, as a fraction of
// L, is the same at the small L of CPU runs. Keeps the kind, seed, vocabulary and masking.
BertCorpusOptions wikipedia_like_lengths(BertCorpusOptions options);

// The learnable grammar's region [begin, begin + size) and its successor of token w.
struct BertGrammar {
  int32_t begin = 1000;
  int32_t size = 1000;
  std::vector<int32_t> successor;  // [size]: successor of begin + i
  static BertGrammar make(int vocab_size);
  int32_t next(int32_t w) const { return successor[static_cast<size_t>(w - begin)]; }
};

// Shard `shard` of a corpus: `num` instances generated from their own document stream, seeded
// by (seed, eval, shard), so shards can be made independently and in any order.
BertExamples generate_bert_examples(const BertCorpusOptions& options, int64_t num, int64_t shard);

// Writes `num_sequences` instances as `shards` files <out_dir>/{part|eval}-SSSSS-of-KKKKK.hdf5
// (MLPerf's naming), shard k holding rows [k·N/K, (k+1)·N/K). Returns the file paths.
std::vector<std::string> write_bert_corpus(const std::string& out_dir, const BertCorpusOptions& options,
                                           int64_t num_sequences, int shards);

// Statistics of an example set, for the generator's tests and the command's report.
struct BertCorpusStats {
  int64_t num = 0, tokens = 0, maskable = 0, predictions = 0;
  int64_t is_next = 0, masked_as_mask = 0, masked_kept = 0, masked_random = 0;
  double mean_length() const { return num ? static_cast<double>(tokens) / static_cast<double>(num) : 0.0; }
  double mask_rate() const { return maskable ? static_cast<double>(predictions) / static_cast<double>(maskable) : 0.0; }
  double is_next_rate() const { return num ? static_cast<double>(is_next) / static_cast<double>(num) : 0.0; }
};
BertCorpusStats bert_corpus_stats(const BertExamples& ex);

}  // namespace foldcore::data
