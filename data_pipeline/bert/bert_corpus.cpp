// Synthetic BERT corpora (see bert_corpus.h): documents, BERT's instance builder, masking, and
// the shard writer.
#include "data_pipeline/bert/bert_corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace foldcore::data {

namespace {

// The grammar is a property of the synthetic language, not of a data set: fixed seed.
constexpr uint64_t kGrammarSeed = 0x5EEDB3A7ull;
constexpr double kGrammarFollowProb = 0.9;

using Sentence = std::vector<int32_t>;
using Document = std::vector<Sentence>;

int uniform_int(BertRng& rng, int lo, int hi) {  // inclusive
  return lo + static_cast<int>(rng.below(static_cast<uint64_t>(hi - lo + 1)));
}

class DocumentSource {
 public:
  DocumentSource(const BertCorpusOptions& o, uint64_t seed)
      : o_(o), rng_(seed), grammar_(BertGrammar::make(o.vocab_size)) {}

  Document next() {
    Document doc(static_cast<size_t>(uniform_int(rng_, o_.min_doc_sentences, o_.max_doc_sentences)));
    int32_t prev = grammar_.begin + static_cast<int32_t>(rng_.below(static_cast<uint64_t>(grammar_.size)));
    for (Sentence& s : doc) {
      s.resize(static_cast<size_t>(uniform_int(rng_, o_.min_sentence_len, o_.max_sentence_len)));
      for (int32_t& t : s) {
        if (o_.kind == BertCorpusKind::random) {
          t = 1000 + static_cast<int32_t>(rng_.below(static_cast<uint64_t>(o_.vocab_size - 1000)));
        } else {
          t = rng_.uniform() < kGrammarFollowProb
                  ? grammar_.next(prev)
                  : grammar_.begin + static_cast<int32_t>(rng_.below(static_cast<uint64_t>(grammar_.size)));
          prev = t;
        }
      }
    }
    return doc;
  }

 private:
  const BertCorpusOptions& o_;
  BertRng rng_;
  BertGrammar grammar_;
};

// BERT's truncate_seq_pair: drop one token at a time from the longer side, front or back at
// random. The learnable kind drops only at the outer ends (A's front, B's back), so the A/B
// boundary that carries the next-sentence signal stays intact.
void truncate_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, int max_tokens, bool outer_only, BertRng& rng) {
  while (static_cast<int>(a.size() + b.size()) > max_tokens) {
    const bool is_a = a.size() > b.size();
    std::vector<int32_t>& t = is_a ? a : b;
    const bool front = outer_only ? is_a : rng.uniform() < 0.5;
    if (front)
      t.erase(t.begin());
    else
      t.pop_back();
  }
}

// Writes one instance into row `row` of `ex`: tokens, segments, mask and the 80/10/10 masking.
void emit_instance(const BertCorpusOptions& o, const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                   bool is_random_next, BertRng& rng, BertExamples& ex, int64_t row) {
  const int L = o.seq_len, P = o.max_predictions;
  int32_t* ids = ex.input_ids.data() + row * L;
  int32_t* seg = ex.segment_ids.data() + row * L;
  int32_t* mask = ex.input_mask.data() + row * L;
  int n = 0;
  auto put = [&](int32_t t, int32_t s) {
    ids[n] = t;
    seg[n] = s;
    mask[n] = 1;
    ++n;
  };
  put(kBertClsId, 0);
  for (int32_t t : a) put(t, 0);
  put(kBertSepId, 0);
  for (int32_t t : b) put(t, 1);
  put(kBertSepId, 1);
  // Masked LM (create_masked_lm_predictions): candidates are the non-special positions.
  std::vector<int32_t> cand;
  for (int j = 0; j < n; ++j)
    if (ids[j] != kBertClsId && ids[j] != kBertSepId) cand.push_back(j);
  const std::vector<int64_t> perm = bert_permutation(static_cast<int64_t>(cand.size()), rng);
  const int want = std::min<int>(P, std::max(1, static_cast<int>(static_cast<double>(n) * o.masked_lm_prob + 0.5)));
  std::vector<int32_t> chosen;
  for (int k = 0; k < want && k < static_cast<int>(cand.size()); ++k)
    chosen.push_back(cand[static_cast<size_t>(perm[static_cast<size_t>(k)])]);
  std::sort(chosen.begin(), chosen.end());
  int32_t* mpos = ex.masked_lm_positions.data() + row * P;
  int32_t* mids = ex.masked_lm_ids.data() + row * P;
  for (size_t k = 0; k < chosen.size(); ++k) {
    const int32_t p = chosen[k];
    mpos[k] = p;
    mids[k] = ids[p];
    const double u = rng.uniform();
    if (u < 0.8)
      ids[p] = kBertMaskId;
    else if (u >= 0.9)  // random replacement over the whole vocabulary, as BERT does
      ids[p] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(o.vocab_size)));
  }
  ex.next_sentence_labels[static_cast<size_t>(row)] = is_random_next ? 1 : 0;
}

}  // namespace

BertGrammar BertGrammar::make(int vocab_size) {
  BertGrammar g;
  // [1000, 2000) when the vocabulary has it; otherwise the ids after the special tokens.
  g.begin = vocab_size >= 2000 ? 1000 : kBertMaskId + 1;
  g.size = std::min(1000, vocab_size - g.begin);
  FC_CHECK(g.size >= 16, "BERT corpus: vocab_size ", vocab_size, " too small for the learnable grammar");
  BertRng rng(kGrammarSeed);
  g.successor.resize(static_cast<size_t>(g.size));
  for (int32_t& s : g.successor) s = g.begin + static_cast<int32_t>(rng.below(static_cast<uint64_t>(g.size)));
  return g;
}

BertExamples generate_bert_examples(const BertCorpusOptions& o, int64_t num, int64_t shard) {
  FC_CHECK(o.seq_len >= 8 && o.max_predictions >= 1 && o.max_predictions < o.seq_len, "BERT corpus: bad geometry L=",
           o.seq_len, " P=", o.max_predictions);
  FC_CHECK(o.vocab_size > 1000 || o.kind == BertCorpusKind::learnable, "BERT corpus: kind random needs vocab_size > 1000");
  FC_CHECK(o.min_doc_sentences >= 1 && o.max_doc_sentences >= o.min_doc_sentences && o.min_sentence_len >= 2 &&
               o.max_sentence_len >= o.min_sentence_len,
           "BERT corpus: bad document shape options");
  const uint64_t stream = bert_mix_seed(o.seed, o.eval ? 0xE7A1ull : 0x7EA1ull, static_cast<uint64_t>(shard));
  DocumentSource source(o, stream);
  BertRng rng(bert_mix_seed(stream, 1));
  BertExamples ex = BertExamples::zeros(num, o.seq_len, o.max_predictions);
  const int max_tokens = o.seq_len - 3;
  constexpr int kPool = 32;  // documents in flight: NotNext B comes from another one of these
  std::vector<Document> pool;
  for (int i = 0; i < kPool; ++i) pool.push_back(source.next());
  int64_t row = 0;
  int current = 0;
  while (row < num) {
    const Document& doc = pool[static_cast<size_t>(current)];
    // create_instances_from_document over `doc`.
    int target = max_tokens;
    if (rng.uniform() < o.short_seq_prob) target = uniform_int(rng, 2, max_tokens);
    std::vector<const Sentence*> chunk;
    int chunk_len = 0;
    for (size_t i = 0; i < doc.size() && row < num; ++i) {
      chunk.push_back(&doc[i]);
      chunk_len += static_cast<int>(doc[i].size());
      if (i + 1 != doc.size() && chunk_len < target) continue;
      const size_t a_end = chunk.size() >= 2 ? static_cast<size_t>(uniform_int(rng, 1, static_cast<int>(chunk.size()) - 1)) : 1;
      std::vector<int32_t> a, b;
      for (size_t k = 0; k < a_end; ++k) a.insert(a.end(), chunk[k]->begin(), chunk[k]->end());
      const bool random_next = rng.uniform() < 0.5;
      if (!random_next && chunk.size() == 1) {
        // BERT forces NotNext here, which biases the labels towards NotNext (≈45% IsNext in our
        // corpora); we split the one sentence at a random token instead: A and B are still
        // consecutive text, and the labels are 50/50.
        const auto cut = static_cast<std::ptrdiff_t>(uniform_int(rng, 1, static_cast<int>(a.size()) - 1));
        b.assign(a.begin() + cut, a.end());
        a.resize(static_cast<size_t>(cut));
      } else if (random_next) {
        const int target_b = std::max(1, target - static_cast<int>(a.size()));
        int other = current;
        while (other == current) other = static_cast<int>(rng.below(kPool));
        const Document& od = pool[static_cast<size_t>(other)];
        for (size_t k = rng.below(od.size()); k < od.size() && static_cast<int>(b.size()) < target_b; ++k)
          b.insert(b.end(), od[k].begin(), od[k].end());
        i -= chunk.size() - a_end;  // the unused sentences go back (BERT's num_unused_segments)
      } else {
        for (size_t k = a_end; k < chunk.size(); ++k) b.insert(b.end(), chunk[k]->begin(), chunk[k]->end());
      }
      truncate_pair(a, b, max_tokens, o.kind == BertCorpusKind::learnable, rng);
      emit_instance(o, a, b, random_next, rng, ex, row++);
      chunk.clear();
      chunk_len = 0;
      if (rng.uniform() < o.short_seq_prob) {
        target = uniform_int(rng, 2, max_tokens);
      } else {
        target = max_tokens;
      }
    }
    pool[static_cast<size_t>(current)] = source.next();  // a finished document is replaced
    current = (current + 1) % kPool;
  }
  return ex;
}

BertCorpusOptions wikipedia_like_lengths(BertCorpusOptions o) {
  FC_CHECK(o.seq_len >= 8, "BERT corpus: wikipedia_like_lengths needs seq_len >= 8, got ", o.seq_len);
  const double f = static_cast<double>(o.seq_len) / 512.0;
  o.min_doc_sentences = 2;
  o.max_doc_sentences = 22;
  o.min_sentence_len = std::max(2, static_cast<int>(std::lround(6 * f)));
  o.max_sentence_len = std::max(o.min_sentence_len, static_cast<int>(std::lround(48 * f)));
  return o;
}

std::vector<std::string> write_bert_corpus(const std::string& out_dir, const BertCorpusOptions& o,
                                           int64_t num_sequences, int shards) {
  FC_CHECK(shards >= 1 && num_sequences >= shards, "BERT corpus: ", num_sequences, " sequences in ", shards,
           " shards (need at least one per shard)");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  FC_CHECK(!ec, "BERT corpus: cannot create directory '", out_dir, "': ", ec.message());
  std::vector<std::string> paths;
  for (int k = 0; k < shards; ++k) {
    const int64_t begin = num_sequences * k / shards, end = num_sequences * (k + 1) / shards;
    char name[64];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d.hdf5", o.eval ? "eval" : "part", k, shards);
    const std::string path = (std::filesystem::path(out_dir) / name).string();
    write_bert_shard(path, generate_bert_examples(o, end - begin, k));
    paths.push_back(path);
  }
  return paths;
}

BertCorpusStats bert_corpus_stats(const BertExamples& ex) {
  BertCorpusStats s;
  s.num = ex.num;
  for (int64_t i = 0; i < ex.num; ++i) {
    const int len = ex.length(i);
    s.tokens += len;
    s.maskable += len - 3;  // [CLS] and two [SEP]
    s.is_next += ex.next_sentence_labels[static_cast<size_t>(i)] == 0;
    const int np = ex.num_predictions(i);
    s.predictions += np;
    for (int k = 0; k < np; ++k) {
      const auto m = static_cast<size_t>(i * ex.max_predictions + k);
      const int32_t shown = ex.input_ids[static_cast<size_t>(i * ex.seq_len + ex.masked_lm_positions[m])];
      if (shown == kBertMaskId)
        ++s.masked_as_mask;
      else if (shown == ex.masked_lm_ids[m])
        ++s.masked_kept;
      else
        ++s.masked_random;
    }
  }
  return s;
}

}  // namespace foldcore::data
