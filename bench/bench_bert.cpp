// BERT pre-training throughput, unpacked and packed in the same run: training steps (after
// warm-up steps) of the tiny config on the CPU, or of BERT-Large with --device cuda:0 (bf16 by
// default), on synthetic MLPerf-format data — random tokens with a Wikipedia-like length
// distribution (data::wikipedia_like_lengths: mean ≈ 0.49·L, about half the unpacked slots
// padding, as in MLPerf's phase-2 set at L = 512). --data shards (the default with HDF5) writes
// the data as HDF5 shards to a temporary directory and trains through the trainer's shard loader;
// --data memory (the default without HDF5, e.g. on a GPU machine without the HDF5 library) feeds
// the same generated rows in the loader's order from memory, so both give the same batches.
//
// Both modes train the same sequences (same shards, same loader seed), batch_size sequences per
// step; unpacked puts one per L-token row, packed (the trainer's --packing path,
// data_pipeline/bert/bert_packing.h) puts up to 3 per row, so a packed step has fewer rows. One JSON
// line per mode: ms/step, sequences/s, real tokens/s, slots/step, packing efficiency (real tokens
// ÷ slots), padding fraction, achieved TFLOP/s over the real tokens (exact matmul count and the
// 6·N·D rule), the GEMM peak it is measured against (OpenBLAS sgemm on the CPU), MFU, peak memory,
// the data source and the last step's loss (equal for --data shards and memory on the CPU).
// Then one line "mode": "packed_vs_unpacked" with the speed-up in real tokens/s.
//   bench_bert [--device cpu|cuda:0] [--config tiny|small|large|PATH.yaml] [--steps N]
//              [--batch_size B] [--seq_len L] [--precision fp32|bf16] [--packing both|on|off]
//              [--repeats R (timed runs per mode, fastest kept; default 3 on CPU, 1 on CUDA)]
//              [--data shards|memory] [--corpus DIR (keep the shards there)]
//              [--lengths_out FILE (the training rows' lengths, one per line, in generation order)]
// Configs: tiny = configs/bert/tiny.yaml (hidden 64, 2 layers, L 64); small = hidden 256,
// 4 layers, 4 heads, FFN 1024, vocab 8192, L 128 (wide enough on a CPU for the GEMMs, not the
// per-op overheads, to dominate); large = configs/bert/large.yaml (BERT-Large, L 512, batch 56).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

#include "bench/bench_util.h"
#include "core/device.h"
#include "core/error.h"

#ifdef FOLDCORE_HAVE_DATA
#include "data_pipeline/bert/bert_corpus.h"
#include "data_pipeline/bert/bert_packing.h"
#include "models/bert/bert_trainer.h"

using namespace foldcore;

namespace {

// The CPU configs: 4 heads, 128 positions, batch 32; tiny is configs/bert/tiny.yaml.
bert::BertConfig cpu_config(const char* name, int64_t vocab, int64_t hidden, int64_t layers, int64_t ffn,
                            int64_t seq_len, int64_t max_predictions) {
  bert::BertConfig c;
  c.name = name;
  c.model.vocab_size = vocab;
  c.model.hidden = hidden;
  c.model.num_layers = layers;
  c.model.num_heads = 4;
  c.model.ffn = ffn;
  c.model.max_positions = 128;
  c.train.batch_size = 32;
  c.train.max_seq_length = seq_len;
  c.train.max_predictions = max_predictions;
  return c;
}

// The shard path's batches without files: write_bert_corpus with one shard writes
// generate_bert_examples(options, rows, 0), and the trainer's loader visits its rows in the order
// data::bert_epoch_samples gives for its seed (rank 0 of 1, whole batches only); this source
// takes the same rows in the same order and builds the batches the same way.
class MemorySource final : public bert::BertBatchSource {
 public:
  MemorySource(data::BertExamples rows, int64_t batch_size, uint64_t seed, bool packed)
      : rows_(std::move(rows)), batch_(batch_size), seed_(seed), packed_(packed) {
    FC_CHECK(rows_.num >= batch_, "bench_bert: ", rows_.num, " training rows, fewer than one batch of ", batch_);
    pack_.seq_len = rows_.seq_len;
    pack_.max_predictions = rows_.max_predictions + kMaxSequencesPerRow;
    seek(0);
  }
  BertBatch next() override {
    if (cursor_ + static_cast<size_t>(batch_) > order_.size()) start_epoch(epoch_ + 1);
    data::BertExamples b = data::BertExamples::zeros(0, rows_.seq_len, rows_.max_predictions);
    for (int64_t i = 0; i < batch_; ++i) b.append(rows_, order_[cursor_++].row);
    ++position_;
    if (packed_) return data::make_packed_bert_batch(b, data::pack_bert_examples(b, pack_), pack_);
    std::vector<int64_t> idx(static_cast<size_t>(b.num));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    return data::make_bert_batch(b, idx);
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override {
    const int64_t per_epoch = rows_.num / batch_;
    start_epoch(position / per_epoch);
    cursor_ = static_cast<size_t>((position % per_epoch) * batch_);
    position_ = position;
  }

 private:
  void start_epoch(int64_t epoch) {
    epoch_ = epoch;
    order_ = data::bert_epoch_samples({rows_.num}, seed_, epoch, 0, 1);
    cursor_ = 0;
  }
  data::BertExamples rows_;
  int64_t batch_;
  uint64_t seed_;
  bool packed_;
  data::BertPackingOptions pack_;
  std::vector<data::BertSampleRef> order_;
  size_t cursor_ = 0;
  int64_t epoch_ = 0, position_ = 0;
};

const char kUsage[] =
    "usage: %s [--device cpu|cuda:0] [--config tiny|small|large|PATH.yaml] [--steps N] [--batch_size B] "
    "[--seq_len L] [--precision fp32|bf16] [--packing both|on|off] [--repeats R] [--data shards|memory] "
    "[--corpus DIR] [--lengths_out FILE]\n";

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::cpu();
  std::string config, precision, corpus, lengths_out, packing = "both";
  std::string data_mode = data::bert_hdf5_supported() ? "shards" : "memory";
  int64_t steps = 0, batch = 0, seq_len = 0, repeats = 0;
  for (int i = 1; i < argc; ++i) {
    auto val = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (!std::strcmp(argv[i], "--device")) dev = Device::parse(val());
    else if (!std::strcmp(argv[i], "--config")) config = val();
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoll(val());
    else if (!std::strcmp(argv[i], "--batch_size")) batch = std::stoll(val());
    else if (!std::strcmp(argv[i], "--seq_len")) seq_len = std::stoll(val());
    else if (!std::strcmp(argv[i], "--precision")) precision = val();
    else if (!std::strcmp(argv[i], "--packing")) packing = val();
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::stoll(val());
    else if (!std::strcmp(argv[i], "--corpus")) corpus = val();
    else if (!std::strcmp(argv[i], "--data")) data_mode = val();
    else if (!std::strcmp(argv[i], "--lengths_out")) lengths_out = val();
    else {
      std::fprintf(stderr, kUsage, argv[0]);
      return 2;
    }
  }
  if (packing != "both" && packing != "on" && packing != "off") {
    std::fprintf(stderr, "bench_bert: --packing must be both, on or off, got '%s'\n", packing.c_str());
    return 2;
  }
  if (data_mode != "shards" && data_mode != "memory") {
    std::fprintf(stderr, "bench_bert: --data must be shards or memory, got '%s'\n", data_mode.c_str());
    return 2;
  }
  if (data_mode == "shards" && !data::bert_hdf5_supported()) {
    std::fprintf(stderr, "bench_bert: --data shards needs HDF5, which this build has not; use --data memory\n");
    return 2;
  }
  if (data_mode == "memory" && !corpus.empty()) {
    std::fprintf(stderr, "bench_bert: --corpus keeps HDF5 shards; it needs --data shards\n");
    return 2;
  }
  if (config.empty()) config = dev.is_cuda() ? "large" : "tiny";
  if (precision.empty()) precision = dev.is_cuda() ? "bf16" : "fp32";
  if (precision != "fp32" && precision != "bf16") {
    std::fprintf(stderr, "bench_bert: --precision must be fp32 or bf16, got '%s'\n", precision.c_str());
    return 2;
  }
  bert::BertConfig c;
  if (config == "tiny") {
    c = cpu_config("tiny", 2000, 64, 2, 128, 64, 10);
  } else if (config == "small") {
    c = cpu_config("small", 8192, 256, 4, 1024, 128, 20);
  } else if (config != "large") {
#ifdef FOLDCORE_HAVE_YAML
    c = bert::load_bert_config(config);
#else
    std::fprintf(stderr, "bench_bert: no yaml-cpp in this build; use --config tiny|small|large\n");
    return 2;
#endif
  }
  if (batch > 0) c.train.batch_size = batch;
  if (seq_len > 0) c.train.max_seq_length = seq_len;
  if (dev.is_cuda() && !(dev.index < cuda_device_count())) {
    std::fprintf(stderr, "bench_bert: %s is not available (CUDA devices usable: %d)\n", dev.str().c_str(),
                 cuda_device_count());
    return 2;
  }
  set_device(dev);
  const int64_t warmup = 2, timed = steps > 0 ? steps : (dev.is_cuda() ? 20 : 10);
  if (repeats <= 0) repeats = dev.is_cuda() ? 1 : 3;
  namespace fs = std::filesystem;
  const bool keep = !corpus.empty();
  const fs::path dir = keep ? fs::path(corpus) : fs::temp_directory_path() / ("bench_bert_" + std::to_string(::getpid()));
  data::BertCorpusOptions co;
  co.kind = data::BertCorpusKind::random;
  co.seq_len = static_cast<int>(c.train.max_seq_length);
  co.max_predictions = static_cast<int>(c.train.max_predictions);
  co.vocab_size = static_cast<int>(c.model.vocab_size);
  co = data::wikipedia_like_lengths(co);
  // Warm-up and timed steps each start at batch 0, so the data holds warmup + timed batches.
  const int64_t rows = c.train.batch_size * c.train.grad_accumulation * std::max(warmup, timed);
  const bool shards = data_mode == "shards";
  data::BertExamples train_rows;  // --data memory, or for --lengths_out
  if (!shards || !lengths_out.empty()) train_rows = data::generate_bert_examples(co, rows, 0);
  if (!lengths_out.empty()) {
    std::ofstream f(lengths_out);
    for (int64_t i = 0; i < train_rows.num; ++i) f << train_rows.length(i) << '\n';
    if (!f.good()) {
      std::fprintf(stderr, "bench_bert: cannot write --lengths_out '%s'\n", lengths_out.c_str());
      return 2;
    }
  }
  std::vector<BertBatch> eval;
  if (shards) {
    data::write_bert_corpus((dir / "train").string(), co, rows, 1);
    co.eval = true;
    data::write_bert_corpus((dir / "eval").string(), co, c.train.batch_size, 1);
    eval = bert::load_bert_eval_set((dir / "eval").string(), c.train.batch_size);
  } else {
    // load_bert_eval_set's one batch: the eval rows in file order.
    co.eval = true;
    const data::BertExamples ex = data::generate_bert_examples(co, c.train.batch_size, 0);
    std::vector<int64_t> idx(static_cast<size_t>(ex.num));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    eval.push_back(data::make_bert_batch(ex, idx));
  }

  struct Mode {
    const char* name;
    bool packed;
    bert::BertRunResult result;
  };
  std::vector<Mode> modes;
  if (packing != "on") modes.push_back({"unpacked", false, {}});
  if (packing != "off") modes.push_back({"packed", true, {}});
  // One timed run of a mode (after a warm-up run on the first call: allocator pools, thread pool,
  // kernel selection), from batch 0, so both modes time the same sequences.
  auto timed_run = [&](const Mode& m, bool warm_up) {
    bert::BertRunOptions o;
    o.config = c;
    o.config.train.eval_every_samples = 0;
    o.device = dev;
    o.precision = precision == "bf16" ? DType::bf16 : DType::f32;
    o.stop_at_target = false;
    o.log = [](const std::string&) {};
    const uint64_t seed = 1;
    std::unique_ptr<bert::BertBatchSource> train;
    if (shards) train = bert::open_bert_shards((dir / "train").string(), c.train.batch_size, seed, m.packed);
    else train = std::make_unique<MemorySource>(train_rows, c.train.batch_size, seed, m.packed);
    if (warm_up) {
      o.max_steps = o.config.train.total_steps = warmup;
      o.measure_peak = false;
      bert::run_bert_training(o, *train, eval);
      train->seek(0);
    }
    o.max_steps = o.config.train.total_steps = timed;
    o.measure_peak = true;
    return bert::run_bert_training(o, *train, eval);
  };
  // Rounds alternate the modes, and each mode reports its fastest timed run: on a shared machine
  // load from other processes only ever slows a run down, and alternating spreads it over both.
  // Each mode's line is printed as soon as its last round ends (a run cut short by a time limit
  // still reports the modes it finished).
  auto print_mode = [&](const Mode& m) {
    const bert::BertRunResult& r = m.result;
    const double efficiency = static_cast<double>(r.tokens) / static_cast<double>(r.token_slots);
    bench::JsonLine()
        .str("bench", "bert")
        .str("case", c.name)
        .str("mode", m.name)
        .str("device", dev.str())
        .str("precision", precision)
        .str("data", data_mode)
        .integer("batch_size", c.train.batch_size)
        .integer("seq_len", c.train.max_seq_length)
        .integer("parameters", r.num_parameters)
        .integer("steps", r.steps)
        .integer("repeats", repeats)
        .num("ms_per_step", 1e3 * r.train_seconds / static_cast<double>(r.steps))
        .num("sequences_per_s", r.sequences_per_second)
        .num("tokens_per_s", r.tokens_per_second)
        .num("mean_length", static_cast<double>(r.tokens) / static_cast<double>(r.samples))
        .num("slots_per_step", static_cast<double>(r.token_slots) / static_cast<double>(r.steps))
        .num("packing_efficiency", efficiency)
        .num("padding_fraction", 1.0 - efficiency)
        .num("tflops", r.model_tflops)
        .num("tflops_6nd", r.rule_tflops)
        .num("peak_tflops", r.peak_tflops)
        .num("mfu", r.mfu)
        .integer("peak_memory_bytes", static_cast<long long>(r.peak_bytes))
        .num("last_loss", r.losses.empty() ? 0.0 : r.losses.back())
        .print();
    std::fflush(stdout);
  };
  for (int64_t round = 0; round < repeats; ++round)
    for (Mode& m : modes) {
      bert::BertRunResult r = timed_run(m, round == 0);
      if (round == 0 || r.train_seconds < m.result.train_seconds) m.result = std::move(r);
      if (round + 1 == repeats) print_mode(m);
    }
  if (shards && !keep) fs::remove_all(dir);
  if (modes.size() == 2) {
    const bert::BertRunResult &u = modes[0].result, &p = modes[1].result;
    bench::JsonLine()
        .str("bench", "bert")
        .str("case", c.name)
        .str("mode", "packed_vs_unpacked")
        .str("device", dev.str())
        .str("precision", precision)
        .num("speedup_tokens_per_s", p.tokens_per_second / u.tokens_per_second)
        .num("speedup_sequences_per_s", p.sequences_per_second / u.sequences_per_second)
        .num("slot_ratio", static_cast<double>(u.token_slots) / static_cast<double>(p.token_slots))
        .print();
  }
  return 0;
}

#else
int main() {
  std::fprintf(stderr, "bench_bert: needs the data pipeline (zlib; configure with -DFOLDCORE_DATA=ON)\n");
  return 0;
}
#endif
