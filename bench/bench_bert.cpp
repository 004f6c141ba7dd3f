// BERT pre-training throughput: a few training steps (after warm-up steps) of the tiny config on
// the CPU, or of BERT-Large with --device cuda:0 (bf16 by default), on synthetic MLPerf-format
// shards (random tokens, BERT's length distribution) written to a temporary directory. Prints one
// JSON line: sequences/s, tokens/s, achieved TFLOP/s (exact matmul count and the 6·N·D rule),
// the GEMM peak it is measured against (OpenBLAS sgemm on the CPU), MFU, peak memory.
//   bench_bert [--device cpu|cuda:0] [--config tiny|large|PATH.yaml] [--steps N] [--batch_size B]
//              [--seq_len L] [--precision fp32|bf16] [--corpus DIR (keep the shards there)]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "bench/bench_util.h"
#include "core/device.h"

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_HDF5)
#include "data_pipeline/bert_corpus.h"
#include "models/bert/bert_trainer.h"

using namespace foldcore;

namespace {

bert::BertConfig tiny_config() {  // configs/bert/tiny.yaml
  bert::BertConfig c;
  c.name = "tiny";
  c.model.vocab_size = 2000;
  c.model.hidden = 64;
  c.model.num_layers = 2;
  c.model.num_heads = 4;
  c.model.ffn = 128;
  c.model.max_positions = 128;
  c.train.batch_size = 32;
  c.train.max_seq_length = 64;
  c.train.max_predictions = 10;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::cpu();
  std::string config, precision, corpus;
  int64_t steps = 0, batch = 0, seq_len = 0;
  for (int i = 1; i < argc; ++i) {
    auto val = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (!std::strcmp(argv[i], "--device")) dev = Device::parse(val());
    else if (!std::strcmp(argv[i], "--config")) config = val();
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoll(val());
    else if (!std::strcmp(argv[i], "--batch_size")) batch = std::stoll(val());
    else if (!std::strcmp(argv[i], "--seq_len")) seq_len = std::stoll(val());
    else if (!std::strcmp(argv[i], "--precision")) precision = val();
    else if (!std::strcmp(argv[i], "--corpus")) corpus = val();
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda:0] [--config tiny|large|PATH.yaml] [--steps N] "
                   "[--batch_size B] [--seq_len L] [--precision fp32|bf16] [--corpus DIR]\n", argv[0]);
      return 2;
    }
  }
  if (config.empty()) config = dev.is_cuda() ? "large" : "tiny";
  if (precision.empty()) precision = dev.is_cuda() ? "bf16" : "fp32";
  bert::BertConfig c;
  if (config == "tiny") {
    c = tiny_config();
  } else if (config != "large") {
#ifdef FOLDCORE_HAVE_YAML
    c = bert::load_bert_config(config);
#else
    std::fprintf(stderr, "bench_bert: no yaml-cpp in this build; use --config tiny|large\n");
    return 2;
#endif
  }
  if (batch > 0) c.train.batch_size = batch;
  if (seq_len > 0) c.train.max_seq_length = seq_len;
  if (dev.is_cuda() && !(dev.index < cuda_device_count())) {
    std::fprintf(stderr, "bench_bert: %s is not available\n", dev.str().c_str());
    return 2;
  }
  set_device(dev);
  const int64_t warmup = 2, timed = steps > 0 ? steps : (dev.is_cuda() ? 20 : 10);
  namespace fs = std::filesystem;
  const bool keep = !corpus.empty();
  const fs::path dir = keep ? fs::path(corpus) : fs::temp_directory_path() / ("bench_bert_" + std::to_string(::getpid()));
  data::BertCorpusOptions co;
  co.kind = data::BertCorpusKind::random;
  co.seq_len = static_cast<int>(c.train.max_seq_length);
  co.max_predictions = static_cast<int>(c.train.max_predictions);
  co.vocab_size = static_cast<int>(c.model.vocab_size);
  const int64_t rows = c.train.batch_size * c.train.grad_accumulation * (warmup + timed);
  data::write_bert_corpus((dir / "train").string(), co, rows, 1);
  co.eval = true;
  data::write_bert_corpus((dir / "eval").string(), co, c.train.batch_size, 1);

  bert::BertRunOptions o;
  o.config = c;
  o.config.train.total_steps = warmup + timed;
  o.config.train.eval_every_samples = 0;
  o.device = dev;
  o.precision = precision == "bf16" ? DType::bf16 : DType::f32;
  o.stop_at_target = false;
  o.log = [](const std::string&) {};
  const auto eval = bert::load_bert_eval_set((dir / "eval").string(), c.train.batch_size);
  auto train = bert::open_bert_shards((dir / "train").string(), c.train.batch_size, 1);
  // Warm-up run (allocator pools, thread pool, kernel selection) then the timed run.
  o.max_steps = warmup;
  o.measure_peak = false;
  bert::run_bert_training(o, *train, eval);
  train->seek(0);
  o.max_steps = timed;
  o.config.train.total_steps = timed;
  o.measure_peak = true;
  const bert::BertRunResult r = bert::run_bert_training(o, *train, eval);
  if (!keep) fs::remove_all(dir);
  bench::JsonLine()
      .str("bench", "bert")
      .str("case", c.name)
      .str("device", dev.str())
      .str("precision", precision)
      .integer("batch_size", c.train.batch_size)
      .integer("seq_len", c.train.max_seq_length)
      .integer("parameters", r.num_parameters)
      .integer("steps", r.steps)
      .num("ms_per_step", 1e3 * r.train_seconds / static_cast<double>(r.steps))
      .num("sequences_per_s", r.sequences_per_second)
      .num("tokens_per_s", r.tokens_per_second)
      .num("tflops", r.model_tflops)
      .num("tflops_6nd", r.rule_tflops)
      .num("peak_tflops", r.peak_tflops)
      .num("mfu", r.mfu)
      .integer("peak_memory_bytes", static_cast<long long>(r.peak_bytes))
      .print();
  return 0;
}

#else
int main() {
  std::fprintf(stderr, "bench_bert: needs the data pipeline and HDF5\n");
  return 0;
}
#endif
