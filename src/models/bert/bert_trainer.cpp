#include "models/bert/bert_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "autograd/autograd.h"
#include "autograd/param_cast_cache.h"
#include "core/allocator.h"
#include "core/random.h"
#include "data_pipeline/bert/bert_data.h"
#include "data_pipeline/bert/bert_packing.h"
#include "kernels/gemm.h"
#include "models/bert/bert_mllog.h"
#include "models/bert/bert_model.h"
#include "nn/checkpoint.h"
#include "nn/optimizer.h"

namespace foldcore::bert {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// data::BertLoader epoch after epoch; position = batches delivered since epoch 0. With packing,
// each batch's batch_size sequences are packed (data/bert_packing.h, best-fit decreasing) into
// as few rows as fit, so a step trains the same sequences with fewer padding slots.
class ShardSource final : public BertBatchSource {
 public:
  ShardSource(const std::string& spec, int64_t batch_size, uint64_t seed, bool packing)
      : loader_(data::list_bert_shards(spec), options(batch_size, seed)), packing_(packing) {
    pack_.seq_len = loader_.geometry().seq_len;
    pack_.max_predictions = loader_.geometry().max_predictions + kMaxSequencesPerRow;
    FC_CHECK(loader_.batches_per_epoch() > 0, "bert: the training set '", spec, "' has fewer than ", batch_size,
             " sequences (one batch)");
  }
  BertBatch next() override {
    data::BertExamples rows;
    if (!loader_.next(rows)) {
      loader_.start_epoch(++epoch_);
      FC_CHECK(loader_.next(rows), "bert: empty epoch");
    }
    ++position_;
    if (packing_) return data::make_packed_bert_batch(rows, data::pack_bert_examples(rows, pack_), pack_);
    std::vector<int64_t> idx(static_cast<size_t>(rows.num));
    for (int64_t i = 0; i < rows.num; ++i) idx[static_cast<size_t>(i)] = i;
    return data::make_bert_batch(rows, idx);
  }
  // The next batch's rows are not read, nor packed.
  void skip() override {
    if (!loader_.skip()) {
      loader_.start_epoch(++epoch_);
      FC_CHECK(loader_.skip(), "bert: empty epoch");
    }
    ++position_;
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override {
    FC_CHECK(position >= 0, "bert: negative data position ", position);
    const int64_t per_epoch = loader_.batches_per_epoch();
    epoch_ = position / per_epoch;
    loader_.start_epoch(epoch_);
    for (int64_t i = 0; i < position % per_epoch; ++i) loader_.skip();
    position_ = position;
  }

 private:
  static data::BertLoaderOptions options(int64_t batch_size, uint64_t seed) {
    data::BertLoaderOptions o;
    o.batch_size = static_cast<int>(batch_size);
    o.seed = seed;
    return o;
  }
  data::BertLoader loader_;
  bool packing_;
  data::BertPackingOptions pack_;
  int64_t epoch_ = 0, position_ = 0;
};

// Work of one batch: real tokens, the attention's Σ len² over real sequences, MLM rows, sequences.
struct BatchWork {
  double tokens = 0, attn_sq = 0, predictions = 0, sequences = 0;
};
BatchWork batch_work(const BertBatch& b) {
  BatchWork w;
  const std::vector<int64_t> mask = b.input_mask.to_vector_i64();
  auto add_segment = [&](int64_t begin, int64_t end) {
    double len = 0;
    for (int64_t i = begin; i < end; ++i) len += static_cast<double>(mask[static_cast<size_t>(i)]);
    w.tokens += len;
    w.attn_sq += len * len;
  };
  if (b.packed) {
    const std::vector<int64_t> cu = b.cu_seqlens.to_vector_i64();
    for (size_t s = 0; s + 1 < cu.size(); ++s) add_segment(cu[s], cu[s + 1]);
  } else {
    const int64_t l = b.input_ids.size(1);
    for (int64_t r = 0; r < b.input_ids.size(0); ++r) add_segment(r * l, (r + 1) * l);
  }
  for (float x : b.masked_lm_weights.to_vector()) w.predictions += x > 0.f ? 1 : 0;
  w.sequences = static_cast<double>(b.nsp_labels.numel());
  return w;
}

// "key": <integer> from the flat JSON we write into checkpoint meta.
int64_t meta_int(const std::string& meta, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = meta.find(k);
  FC_CHECK(at != std::string::npos, "bert: checkpoint meta has no '", key, "': ", meta);
  return std::strtoll(meta.c_str() + at + k.size(), nullptr, 10);
}

struct Eval {
  int64_t correct = 0, count = 0;
  double accuracy() const { return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0; }
};

}  // namespace

std::unique_ptr<BertBatchSource> open_bert_shards(const std::string& spec, int64_t batch_size, uint64_t seed,
                                                  bool packing) {
  return std::make_unique<ShardSource>(spec, batch_size, seed, packing);
}

std::vector<BertBatch> load_bert_eval_set(const std::string& spec, int64_t batch_size, int64_t max_samples) {
  FC_CHECK(batch_size > 0, "bert: eval batch size ", batch_size);
  std::vector<BertBatch> out;
  int64_t taken = 0;
  for (const std::string& f : data::list_bert_shards(spec)) {
    const data::BertExamples ex = data::read_bert_shard(f);
    for (int64_t i = 0; i < ex.num && (max_samples <= 0 || taken < max_samples);) {
      const int64_t n = std::min({batch_size, ex.num - i, max_samples > 0 ? max_samples - taken : batch_size});
      std::vector<int64_t> rows(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) rows[static_cast<size_t>(j)] = i + j;
      out.push_back(data::make_bert_batch(ex, rows));
      i += n;
      taken += n;
    }
  }
  FC_CHECK(!out.empty(), "bert: the eval set '", spec, "' is empty");
  return out;
}

double measure_gemm_peak_flops(Device device, DType precision, int64_t n) {
  if (n <= 0) n = device.is_cuda() ? 8192 : 1024;
  Generator g(99);
  const DType dt = device.is_cuda() ? precision : DType::f32;
  const Tensor a = randn({n, n}, g).to(dt).to(device), b = randn({n, n}, g).to(dt).to(device);
  Tensor c = Tensor::empty({n, n}, dt, device);
  ops::gemm(a, b, c);  // warm-up (thread pool, kernel selection)
  synchronize(device);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    ops::gemm(a, b, c);
    synchronize(device);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
}

BertRunResult run_bert_training(const BertRunOptions& o, BertBatchSource& train, const std::vector<BertBatch>& eval) {
  const BertTrainConfig& tc = o.config.train;
  FC_CHECK(o.precision == DType::f32 || o.precision == DType::bf16, "bert: precision must be fp32 or bf16");
  FC_CHECK(tc.grad_accumulation > 0 && tc.batch_size > 0, "bert: batch_size ", tc.batch_size,
           " and grad_accumulation ", tc.grad_accumulation, " must be positive");
  FC_CHECK(!eval.empty(), "bert: no eval batches");
  const int64_t dp = o.dp_size;
  FC_CHECK(dp >= 1 && o.dp_rank >= 0 && o.dp_rank < dp, "bert: data-parallel rank ", o.dp_rank, " of ", dp);
  FC_CHECK(dp == 1 || (o.average_gradients && o.sum_over_ranks),
           "bert: data parallelism over ", dp, " ranks needs the gradient-averaging and sum hooks");
  const int64_t max_steps = o.max_steps > 0 ? o.max_steps : tc.total_steps;
  MlLogger mllog(o.log);
  auto say = [&](const std::string& s) {
    if (o.log) o.log(s); else std::printf("%s\n", s.c_str());
  };
  const auto t_init = Clock::now();
  mllog.event("cache_clear", "true");
  mllog.start("init_start");
  for (const auto& [k, v] : MlLogger::Metadata{
           {"submission_benchmark", json_string("bert")}, {"submission_org", json_string("foldcore")},
           {"submission_division", json_string("closed")}, {"submission_status", json_string("research")},
           {"submission_platform", json_string(o.device.str())},
           {"global_batch_size", json_number(static_cast<double>(tc.batch_size * tc.grad_accumulation * dp))},
           {"gradient_accumulation_steps", json_number(static_cast<double>(tc.grad_accumulation))},
           {"max_sequence_length", json_number(static_cast<double>(tc.max_seq_length))},
           {"opt_name", json_string("lamb")}, {"opt_base_learning_rate", json_float(tc.lr)},
           {"opt_lamb_epsilon", json_float(tc.eps)}, {"opt_lamb_beta_1", json_float(tc.beta1)},
           {"opt_lamb_beta_2", json_float(tc.beta2)}, {"opt_lamb_weight_decay_rate", json_float(tc.weight_decay)},
           {"opt_learning_rate_warmup_steps", json_number(static_cast<double>(tc.warmup_steps))},
           {"opt_learning_rate_training_steps", json_number(static_cast<double>(tc.total_steps))},
           {"opt_lamb_learning_rate_decay_poly_power", json_float(tc.decay_power)},
           {"num_warmup_steps", json_number(static_cast<double>(tc.warmup_steps))},
           {"start_warmup_step", json_number(0)}, {"seed", json_number(static_cast<double>(tc.seed))}})
    mllog.event(k, v);

  Allocator& alloc = default_allocator(o.device);
  alloc.reset_peak();
  Generator init_rng(tc.seed), dropout_rng(tc.seed + 1);
  autograd::ParamStore params(o.device);
  BertForPreTraining model(nn::Scope{&params, &init_rng, &dropout_rng, ""}, o.config.model);
  params.finalize();
  nn::LambConfig lc;
  lc.lr = tc.lr;
  lc.beta1 = tc.beta1;
  lc.beta2 = tc.beta2;
  lc.eps = tc.eps;
  lc.weight_decay = tc.weight_decay;
  nn::Lamb lamb(params.values(), params.grads(), params.segments(), lc);
  nn::BertScheduleConfig sc;
  sc.base_lr = tc.lr;
  sc.end_lr = tc.end_lr;
  sc.warmup_steps = tc.warmup_steps;
  sc.total_steps = tc.total_steps;
  sc.power = tc.decay_power;
  const nn::BertSchedule schedule(sc);

  std::vector<Shape> shapes;
  for (const std::string& n : params.names()) shapes.push_back(params.get(n).shape());
  auto checkpoint_view = [&] {
    nn::CheckpointData d;
    d.params = params.named_values();
    d.optimizer = lamb.checkpoint_state(params.names(), shapes);
    return d;
  };
  int64_t samples_total = 0;
  if (!o.init_checkpoint.empty()) {
    nn::CheckpointData d;
    d.params = params.named_values();
    nn::LoadOptions lo;
    lo.allow_extra = lo.params_only = true;
    nn::load_checkpoint(o.init_checkpoint, d, lo);
    say("bert: initialised the parameters from " + o.init_checkpoint);
  }
  BertRunResult r;
  if (!o.checkpoint.empty() && std::filesystem::exists(o.checkpoint)) {
    nn::CheckpointData d = checkpoint_view();
    nn::load_checkpoint(o.checkpoint, d);
    FC_CHECK(lamb.step_count() == d.step, "bert: checkpoint step ", d.step, " vs optimizer state ",
             lamb.step_count());
    dropout_rng.set_offset(static_cast<uint64_t>(meta_int(d.meta, "dropout_rng_offset")));
    train.seek(meta_int(d.meta, "data_position"));
    samples_total = meta_int(d.meta, "samples");
    r.start_step = d.step;
    say("bert: resumed from " + o.checkpoint + " at step " + std::to_string(d.step));
  }
  auto save = [&] {
    nn::CheckpointData d = checkpoint_view();
    d.step = lamb.step_count();
    d.meta = "{\"dropout_rng_offset\":" + std::to_string(dropout_rng.offset()) +
             ",\"data_position\":" + std::to_string(train.position()) + ",\"samples\":" +
             std::to_string(samples_total) + ",\"model\":" + json_string(o.config.name) + "}";
    nn::save_checkpoint(o.checkpoint, d);
  };
  r.num_parameters = params.num_elements();
  r.peak_tflops = o.measure_peak ? measure_gemm_peak_flops(o.device, o.precision) / 1e12 : 0.0;

  auto run_eval = [&] {
    mllog.start("eval_start", "null", {{"epoch_num", json_number(static_cast<double>(samples_total))}});
    model.train(false);
    autograd::NoGradGuard ng;
    std::unique_ptr<autograd::AutocastGuard> ac;
    if (o.precision == DType::bf16) ac = std::make_unique<autograd::AutocastGuard>(DType::bf16);
    Eval e;
    for (const BertBatch& b : eval) {
      const BertOutputs out = model.forward(b, true);
      e.correct += out.mlm_correct;
      e.count += out.mlm_count;
    }
    model.train(true);
    const double acc = e.accuracy();
    mllog.end("eval_stop", "null", {{"epoch_num", json_number(static_cast<double>(samples_total))}});
    mllog.event("eval_accuracy", json_number(acc), {{"epoch_num", json_number(static_cast<double>(samples_total))}});
    r.evals.emplace_back(samples_total, acc);
    r.final_mlm_accuracy = acc;
    return acc;
  };

  mllog.end("init_stop");
  mllog.start("run_start");
  const auto t_run = Clock::now();
  double train_seconds = 0, flops = 0;
  const int64_t eval_every = tc.eval_every_samples;
  int64_t next_eval = eval_every > 0 ? (samples_total / eval_every + 1) * eval_every : 0;
  // MLPerf pairs each block_stop with its block_start by first_epoch_num (the block's first sample).
  int64_t block_first = samples_total;
  mllog.start("block_start", "null", {{"first_epoch_num", json_number(static_cast<double>(block_first))},
                                      {"epoch_count", json_number(static_cast<double>(eval_every))}});
  const Tensor accum_grad = Tensor::full(Shape{}, 1.0 / static_cast<double>(tc.grad_accumulation), DType::f32, o.device);
  // Parameter leaf → its segment of the flat gradient buffer (the gradient-ready hook's report).
  std::unordered_map<const autograd::VariableImpl*, ops::ParamSegment> segment_of;
  for (size_t i = 0; i < params.names().size(); ++i)
    segment_of[params.get(params.names()[i]).impl().get()] = params.segments()[i];
  bool stopped = false;
  for (int64_t step = lamb.step_count(); step < max_steps && !stopped; ++step) {
    const auto t_step = Clock::now();
    params.zero_grad();
    double loss_sum = 0;
    // This step's local work: samples, tokens, token slots, model FLOPs (summed over ranks below).
    std::vector<double> work(4, 0.0);
    // Under bf16 the parameters are cast once for the step's micro-batches (the whole flat buffer in
    // one kernel, each weight's cast a view of it); the scope ends before the optimizer changes them.
    std::optional<autograd::ParamCastScope> param_casts;
    param_casts.emplace(o.precision == DType::bf16 ? params.values() : Tensor(), DType::bf16);
    for (int64_t micro = 0; micro < tc.grad_accumulation * dp; ++micro) {
      if (micro / tc.grad_accumulation != o.dp_rank) {  // another rank's micro-batch: not made
        train.skip();
        continue;
      }
      const BertBatch batch = train.next();
      const BatchWork w = batch_work(batch);
      Variable loss;
      {
        std::unique_ptr<autograd::AutocastGuard> ac;
        if (o.precision == DType::bf16) ac = std::make_unique<autograd::AutocastGuard>(DType::bf16);
        loss = model.forward(batch).loss;
      }
      {
        // The last local micro-batch: a parameter's gradient is final for the step once this
        // backward is done with it, and its bucket may go out (data parallelism).
        std::optional<autograd::GradReadyHookGuard> hook;
        if (dp > 1 && o.gradient_ready && micro == (o.dp_rank + 1) * tc.grad_accumulation - 1)
          hook.emplace([&](const autograd::VariableImpl& leaf) {
            const auto it = segment_of.find(&leaf);
            if (it != segment_of.end())
              o.gradient_ready(params.grads(), params.segments(), it->second.offset, it->second.size);
          });
        autograd::backward({loss}, {accum_grad});
      }
      loss_sum += loss.value().item();
      work[0] += w.sequences;
      work[1] += w.tokens;
      work[2] += static_cast<double>(batch.input_ids.numel());
      work[3] += 3 * model.forward_flops(w.tokens, w.tokens > 0 ? w.attn_sq / w.tokens : 0, w.predictions, w.sequences);
    }
    param_casts.reset();
    if (dp > 1) {
      o.average_gradients(params.grads(), params.segments());
      work.push_back(loss_sum);
      o.sum_over_ranks(work);
      loss_sum = work[4];
    }
    r.samples += static_cast<int64_t>(work[0]);
    samples_total += static_cast<int64_t>(work[0]);
    r.tokens += static_cast<int64_t>(work[1]);
    r.token_slots += static_cast<int64_t>(work[2]);
    flops += work[3];
    const nn::ClipResult clip = nn::clip_grad_norm(params.grads(), tc.max_grad_norm);
    if (clip.finite()) {
      lamb.set_lr(schedule.lr(lamb.step_count()));
      lamb.step(clip.scale);
    } else {
      say("bert: step " + std::to_string(step + 1) + ": non-finite gradient norm, update skipped");
    }
    synchronize(o.device);
    train_seconds += seconds_since(t_step);
    r.losses.push_back(loss_sum / static_cast<double>(tc.grad_accumulation * dp));
    r.steps = step + 1;
    if (o.progress_every > 0 && r.steps % o.progress_every == 0) {
      std::ostringstream s;
      s << "bert: step " << r.steps << " loss " << r.losses.back() << " lr " << lamb.lr() << " grad_norm " << clip.norm;
      say(s.str());
    }
    if (!o.checkpoint.empty() && o.write_checkpoint && o.checkpoint_every > 0 && r.steps % o.checkpoint_every == 0)
      save();
    if (eval_every > 0 && samples_total >= next_eval) {
      next_eval += eval_every;
      mllog.end("block_stop", "null", {{"first_epoch_num", json_number(static_cast<double>(block_first))}});
      if (run_eval() >= tc.target_mlm_accuracy && o.stop_at_target) {
        r.reached_target = true;
        stopped = true;
      } else if (r.steps < max_steps) {
        block_first = samples_total;
        mllog.start("block_start", "null", {{"first_epoch_num", json_number(static_cast<double>(block_first))},
                                            {"epoch_count", json_number(static_cast<double>(eval_every))}});
      }
    }
  }
  if (!r.reached_target && (r.evals.empty() || r.evals.back().first != samples_total)) {
    if (eval_every > 0) mllog.end("block_stop", "null", {{"first_epoch_num", json_number(static_cast<double>(block_first))}});
    r.reached_target = run_eval() >= tc.target_mlm_accuracy;
  }
  if (!o.checkpoint.empty() && o.write_checkpoint) save();
  r.time_to_train_seconds = seconds_since(t_run);
  mllog.end("run_stop", "null", {{"status", json_string(r.reached_target ? "success" : "aborted")}});
  mllog.event("train_samples", json_number(static_cast<double>(samples_total)));
  int64_t eval_samples = 0;
  for (const BertBatch& b : eval) eval_samples += b.nsp_labels.numel();
  mllog.event("eval_samples", json_number(static_cast<double>(eval_samples)));

  r.train_seconds = train_seconds;
  if (train_seconds > 0) {
    r.sequences_per_second = static_cast<double>(r.samples) / train_seconds;
    r.tokens_per_second = static_cast<double>(r.tokens) / train_seconds;
    r.model_tflops = flops / train_seconds / 1e12;
    r.rule_tflops = 6.0 * static_cast<double>(r.num_parameters) * static_cast<double>(r.tokens) / train_seconds / 1e12;
  }
  // Throughput is the job's (all ranks); the MFU is against the peak of all ranks' devices.
  r.mfu = r.peak_tflops > 0 ? r.model_tflops / (r.peak_tflops * static_cast<double>(dp)) : 0.0;
  r.peak_bytes = alloc.stats().peak;
  std::ostringstream js;
  js << "{\"benchmark\": \"bert\", \"config\": " << json_string(o.config.name) << ", \"device\": "
     << json_string(o.device.str()) << ", \"precision\": " << json_string(o.precision == DType::bf16 ? "bf16" : "fp32")
     << ", \"dp_ranks\": " << dp << ", \"parameters\": " << r.num_parameters << ", \"steps\": " << r.steps << ", \"samples\": " << r.samples
     << ", \"tokens\": " << r.tokens << ", \"token_slots\": " << r.token_slots << ", \"padding_fraction\": "
     << json_number(r.token_slots > 0 ? 1.0 - static_cast<double>(r.tokens) / static_cast<double>(r.token_slots) : 0.0)
     << ", \"final_loss\": " << json_number(r.losses.empty() ? std::nan("") : r.losses.back())
     << ", \"mlm_accuracy\": " << json_number(r.final_mlm_accuracy)
     << ", \"target_mlm_accuracy\": " << json_number(tc.target_mlm_accuracy)
     << ", \"reached_target\": " << (r.reached_target ? "true" : "false")
     << ", \"time_to_train_s\": " << json_number(r.time_to_train_seconds)
     << ", \"init_s\": " << json_number(std::chrono::duration<double>(t_run - t_init).count())
     << ", \"train_s\": " << json_number(train_seconds) << ", \"sequences_per_s\": " << json_number(r.sequences_per_second)
     << ", \"tokens_per_s\": " << json_number(r.tokens_per_second) << ", \"model_tflops\": " << json_number(r.model_tflops)
     << ", \"rule_6nd_tflops\": " << json_number(r.rule_tflops) << ", \"peak_tflops\": " << json_number(r.peak_tflops)
     << ", \"mfu\": " << json_number(r.mfu) << ", \"peak_memory_bytes\": " << r.peak_bytes << "}";
  r.summary_json = js.str();
  return r;
}

}  // namespace foldcore::bert
