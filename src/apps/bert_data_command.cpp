// `foldcore bert_data`: writes synthetic BERT pre-training shards in MLPerf's HDF5 format
// (data_pipeline/bert/bert_corpus.h): kind random for throughput runs, kind learnable for checking
// that training learns. Prints one JSON line with the files and the corpus statistics (mask
// rate, IsNext rate, mean length, packing efficiency before/after).
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/error.h"

#ifdef FOLDCORE_HAVE_DATA
#include "data_pipeline/bert/bert_corpus.h"
#include "data_pipeline/bert/bert_packing.h"
#endif

namespace foldcore::apps {
namespace {

struct BertDataArgs {
  std::string out_dir, kind = "random";
  int64_t num_sequences = 1024;
  int shards = 1, seq_len = 512, max_pred = 76, vocab = 30522;
  uint64_t seed = 12345;
  bool eval = false, wikipedia_lengths = false;
};

#ifdef FOLDCORE_HAVE_DATA
int run_bert_data(const BertDataArgs& a) {
  using namespace foldcore::data;
  FC_CHECK(bert_hdf5_supported(), "this foldcore was built without HDF5; cannot write BERT shards");
  BertCorpusOptions o;
  o.kind = a.kind == "learnable" ? BertCorpusKind::learnable : BertCorpusKind::random;
  o.seq_len = a.seq_len;
  o.max_predictions = a.max_pred;
  o.vocab_size = a.vocab;
  o.seed = a.seed;
  o.eval = a.eval;
  if (a.wikipedia_lengths) o = wikipedia_like_lengths(o);
  const std::vector<std::string> files = write_bert_corpus(a.out_dir, o, a.num_sequences, a.shards);
  // Statistics over what was written (read back: also checks the files).
  BertCorpusStats total;
  std::vector<int> lengths;
  for (const auto& f : files) {
    const BertExamples ex = read_bert_shard(f);
    const BertCorpusStats s = bert_corpus_stats(ex);
    total.num += s.num;
    total.tokens += s.tokens;
    total.maskable += s.maskable;
    total.predictions += s.predictions;
    total.is_next += s.is_next;
    for (int64_t i = 0; i < ex.num; ++i) lengths.push_back(ex.length(i));
  }
  BertPackingOptions po;
  po.seq_len = a.seq_len;
  const BertPackingStats ps = bert_packing_stats(lengths, pack_bert_sequences(lengths, {}, po), a.seq_len);
  std::printf(
      "{\"out_dir\": \"%s\", \"kind\": \"%s\", \"eval\": %s, \"files\": %zu, \"sequences\": %lld, "
      "\"mean_length\": %.2f, \"mask_rate\": %.4f, \"is_next_rate\": %.4f, \"packing_efficiency_unpacked\": %.4f, "
      "\"packing_efficiency_packed\": %.4f, \"packed_rows\": %lld}\n",
      a.out_dir.c_str(), a.kind.c_str(), a.eval ? "true" : "false", files.size(), static_cast<long long>(total.num),
      total.mean_length(), total.mask_rate(), total.is_next_rate(), ps.efficiency_unpacked(), ps.efficiency_packed(),
      static_cast<long long>(ps.rows));
  return 0;
}
#endif

}  // namespace

void add_bert_data_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "bert_data", "Write synthetic BERT pre-training shards in MLPerf's HDF5 format (random or learnable)");
  auto a = std::make_shared<BertDataArgs>();
  sub->add_option("--out_dir", a->out_dir, "output folder (part-SSSSS-of-KKKKK.hdf5, eval-... with --eval)")
      ->check(folder_to_write())
      ->required();
  sub->add_option("--kind", a->kind, "random (throughput) or learnable (synthetic grammar)")
      ->check(CLI::IsMember({"random", "learnable"}))
      ->capture_default_str();
  sub->add_option("--num_sequences", a->num_sequences, "sequence pairs in all")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--shards", a->shards, "number of files")->check(CLI::Range(1, 100000))->capture_default_str();
  sub->add_option("--seq_len", a->seq_len, "L, max_seq_length")->check(CLI::Range(8, 32767))->capture_default_str();
  sub->add_option("--max_pred", a->max_pred, "P, max_predictions_per_seq")->check(CLI::Range(1, 32767))->capture_default_str();
  sub->add_option("--vocab", a->vocab, "vocabulary size")->check(CLI::Range(120, 1 << 30))->capture_default_str();
  sub->add_option("--seed", a->seed, "data seed")->capture_default_str();
  sub->add_flag("--eval", a->eval, "write the eval set (other documents, same grammar)");
  sub->add_flag("--wikipedia_lengths", a->wikipedia_lengths,
                "documents shaped for MLPerf Wikipedia's length spread (mean length ~0.49 L)");
  set_action(sub, [a]() -> int {
#ifdef FOLDCORE_HAVE_DATA
    return run_bert_data(*a);
#else
    FC_THROW("this foldcore was built without the data pipeline; `bert_data` is unavailable");
#endif
  });
}

}  // namespace foldcore::apps
