// BERT pre-training, MLPerf Training style: LAMB with the reference's polynomial-decay schedule,
// bf16 autocast over fp32 master weights, gradient accumulation and clipping, masked-LM accuracy
// on the eval set every N samples until a target, MLLOG events, exact checkpoint/resume, and a
// throughput summary (sequences/s, tokens/s, TFLOP/s, MFU against a measured GEMM peak).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "data_pipeline/bert/bert_batch.h"
#include "kernels/optim.h"
#include "models/bert/bert_config.h"

namespace foldcore::bert {

// Training batches with a resumable position (batches delivered so far). Endless: epochs wrap.
class BertBatchSource {
 public:
  virtual ~BertBatchSource() = default;
  virtual BertBatch next() = 0;
  // Moves past the next batch (position + 1) without making it: a data-parallel rank skips the
  // other ranks' micro-batches. The default makes it and drops it.
  virtual void skip() { (void)next(); }
  virtual int64_t position() const = 0;
  virtual void seek(int64_t position) = 0;
};

// MLPerf HDF5 shards (a directory, glob or file) through data::BertLoader, epoch after epoch;
// `packing`: each batch's sequences are packed into rows (data_pipeline/bert/bert_packing.h).
std::unique_ptr<BertBatchSource> open_bert_shards(const std::string& spec, int64_t batch_size, uint64_t seed,
                                                  bool packing = false);
// The whole eval set (or its first max_samples rows; 0 = all), in file order, in batches.
std::vector<BertBatch> load_bert_eval_set(const std::string& spec, int64_t batch_size, int64_t max_samples = 0);

struct BertRunOptions {
  BertConfig config;
  int64_t max_steps = 0;  // optimizer steps this run may reach (0: config.train.total_steps)
  Device device = Device::cpu();
  DType precision = DType::f32;  // f32 or bf16 (autocast; fp32 master weights and optimizer)
  std::string checkpoint;        // save here (every checkpoint_every steps and at the end);
                                 // resumed from when the file exists at start
  bool write_checkpoint = true;  // false: resume from `checkpoint` but never write it (all ranks
                                 // of a data-parallel job but one)
  int64_t checkpoint_every = 0;
  std::string init_checkpoint;   // parameters only (e.g. MLPerf's converted TF checkpoint)
  bool stop_at_target = true;    // stop at target_mlm_accuracy (MLPerf time-to-train)
  bool measure_peak = true;      // time a GEMM for the MFU denominator
  std::function<void(const std::string&)> log;  // MLLOG and progress lines (empty: stdout)
  int64_t progress_every = 0;    // progress line every N steps (0: none)

  // Data parallelism over dp_size ranks, this one being dp_rank (foldcore bert --dp N). A step's
  // global batch is grad_accumulation × dp_size micro-batches taken from `train` in order; rank r
  // trains micro-batches r·a … r·a + a − 1 of them and skips the others' (BertBatchSource::skip:
  // positions, resume and the sample order stay those of one process; the shard source makes only
  // this rank's batches). N ranks with accumulation a thus equal one process with
  // accumulation a·N (exactly so without dropout; with dropout the masks differ).
  // average_gradients: replaces the flat gradient buffer by its mean over the ranks
  // (dist::GradReducer); sum_over_ranks: sums a few doubles over the ranks in place. Both are
  // required when dp_size > 1; `train` must deliver the same batches on every rank.
  int dp_rank = 0, dp_size = 1;
  std::function<void(const Tensor& grads, const std::vector<ops::ParamSegment>& segments)> average_gradients;
  std::function<void(std::vector<double>& values)> sum_over_ranks;
  // Optional: called during the backward of this rank's last micro-batch of a step for each
  // parameter segment [offset, offset + length) of the flat gradient buffer as soon as its
  // gradient is final (the autograd engine's gradient-ready hook), so its all-reduce can start
  // while the backward goes on; average_gradients then completes the rest. Legal because BERT's
  // clipping comes after the mean: the reduction is a plain sum of the accumulated gradients.
  std::function<void(const Tensor& grads, const std::vector<ops::ParamSegment>& segments, int64_t offset,
                     int64_t length)>
      gradient_ready;
};

struct BertRunResult {
  int64_t start_step = 0, steps = 0;     // first step of this run (resume) and the last reached
  int64_t samples = 0, tokens = 0;       // trained in this run (tokens: real ones)
  int64_t token_slots = 0;               // rows × L of the batches trained (tokens ÷ slots:
                                         // the packing efficiency; 1 − that: padding fraction)
  std::vector<double> losses;            // per optimizer step of this run (mean over micro-batches)
  std::vector<std::pair<int64_t, double>> evals;  // (samples trained in total, MLM accuracy)
  double final_mlm_accuracy = -1;
  bool reached_target = false;
  double train_seconds = 0, time_to_train_seconds = 0;
  double sequences_per_second = 0, tokens_per_second = 0;
  double model_tflops = 0;   // achieved, exact matmul count (bert_model.cpp forward_flops ×3)
  double rule_tflops = 0;    // 6·params·tokens rule, for comparison
  double peak_tflops = 0, mfu = 0;
  int64_t num_parameters = 0;
  size_t peak_bytes = 0;
  std::string summary_json;
};

BertRunResult run_bert_training(const BertRunOptions& options, BertBatchSource& train,
                                const std::vector<BertBatch>& eval);

// The GEMM throughput the MFU is measured against: f32 sgemm (OpenBLAS) on the CPU, the
// precision's GEMM on CUDA; square n×n×n, best of a few repetitions, in FLOP/s. n = 0: 1024 on
// the CPU, 8192 on CUDA (1024³ leaves a Hopper GPU mostly idle: 108-123 against 783-800 TFLOP/s
// bf16 measured on an H200).
double measure_gemm_peak_flops(Device device, DType precision, int64_t n = 0);

}  // namespace foldcore::bert
