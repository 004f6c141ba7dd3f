// BERT data parallelism through the trainer's own loop (the code `foldcore bert --dp N` runs):
// N ranks with gradient accumulation a, averaging with dist::GradReducer, equal one process with
// accumulation a·N on the same batch stream — per-step losses within 1e-5 relative (fp32; only
// summation orders differ), the same sample counts and eval accuracy. Dropout off (with dropout
// the masks of a rank's micro-batches differ from the single process's). Each rank makes only its
// own micro-batches (the shard source skips the others' without reading them).
#include <gtest/gtest.h>

#include <cmath>

#include "bert_dp_corpus.h"
#include "dist/grad_reducer.h"
#include "dist_test_util.h"
#include "models/bert/bert_trainer.h"

namespace foldcore::testing {
namespace {

using Corpus = BertDpCorpus;

bert::BertRunOptions options(int64_t accumulation) {
  bert::BertRunOptions o;
  bert::BertConfig& c = o.config;
  c.name = "tiny-dp";
  c.model.vocab_size = 2000;
  c.model.hidden = 32;
  c.model.num_layers = 2;
  c.model.num_heads = 4;
  c.model.ffn = 64;
  c.model.max_positions = 32;
  c.model.dropout = 0.f;
  c.train.max_seq_length = 32;
  c.train.max_predictions = 5;
  c.train.batch_size = 4;
  c.train.grad_accumulation = accumulation;
  c.train.lr = 5e-3f;
  c.train.warmup_steps = 2;
  c.train.total_steps = 5;
  c.train.eval_every_samples = 0;
  c.train.target_mlm_accuracy = 2;  // unreachable: run every step
  c.train.seed = 7;
  o.measure_peak = false;
  o.log = [](const std::string&) {};
  return o;
}

// The shard source, counting the batches it was asked to make.
class CountingSource final : public bert::BertBatchSource {
 public:
  explicit CountingSource(std::unique_ptr<bert::BertBatchSource> inner) : inner_(std::move(inner)) {}
  BertBatch next() override {
    ++made;
    return inner_->next();
  }
  void skip() override { inner_->skip(); }
  int64_t position() const override { return inner_->position(); }
  void seek(int64_t position) override { inner_->seek(position); }
  int64_t made = 0;

 private:
  std::unique_ptr<bert::BertBatchSource> inner_;
};

// made: the training batches the source made for this rank.
bert::BertRunResult run(bert::BertRunOptions o, const Corpus& corpus, int64_t* made = nullptr) {
  CountingSource train(
      bert::open_bert_shards((corpus.dir / "train").string(), o.config.train.batch_size, o.config.train.seed));
  const auto eval = bert::load_bert_eval_set((corpus.dir / "eval").string(), 16);
  bert::BertRunResult r = bert::run_bert_training(o, train, eval);
  if (made != nullptr) *made = train.made;
  return r;
}

TEST(BertDataParallel, EqualsOneProcessWithNTimesTheAccumulation) {
  auto& world = mpi_world();
  const int n = world.size();
  const Corpus corpus("mpi");  // every rank writes the same seeded corpus to its own folder
  for (int64_t a : {int64_t{1}, int64_t{2}}) {
    SCOPED_TRACE(::testing::Message() << "accumulation " << a << " × " << n << " ranks");
    bert::BertRunOptions dp = options(a);
    dp.dp_rank = world.rank();
    dp.dp_size = n;
    std::unique_ptr<dist::GradReducer> reducer;
    dp.average_gradients = [&](const Tensor& grads, const std::vector<ops::ParamSegment>& segments) {
      if (!reducer) reducer = std::make_unique<dist::GradReducer>(world, grads, segments, dist::GradReducerOptions{.bucket_bytes = 64 << 10});
      reducer->finish();
    };
    dp.sum_over_ranks = [&](std::vector<double>& v) {
      // f32 is exact for these small counts; the loss sum only feeds the reported mean.
      std::vector<float> f(v.begin(), v.end());
      Tensor t = Tensor::from_vector(f, {static_cast<int64_t>(f.size())});
      world.all_reduce(t);
      const auto s = t.to_vector();
      v.assign(s.begin(), s.end());
    };
    int64_t made = 0;
    const bert::BertRunResult got = run(dp, corpus, &made);
    const bert::BertRunResult want = run(options(a * n), corpus);
    // Each rank made only its own micro-batches (the others' were skipped, not read).
    EXPECT_EQ(made, static_cast<int64_t>(got.losses.size()) * a);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t i = 0; i < got.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << "step " << i + 1;
    EXPECT_EQ(got.samples, want.samples);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_NEAR(got.final_mlm_accuracy, want.final_mlm_accuracy, 1e-9);
    EXPECT_NE(got.summary_json.find("\"dp_ranks\": " + std::to_string(n)), std::string::npos);
  }
}

}  // namespace
}  // namespace foldcore::testing
