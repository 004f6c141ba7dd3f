// BERT training end to end on the synthetic MLPerf-format shards (data_pipeline/bert_corpus):
// the tiny model learns the learnable corpus, a resumed run reproduces the loss curve bit for
// bit, MLLOG lines are well formed. Needs HDF5 (the shards), hence the _hdf5 suffix.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "data_pipeline/bert/bert_corpus.h"
#include "models/bert/bert_trainer.h"
#include "test_util.h"

namespace foldcore::bert {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("foldcore_bert_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Writes a learnable train/eval corpus of the given geometry under dir/train and dir/eval.
void write_corpus(const fs::path& dir, int seq_len, int preds, int vocab, int64_t train_n, int64_t eval_n) {
  data::BertCorpusOptions o;
  o.kind = data::BertCorpusKind::learnable;
  o.seq_len = seq_len;
  o.max_predictions = preds;
  o.vocab_size = vocab;
  o.seed = 11;
  o.max_sentence_len = 16;
  data::write_bert_corpus((dir / "train").string(), o, train_n, 2);
  o.eval = true;
  data::write_bert_corpus((dir / "eval").string(), o, eval_n, 1);
}

BertConfig tiny(int64_t hidden, int64_t layers, int64_t vocab, int64_t seq_len, int64_t preds) {
  BertConfig c;
  c.name = "tiny";
  c.model.vocab_size = vocab;
  c.model.hidden = hidden;
  c.model.num_layers = layers;
  c.model.num_heads = 4;
  c.model.ffn = 2 * hidden;
  c.model.max_positions = seq_len;
  c.train.max_seq_length = seq_len;
  c.train.max_predictions = preds;
  return c;
}

// The learnable corpus predicts a masked token from its left neighbour (≈90% at best); chance
// is 1/1000 (the grammar region). The tiny config must get past 3× chance within ~a minute.
TEST(BertTraining, TinyModelLearnsTheSyntheticCorpus) {
  TempDir tmp("learn");
  write_corpus(tmp.path, 64, 10, 2000, 4096, 256);
  BertRunOptions o;
  o.config = tiny(64, 2, 2000, 64, 10);
  BertTrainConfig& t = o.config.train;
  t.lr = 5e-3f;
  t.warmup_steps = 20;
  t.total_steps = 300;
  t.batch_size = 32;
  t.eval_every_samples = 32 * 50;
  t.target_mlm_accuracy = 0.009;  // 9× chance: stops there (300 steps measured 0.018)
  t.seed = 5;
  o.measure_peak = false;
  o.log = [](const std::string&) {};
  auto train = open_bert_shards((tmp.path / "train").string(), t.batch_size, t.seed);
  const auto eval = load_bert_eval_set((tmp.path / "eval").string(), 64);
  const BertRunResult r = run_bert_training(o, *train, eval);
  std::printf("tiny BERT: %lld steps, MLM accuracy %.4f, loss %.3f → %.3f, %.1f seq/s\n",
              static_cast<long long>(r.steps), r.final_mlm_accuracy, r.losses.front(), r.losses.back(),
              r.sequences_per_second);
  EXPECT_GE(r.final_mlm_accuracy, 3.0 / 1000);
  EXPECT_TRUE(r.reached_target) << "accuracy " << r.final_mlm_accuracy;
  EXPECT_LT(r.losses.back(), r.losses.front());
}

// 6 steps in one go vs 3 steps, checkpoint, then a new process-like run resuming to 6: the last
// three losses are identical bit for bit (params, LAMB moments, step, dropout RNG offset and data
// position all restored). Dropout on and 2 micro-batches per step to cover both.
TEST(BertTraining, ResumeReproducesTheLossCurveExactly) {
  TempDir tmp("resume");
  write_corpus(tmp.path, 32, 5, 2000, 256, 32);
  BertRunOptions o;
  o.config = tiny(32, 1, 2000, 32, 5);
  o.config.train.total_steps = 6;
  o.config.train.warmup_steps = 2;
  o.config.train.batch_size = 8;
  o.config.train.grad_accumulation = 2;
  o.config.train.lr = 1e-2f;
  o.measure_peak = false;
  std::vector<std::string> lines;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  const auto eval = load_bert_eval_set((tmp.path / "eval").string(), 16);
  auto run = [&](int64_t steps, const std::string& ckpt) {
    BertRunOptions oo = o;
    oo.max_steps = steps;
    oo.checkpoint = ckpt;
    auto train = open_bert_shards((tmp.path / "train").string(), 8, 3);
    return run_bert_training(oo, *train, eval);
  };
  const BertRunResult full = run(6, "");
  const std::string ckpt = (tmp.path / "ckpt.h5").string();
  const BertRunResult first = run(3, ckpt);
  const BertRunResult resumed = run(6, ckpt);
  ASSERT_EQ(full.losses.size(), 6u);
  ASSERT_EQ(resumed.start_step, 3);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first.losses[static_cast<size_t>(i)], full.losses[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(resumed.losses[static_cast<size_t>(i)], full.losses[static_cast<size_t>(i + 3)]) << i;
  }
  EXPECT_EQ(resumed.final_mlm_accuracy, full.final_mlm_accuracy);
  EXPECT_NE(full.losses[3], full.losses[4]);  // the curve moves: equality above is not vacuous

  // MLLOG: every line parses as ":::MLLOG {...}" with the required keys, and the run is bracketed.
  int run_start = 0, run_stop = 0, evals = 0;
  for (const std::string& l : lines) {
    if (l.rfind(":::MLLOG ", 0) != 0) continue;
    for (const char* k : {"\"namespace\"", "\"time_ms\"", "\"event_type\"", "\"key\"", "\"value\"", "\"metadata\""})
      EXPECT_NE(l.find(k), std::string::npos) << l;
    run_start += l.find("\"key\": \"run_start\"") != std::string::npos;
    run_stop += l.find("\"key\": \"run_stop\"") != std::string::npos;
    evals += l.find("\"key\": \"eval_accuracy\"") != std::string::npos;
  }
  EXPECT_EQ(run_start, 3);
  EXPECT_EQ(run_stop, 3);
  EXPECT_EQ(evals, 3);
  for (const char* k : {"\"time_to_train_s\"", "\"sequences_per_s\"", "\"tokens_per_s\"", "\"model_tflops\"",
                        "\"mfu\"", "\"peak_memory_bytes\"", "\"token_slots\"", "\"padding_fraction\""})
    EXPECT_NE(full.summary_json.find(k), std::string::npos) << k;
  EXPECT_GE(full.token_slots, full.tokens);  // slots hold the real tokens plus padding
}

// A packed step trains the same sequences as the unpacked one (the loader packs each batch's
// sequences into fewer rows): without dropout the first loss (before any update) is the same up
// to f32 summation order, 1e-4 on a loss of ~8.
TEST(BertTraining, PackedStepHasTheUnpackedLoss) {
  TempDir tmp("pack");
  write_corpus(tmp.path, 64, 10, 2000, 64, 16);
  BertRunOptions o;
  o.config = tiny(32, 1, 2000, 64, 10);
  o.config.model.dropout = 0.f;
  o.config.train.batch_size = 16;
  o.max_steps = 1;
  o.measure_peak = false;
  o.log = [](const std::string&) {};
  const auto eval = load_bert_eval_set((tmp.path / "eval").string(), 16);
  auto plain = open_bert_shards((tmp.path / "train").string(), 16, 3, false);
  auto packed = open_bert_shards((tmp.path / "train").string(), 16, 3, true);
  const BertBatch pb = packed->next();
  EXPECT_TRUE(pb.packed);
  EXPECT_LT(pb.input_ids.size(0), 16);  // the corpus has short sequences: rows are saved
  EXPECT_EQ(pb.nsp_labels.numel(), 16);
  packed->seek(0);
  const BertRunResult a = run_bert_training(o, *plain, eval), b = run_bert_training(o, *packed, eval);
  ASSERT_EQ(a.losses.size(), 1u);
  ASSERT_EQ(b.losses.size(), 1u);
  EXPECT_NEAR(a.losses[0], b.losses[0], 1e-4);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.tokens, b.tokens);
}

}  // namespace
}  // namespace foldcore::bert
