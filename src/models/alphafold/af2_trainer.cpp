#include "models/alphafold/af2_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "autograd/param_store.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/philox.h"
#include "data_pipeline/feature_store.h"
#include "data_pipeline/loader.h"
#include "data_pipeline/training_sample.h"
#include "models/alphafold/af2_export.h"
#include "models/alphafold/alphafold.h"
#include "models/alphafold/config_yaml.h"
#include "models/alphafold/features.h"
#include "models/alphafold/param_table.h"
#include "models/alphafold/train_step.h"
#include "nn/checkpoint.h"
#include "nn/optimizer.h"

namespace foldcore::af2 {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// One sample of a loader batch in train_step's layout: the model features over the iterations the
// sample asks for (num_recycles + 1 of the R padded slices) and the loss's arrays at the last of
// them. Copies, so the pooled batch buffer can go back to the loader.
struct StepSample {
  Af2Features features;
  std::map<std::string, Tensor> last_slice;
};

StepSample sample_of(const data::TrainingBatch& batch, int64_t b, const std::set<std::string>& recycled) {
  const int64_t num_recycles = batch.at("num_recycles").select(0, b).to(Device::cpu()).to_vector_i64().at(0);
  const int64_t iterations = num_recycles + 1;
  std::map<std::string, Tensor> arrays;
  StepSample s;
  for (const auto& [name, t] : batch.features) {
    Tensor x = t.select(0, b).to(Device::cpu());
    if (recycled.count(name)) {
      FC_CHECK(x.dim() >= 1 && x.size(-1) >= iterations, "train: sample feature '", name, "' ", x.shape().str(),
               " has fewer than the ", iterations, " recycling iterations the sample asks for");
      x = x.narrow(-1, 0, iterations);
      s.last_slice[name] = x.select(-1, iterations - 1).clone();
      arrays[name] = x.clone();
    } else {
      s.last_slice[name] = x.clone();
    }
  }
  std::ostringstream origin;
  origin << "training sample of chain " << batch.chains.at(static_cast<size_t>(b)) << " (epoch " << batch.epoch
         << ", batch " << batch.step << ")";
  s.features = Af2Features::from_arrays(arrays, origin.str());
  for (const std::string& key : Af2LossBatch::keys())
    FC_CHECK(s.last_slice.count(key), origin.str(), ": the loss needs '", key, "', which the sample lacks");
  return s;
}

// The sample keys that carry the recycling axis: the processed features, which
// training_sample_layout lists before num_recycles (the labels follow it).
std::set<std::string> recycled_keys(const data::TrainingSampleConfig& config) {
  std::set<std::string> out;
  for (const data::TrainingFeatureSpec& spec : data::training_sample_layout(config)) {
    if (spec.name == "num_recycles") break;
    out.insert(spec.name);
  }
  return out;
}

Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::zeros(Shape{}, DType::i64);
  t.data<int64_t>()[0] = v;
  return t;
}

std::string fmt(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[40];
  std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

// Keeps the metrics lines of steps ≤ `step` (a resumed run rewrites what the killed one logged
// after its last checkpoint; a torn last line is dropped too). Written to a temporary name and
// renamed, so a failure keeps the old file.
void truncate_metrics(const fs::path& path, int64_t step) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    long long s = -1;
    if (line.empty() || line.back() != '}' || std::sscanf(line.c_str(), "{\"step\": %lld", &s) != 1) continue;
    if (s >= 1 && s <= step) kept += line + "\n";
  }
  in.close();
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    FC_CHECK(out.good(), "train: cannot write ", tmp.string());
  }
  fs::rename(tmp, path);
}

// Everything of a run that a checkpoint holds, as live tensors: saving reads them, loading
// writes into them.
struct TrainState {
  autograd::ParamStore* params;
  nn::Adam* adam;
  nn::Ema* ema;
  Tensor step = i64_scalar(0), dropout_offset = i64_scalar(0), skipped = i64_scalar(0),
         nonfinite_in_a_row = i64_scalar(0);

  nn::CheckpointData data(const std::string& meta) const {
    nn::CheckpointData d;
    d.params["values"] = params->values();
    d.optimizer["adam"] = adam->state();
    d.optimizer["ema"] = ema->state();
    d.optimizer["trainer"] = {{"step", step},
                              {"dropout_offset", dropout_offset},
                              {"skipped", skipped},
                              {"nonfinite_in_a_row", nonfinite_in_a_row}};
    d.step = step.data<int64_t>()[0];
    d.meta = meta;
    return d;
  }
  int64_t get(const Tensor& t) const { return t.data<int64_t>()[0]; }
  void set(Tensor& t, int64_t v) { t.data<int64_t>()[0] = v; }
};

// What must agree between a checkpoint and the run that loads it: the architecture and the
// parameter count. Stored as the checkpoint's meta JSON.
std::string architecture_meta(const TrainConfig& c, int64_t num_params) {
  // Memory/runtime settings are not architecture: a run may resume with recomputation toggled.
  Af2Config arch = c.model;
  arch.recompute_blocks = 0;
  return std::string("{\"architecture\": ") + json_string(af2_config_to_yaml(arch)) +
         ", \"num_parameters\": " + std::to_string(num_params) + "}";
}

}  // namespace

void accumulate_clipped_gradient(std::vector<float>& acc, const Tensor& grads, double norm, double max_norm,
                                 int64_t batch_size) {
  FC_CHECK(static_cast<int64_t>(acc.size()) == grads.numel(), "train: gradient accumulator of ", acc.size(),
           " elements for a gradient of ", grads.numel());
  FC_CHECK(batch_size >= 1, "train: batch size ", batch_size);
  const double clip = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
  const float scale = static_cast<float>(clip / static_cast<double>(batch_size));
  const Tensor g = grads.to(Device::cpu()).contiguous();
  const float* gp = g.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += scale * gp[i];
}

TrainSummary run_af2_training(const TrainRunOptions& o) {
  const TrainConfig& cfg = o.config;
  // bf16: autocast in the step (train_step.h); weights, Adam, EMA and the checkpoint stay fp32.
  const DType precision = train_precision(o.precision, "train: --precision");
  const int64_t max_steps = o.max_steps > 0 ? o.max_steps : cfg.run.max_steps;
  const fs::path out_dir(o.out_dir);
  const fs::path ckpt_path = out_dir / kTrainCheckpointName;
  const fs::path metrics_path = out_dir / kTrainMetricsName;
  FC_CHECK(nn::checkpoint_supported(), "train: this build has no HDF5, which checkpoints need");
  if (o.resume) {
    FC_CHECK(fs::exists(ckpt_path), "train: --resume but ", ckpt_path.string(), " does not exist");
  } else {
    FC_CHECK(!fs::exists(ckpt_path) && !fs::exists(metrics_path), "train: ", out_dir.string(),
             " already holds a run (", kTrainCheckpointName, " or ", kTrainMetricsName,
             "); pass --resume to continue it or choose another --out_dir");
  }
  // The store is opened before anything is built or written, so a wrong path fails at once.
  data::FeatureStoreReader reader(o.store_path);

  // The model, its optimiser and EMA. Initialisation and dropout draw from their own Philox
  // generators of the run seed; dropout's position is checkpointed.
  autograd::ParamStore params(o.device);
  Generator init_rng(cfg.run.seed);
  Generator dropout_rng(cfg.run.seed ^ 0x9e3779b97f4a7c15ULL);
  AlphaFold model(nn::Scope{&params, &init_rng, cfg.run.dropout ? &dropout_rng : nullptr, ""}, cfg.model);
  model.train(cfg.run.dropout);
  params.finalize();
  Af2ParamTable table;
  model.add_af2_params(table);
  const auto shapes = af2_official_shapes(table, cfg.model);  // af2_train_step's gradient report
  nn::Adam adam(params.values(), params.grads(), params.segments(), cfg.optim.adam);
  nn::Ema ema(params.values(), nn::EmaConfig{cfg.optim.ema_decay, false});
  const nn::AlphaFoldSchedule schedule(cfg.optim.schedule);
  Af2LossConfig loss_config;
  loss_config.weights = LossWeights::stage(cfg.stage, cfg.model.heads.ptm);
  TrainState state{&params, &adam, &ema};
  const std::string meta = architecture_meta(cfg, params.num_elements());

  if (o.resume) {
    const nn::CheckpointSummary summary = nn::inspect_checkpoint(ckpt_path.string());
    FC_CHECK(summary.meta == meta, "train: checkpoint ", ckpt_path.string(),
             " was written by another architecture than model config ", cfg.model_path,
             " (architecture or parameter count differ); resume it with the config that wrote it");
    nn::CheckpointData into = state.data(meta);
    nn::load_checkpoint(ckpt_path.string(), into);
    dropout_rng.set_offset(static_cast<uint64_t>(state.get(state.dropout_offset)));
    truncate_metrics(metrics_path, state.get(state.step));
    log::info("train: resumed ", ckpt_path.string(), " at step ", state.get(state.step));
  }
  int64_t step = state.get(state.step);
  FC_CHECK(step <= max_steps, "train: the checkpoint is at step ", step, ", past --max_steps ", max_steps);

  data::LoaderOptions lo;
  lo.workers = cfg.run.workers;
  lo.batch_size = cfg.optim.batch_size;
  lo.seed = cfg.run.seed;
  lo.start_batch = step;  // one loader batch per step: resume where the checkpoint left off
  const data::TrainingSampleConfig sample_config = cfg.data;
  data::TrainingLoader loader(
      reader, [sample_config](const data::TrainingChain& chain, const data::SampleKey& key) {
        return data::make_training_sample(chain, sample_config, key);
      },
      lo);
  const std::set<std::string> recycled = recycled_keys(cfg.data);

  // Created only now: a run that fails on its inputs (store, device, checkpoint) writes nothing.
  fs::create_directories(out_dir);
  std::ofstream metrics(metrics_path, std::ios::app);
  FC_CHECK(metrics.good(), "train: cannot open ", metrics_path.string());
  log::info("train: ", cfg.name, " (", cfg.model.preset, ", ", params.num_elements(), " parameters), store ",
            o.store_path, " (", reader.size(), " chains), ", loader.batches_per_epoch(),
            " steps per epoch, batch ", cfg.optim.batch_size, ", steps ", step, " → ", max_steps);

  const int64_t n = params.grads().numel();
  std::vector<float> acc(static_cast<size_t>(n));
  TrainSummary summary;
  double run_seconds = 0;
  int64_t run_steps = 0;
  auto checkpoint = [&] {
    state.set(state.step, step);
    state.set(state.dropout_offset, static_cast<int64_t>(dropout_rng.offset()));
    nn::save_checkpoint(ckpt_path.string(), state.data(meta));
    summary.checkpoint = ckpt_path.string();
  };

  while (step < max_steps) {
    const auto t0 = Clock::now();
    const data::TrainingBatch batch = loader.next();
    const int64_t batch_size = static_cast<int64_t>(batch.chains.size());
    std::fill(acc.begin(), acc.end(), 0.f);
    std::map<std::string, double> terms;
    double loss = 0, norm_sum = 0;
    bool finite = true;
    for (int64_t b = 0; b < batch_size && finite; ++b) {
      const StepSample s = sample_of(batch, b, recycled);
      const TrainStepResult r =
          af2_train_step(model, params, table, shapes, s.features, s.last_slice, loss_config, o.device, precision);
      finite = std::isfinite(r.loss.loss) && std::isfinite(r.grad_norm);
      loss += r.loss.loss / static_cast<double>(batch_size);
      for (const auto& [name, v] : r.loss.terms) terms[name] += v / static_cast<double>(batch_size);
      norm_sum += r.grad_norm;
      if (!finite) break;
      accumulate_clipped_gradient(acc, params.grads(), r.grad_norm, cfg.optim.clip_grad_norm, batch_size);
    }
    const float lr = schedule.lr(adam.step_count());
    ++step;
    if (finite) {
      Tensor host = Tensor::empty(Shape{n}, DType::f32);
      std::copy(acc.begin(), acc.end(), host.data<float>());
      Tensor grads = params.grads();  // a handle on the flat gradient buffer
      grads.copy_(host.to(grads.device()));
      adam.set_lr(lr);
      adam.step(1.f);
      ema.update();
      state.set(state.nonfinite_in_a_row, 0);
    } else {
      state.set(state.skipped, state.get(state.skipped) + 1);
      state.set(state.nonfinite_in_a_row, state.get(state.nonfinite_in_a_row) + 1);
      log::warn("train: step ", step, ": non-finite loss or gradient; skipped (", state.get(state.skipped),
                " so far, ", state.get(state.nonfinite_in_a_row), " in a row)");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    run_seconds += seconds;
    ++run_steps;
    const size_t peak = default_allocator(o.device).stats().peak;

    std::ostringstream line;
    line << "{\"step\": " << step << ", \"loss\": " << fmt(loss);
    for (const auto& [name, v] : terms) line << ", " << json_string(name) << ": " << fmt(v);
    line << ", \"lr\": " << fmt(lr) << ", \"grad_norm\": " << fmt(norm_sum / static_cast<double>(batch_size))
         << ", \"step_seconds\": " << fmt(seconds)
         << ", \"samples_per_second\": " << fmt(static_cast<double>(batch_size) / seconds)
         << ", \"peak_memory_bytes\": " << peak << ", \"skipped\": " << (finite ? "false" : "true")
         << ", \"epoch\": " << batch.epoch << "}";
    metrics << line.str() << "\n";
    metrics.flush();
    FC_CHECK(metrics.good(), "train: cannot write ", metrics_path.string());

    if (step % cfg.run.log_every == 0 || step == max_steps) {
      std::ostringstream p;
      p << "step " << step << "/" << max_steps << " loss " << loss;
      for (const auto& [name, v] : terms) p << " " << name << " " << v;
      const double mean = run_seconds / static_cast<double>(run_steps);
      p << " | lr " << lr << " | " << seconds << " s/step | " << static_cast<double>(batch_size) / seconds
        << " samples/s | ETA " << duration(mean * static_cast<double>(max_steps - step));
      log::info(p.str());
    }
    summary.last_loss = loss;
    if (step % cfg.run.checkpoint_every == 0 || step == max_steps) checkpoint();
    FC_CHECK(state.get(state.nonfinite_in_a_row) < cfg.run.max_nonfinite_in_a_row, "train: ",
             state.get(state.nonfinite_in_a_row), " non-finite steps in a row (last: step ", step,
             "; run.max_nonfinite_in_a_row = ", cfg.run.max_nonfinite_in_a_row, "); stopping. ",
             summary.checkpoint.empty() ? std::string("No checkpoint was written in this process")
                                        : "The last checkpoint is " + summary.checkpoint,
             ", metrics are in ", metrics_path.string());
  }
  summary.steps = step;
  summary.skipped = state.get(state.skipped);
  if (summary.checkpoint.empty() && fs::exists(ckpt_path)) summary.checkpoint = ckpt_path.string();
  return summary;
}

}  // namespace foldcore::af2
