#include "models/alphafold/training/af2_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "autograd/engine.h"
#include "autograd/param_store.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/philox.h"
#include "data_pipeline/training/feature_store.h"
#include "data_pipeline/training/loader.h"
#include "data_pipeline/training/training_sample.h"
#include "models/alphafold/params/af2_export.h"
#include "models/alphafold/training/af2_validation.h"
#include "models/alphafold/training/keep_blocks.h"
#include "models/alphafold/training/step_sample.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/config_yaml.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/params/param_table.h"
#include "models/alphafold/training/train_step.h"
#include "nn/checkpoint.h"
#include "nn/optimizer.h"

namespace foldcore::af2 {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Sample b of a loader batch in train_step's layout (step_sample.h), its loss arrays checked.
StepSample sample_of(const data::TrainingBatch& batch, int64_t b, const std::set<std::string>& recycled) {
  const int64_t num_recycles = batch.at("num_recycles").select(0, b).to(Device::cpu()).to_vector_i64().at(0);
  std::map<std::string, Tensor> arrays;
  for (const auto& [name, t] : batch.features) arrays[name] = t.select(0, b).to(Device::cpu());
  std::ostringstream origin;
  origin << "training sample of chain " << batch.chains.at(static_cast<size_t>(b)) << " (epoch " << batch.epoch
         << ", batch " << batch.step << ")";
  StepSample s = split_step_sample(arrays, num_recycles + 1, recycled, origin.str());
  for (const std::string& key : Af2LossBatch::keys())
    FC_CHECK(s.last_slice.count(key), origin.str(), ": the loss needs '", key, "', which the sample lacks");
  return s;
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
    if (s >= 0 && s <= step) kept += line + "\n";  // step 0: the validation before training
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

// ---- data parallelism (see af2_trainer.h) ------------------------------------------------------

// Dropout's Philox offset for one sample: the sample's global number (epoch · samples per epoch +
// its position in the epoch's global order) times kDropoutStreamsPerSample. The same whichever
// rank runs the sample and whatever ran before it, so any dp size draws one process's masks.
constexpr uint64_t kDropoutStreamsPerSample = uint64_t{1} << 20;
uint64_t dropout_offset_of(const data::SampleKey& key, int64_t samples_per_epoch) {
  return static_cast<uint64_t>(key.epoch * samples_per_epoch + key.sample_index) * kDropoutStreamsPerSample;
}

// The last local example's gradient, copied into the reduce buffer segment by segment and handed
// to the reducer as the engine reports the segments final during its backward; fill_rest() copies
// the ones it did not report, after the backward.
class ContributionWriter {
 public:
  ContributionWriter(TrainParallel& par, const autograd::ParamStore& params, Tensor buffer)
      : par_(&par), params_(&params), buffer_(std::move(buffer)), segments_(params.segments()) {
    for (size_t i = 0; i < segments_.size(); ++i) index_[params.get(params.names()[i]).impl().get()] = i;
    done_.assign(segments_.size(), false);
  }
  void begin() { std::fill(done_.begin(), done_.end(), false); }
  // The GradReadyHook: `leaf` (a parameter, else ignored) has its final gradient.
  void on_ready(const autograd::VariableImpl& leaf) {
    const auto it = index_.find(&leaf);
    if (it != index_.end() && !done_[it->second]) write(it->second);
  }
  void fill_rest() {
    for (size_t i = 0; i < segments_.size(); ++i)
      if (!done_[i]) write(i);
  }

 private:
  void write(size_t i) {
    const ops::ParamSegment& sg = segments_[i];
    buffer_.narrow(0, sg.offset, sg.size).copy_(params_->grads().narrow(0, sg.offset, sg.size));
    done_[i] = true;
    par_->mark_ready(sg.offset, sg.size);
  }
  TrainParallel* par_;
  const autograd::ParamStore* params_;
  Tensor buffer_;
  std::vector<ops::ParamSegment> segments_;
  std::unordered_map<const autograd::VariableImpl*, size_t> index_;
  std::vector<bool> done_;
};

// The validator of validation.chains (none when validation.every is 0); with validation.held_out
// the loader's candidates become every other chain of the store.
std::unique_ptr<Af2Validator> make_validator(const TrainConfig& cfg, const data::FeatureStoreReader& reader,
                                             std::vector<int64_t>* train_indices) {
  if (cfg.validation.every == 0 || cfg.validation.chains.empty()) return nullptr;
  auto v = std::make_unique<Af2Validator>(reader, cfg.validation.chains, cfg.data, cfg.run.seed);
  if (cfg.validation.held_out) {
    const std::set<std::string> held(cfg.validation.chains.begin(), cfg.validation.chains.end());
    train_indices->clear();
    for (int64_t i = 0; i < reader.size(); ++i)
      if (!held.count(reader.entries()[static_cast<size_t>(i)].name)) train_indices->push_back(i);
    FC_CHECK(!train_indices->empty(), "train: every chain of store ", reader.path(),
             " is a held-out validation chain (validation.chains, validation.held_out: true); nothing is left to "
             "train on");
  }
  return v;
}

}  // namespace

// A model config's architecture: its memory, runtime and precision settings (recomputation, kept
// blocks, the stream dtype of bf16 training) set to fixed values, so a run may resume with any of
// them changed.
static Af2Config architecture_of(Af2Config c) {
  const Af2Config defaults;
  c.recompute_blocks = 0;
  c.recompute_keep_blocks = 0;
  c.recompute_keep_extra_msa_blocks = 0;
  c.bf16_training_streams = defaults.bf16_training_streams;
  return c;
}

std::string architecture_meta(const Af2Config& model, int64_t num_params) {
  return std::string("{\"architecture\": ") + json_string(af2_config_to_yaml(architecture_of(model))) +
         ", \"num_parameters\": " + std::to_string(num_params) + "}";
}

bool same_architecture(const std::string& stored, const Af2Config& model, int64_t num_params) {
  if (stored == architecture_meta(model, num_params)) return true;
  const std::string key = "{\"architecture\": ", count_key = ", \"num_parameters\": ";
  if (stored.rfind(key, 0) != 0) return false;
  try {
    size_t end = 0;
    const std::string yaml = json_unstring(stored, key.size(), &end);
    if (stored.compare(end, count_key.size(), count_key) != 0 ||
        stored.substr(end + count_key.size()) != std::to_string(num_params) + "}")
      return false;
    return af2_config_to_yaml(architecture_of(parse_af2_config(yaml, "checkpoint meta"))) ==
           af2_config_to_yaml(architecture_of(model));
  } catch (const Error&) {
    return false;  // not a config this build reads: another architecture
  }
}

double clipped_example_scale(double norm, double max_norm, int64_t batch_size) {
  FC_CHECK(batch_size >= 1, "train: batch size ", batch_size);
  const double clip = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
  return clip / static_cast<double>(batch_size);
}

void accumulate_clipped_gradient(std::vector<float>& acc, const Tensor& grads, double norm, double max_norm,
                                 int64_t batch_size) {
  FC_CHECK(static_cast<int64_t>(acc.size()) == grads.numel(), "train: gradient accumulator of ", acc.size(),
           " elements for a gradient of ", grads.numel());
  const float scale = static_cast<float>(clipped_example_scale(norm, max_norm, batch_size));
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
  // Data parallelism: B = the global batch, split over the dp ranks.
  TrainParallel* const par = o.parallel;
  const int64_t dp_size = par ? par->dp_size() : 1;
  const bool writer = par == nullptr || par->writes_outputs();
  const int64_t global_batch = cfg.optim.batch_size;
  FC_CHECK(global_batch % dp_size == 0, "train: the global batch (optim.batch_size ", global_batch, " in ",
           cfg.path.empty() ? std::string("the config") : cfg.path, ") must be a multiple of --dp ", dp_size);
  if (o.resume) {
    FC_CHECK(fs::exists(ckpt_path), "train: --resume but ", ckpt_path.string(), " does not exist");
  } else {
    FC_CHECK(!fs::exists(ckpt_path) && !fs::exists(metrics_path), "train: ", out_dir.string(),
             " already holds a run (", kTrainCheckpointName, " or ", kTrainMetricsName,
             "); pass --resume to continue it or choose another --out_dir");
  }
  if (par) par->barrier();  // every rank has checked the run folder before rank 0 writes to it
  // The store is opened before anything is built or written, so a wrong path fails at once.
  data::FeatureStoreReader reader(o.store_path);

  // The model, its optimiser and EMA. Initialisation and dropout draw from their own Philox
  // generators of the run seed; dropout's position is checkpointed.
  autograd::ParamStore params(o.device);
  Generator init_rng(cfg.run.seed);
  Generator dropout_rng(cfg.run.seed ^ 0x9e3779b97f4a7c15ULL);
  AlphaFold model(nn::Scope{&params, &init_rng, cfg.run.dropout ? &dropout_rng : nullptr, ""}, cfg.model);
  model.train(cfg.run.dropout);
  // Training runs unchunked, as AlphaFold2 (its subbatching is low_memory = not is_training): the
  // YAML's chunk_size is the inference chunk, which in the step's no-grad forwards (recycling,
  // the first pass of recomputed segments) only costs time; validation predicts with it.
  model.set_chunk_size(0);
  params.finalize();
  // DAP / BP: the model runs split over the grid's groups (af2_train_step then sums the split
  // stacks' gradients over them, before the clipping norm is taken).
  const bool model_split = par != nullptr && par->setup_model(model);
  // The split stacks' gradient sums, started during each backward (model_parallel.h).
  std::optional<ModelParallelGradReducer> mp_grads;
  if (model_split) mp_grads.emplace(model, par->bucket_bytes());
  Af2ParamTable table;
  model.add_af2_params(table);
  const auto shapes = af2_official_shapes(table, cfg.model);  // af2_train_step's gradient report
  const std::string meta = architecture_meta(cfg.model, params.num_elements());
  if (!o.init_from.empty()) {
    // Before the EMA is made: it starts from the loaded weights.
    FC_CHECK(!o.resume, "train: --init_from and --resume exclude each other (--resume continues ",
             ckpt_path.string(), " with its optimiser; --init_from starts a new run from another run's weights)");
    const nn::CheckpointSummary summary = nn::inspect_checkpoint(o.init_from);
    FC_CHECK(same_architecture(summary.meta, cfg.model, params.num_elements()), "train: --init_from ", o.init_from,
             " was written by another architecture than model config ", cfg.model_path,
             " (architecture or parameter count differ)");
    nn::CheckpointData from;
    from.params["values"] = params.values();
    Tensor ema_values = Tensor::zeros(params.values().shape(), params.values().dtype(), params.values().device());
    Tensor ema_step = i64_scalar(0);
    from.optimizer["ema"] = {{"ema", ema_values}, {"step", ema_step}};
    nn::load_checkpoint(o.init_from, from, nn::LoadOptions{.allow_extra = true});
    if (o.init_from_ema) {
      FC_CHECK(ema_step.data<int64_t>()[0] > 0, "train: --init_from ", o.init_from,
               " holds no EMA yet (no step was taken); use its weights (without --init_from_ema)");
      Tensor values = params.values();  // a handle on the live buffer
      values.copy_(ema_values);
    }
    if (writer)
      log::info("train: starting from the ", o.init_from_ema ? "EMA weights" : "weights", " of ", o.init_from,
                " (its step ", summary.step, "); new optimiser state");
  }
  nn::Adam adam(params.values(), params.grads(), params.segments(), cfg.optim.adam);
  nn::Ema ema(params.values(), nn::EmaConfig{cfg.optim.ema_decay, false});
  const nn::AlphaFoldSchedule schedule(cfg.optim.schedule);
  Af2LossConfig loss_config;
  loss_config.weights = LossWeights::stage(cfg.stage, cfg.model.heads.ptm);
  TrainState state{&params, &adam, &ema};

  if (o.resume) {
    const nn::CheckpointSummary summary = nn::inspect_checkpoint(ckpt_path.string());
    FC_CHECK(same_architecture(summary.meta, cfg.model, params.num_elements()), "train: checkpoint ", ckpt_path.string(),
             " was written by another architecture than model config ", cfg.model_path,
             " (architecture or parameter count differ); resume it with the config that wrote it");
    nn::CheckpointData into = state.data(meta);
    nn::load_checkpoint(ckpt_path.string(), into);
    dropout_rng.set_offset(static_cast<uint64_t>(state.get(state.dropout_offset)));
    if (writer) truncate_metrics(metrics_path, state.get(state.step));
    if (writer) log::info("train: resumed ", ckpt_path.string(), " at step ", state.get(state.step));
  }
  int64_t step = state.get(state.step);
  FC_CHECK(step <= max_steps, "train: the checkpoint is at step ", step, ", past --max_steps ", max_steps);

  data::LoaderOptions lo;
  lo.workers = cfg.run.workers;
  lo.batch_size = global_batch / dp_size;
  lo.seed = cfg.run.seed;
  // One loader batch per step on every rank: the position is in global steps (step · B samples),
  // so a checkpoint resumes under any dp size.
  lo.start_batch = step;
  lo.rank = par ? par->dp_rank() : 0;
  lo.world_size = static_cast<int>(dp_size);
  const std::unique_ptr<Af2Validator> validator = make_validator(cfg, reader, &lo.indices);
  const data::TrainingSampleConfig sample_config = cfg.data;
  data::TrainingLoader loader(
      reader, [sample_config](const data::TrainingChain& chain, const data::SampleKey& key) {
        return data::make_training_sample(chain, sample_config, key);
      },
      lo);
  const std::set<std::string> recycled = recycled_keys(cfg.data);

  // Created only now: a run that fails on its inputs (store, device, checkpoint) writes nothing.
  std::ofstream metrics;
  if (writer) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    FC_CHECK(!ec, "train: cannot create the run folder (--out_dir) ", out_dir.string(), ": ", ec.message());
    for (const std::string& left : nn::remove_checkpoint_leftovers(ckpt_path.string()))
      log::warn("train: removed ", left, ", a checkpoint write that did not finish (its process was killed)");
    metrics.open(metrics_path, std::ios::app);
    FC_CHECK(metrics.good(), "train: cannot open ", metrics_path.string());
  }
  if (writer) log::info("train: ", cfg.name, " (", cfg.model.preset, ", ", params.num_elements(), " parameters), store ",
            o.store_path, " (", reader.size(), " chains), ", loader.batches_per_epoch(),
            " steps per epoch, batch ", cfg.optim.batch_size,
            dp_size > 1 ? " over " + std::to_string(dp_size) + " dp ranks" : std::string(), ", steps ", step, " → ",
            max_steps);

  const int64_t n = params.grads().numel();
  std::vector<float> acc(static_cast<size_t>(n));
  TrainSummary summary;
  // recompute_keep_blocks: auto, settled by the run's first one or two training steps
  // (keep_blocks.h). Their allocator peak resets leave the run's earlier peak in peak_before_auto.
  KeepBlocksAuto keep_auto(model, o.device);
  size_t peak_before_auto = 0;
  double run_seconds = 0;
  int64_t run_steps = 0;
  auto checkpoint = [&] {
    summary.checkpoint = ckpt_path.string();
    if (!writer) return;  // rank 0 writes; the replicas hold the same state
    state.set(state.step, step);
    state.set(state.dropout_offset, static_cast<int64_t>(dropout_rng.offset()));
    nn::save_checkpoint(ckpt_path.string(), state.data(meta));
  };
  // Data parallelism: the reduce buffer (the last local example's gradient, reduced during its
  // backward) and the base (the earlier local examples' clipped sum).
  const int64_t samples_per_epoch = loader.batches_per_epoch() * global_batch;
  Tensor reduce_buffer, base;
  std::optional<ContributionWriter> contribution;
  if (par) {
    reduce_buffer = Tensor::zeros(Shape{n}, DType::f32, o.device);
    par->attach(reduce_buffer, params.segments());
    contribution.emplace(*par, params, reduce_buffer);
  }

  // Validation of the weights or (validation.ema) of their EMA, swapped in for the scoring and
  // back after it (exact copies: the training continues bit for bit).
  auto validate_now = [&]() {
    model.set_chunk_size(cfg.model.chunk_size);  // inference's chunk for the prediction
    struct Unchunk {
      AlphaFold* m;
      ~Unchunk() { m->set_chunk_size(0); }
    } unchunk{&model};
    if (!cfg.validation.ema) return validator->run(model, o.device);
    ema.swap_with_params();
    struct SwapBack {
      nn::Ema* e;
      ~SwapBack() { e->swap_with_params(); }
    } swap_back{&ema};
    return validator->run(model, o.device);
  };
  if (validator && step == 0 && max_steps > 0) {  // the untrained model's scores: the curve's start
    const ValidationResult v = validate_now();
    if (writer) {
      metrics << "{\"step\": 0" << Af2Validator::json_fields(v) << "}\n";
      metrics.flush();
      log::info("step 0 ", Af2Validator::summary(v));
    }
  }
  while (step < max_steps) {
    const auto t0 = Clock::now();
    const data::TrainingBatch batch = loader.next();
    const int64_t local_batch = static_cast<int64_t>(batch.chains.size());  // this rank's share
    std::fill(acc.begin(), acc.end(), 0.f);
    std::map<std::string, double> terms;
    double loss = 0, norm_sum = 0;
    int64_t nonfinite = 0;
    if (contribution) contribution->begin();
    double last_scale = 0;  // dp: the last local example's clip factor / B
    // One process stops at the first non-finite example; dp ranks run all theirs (they must make
    // the same collective calls), and the step is skipped if any rank saw one.
    for (int64_t b = 0; b < local_batch && (par != nullptr || nonfinite == 0); ++b) {
      const StepSample s = sample_of(batch, b, recycled);
      const uint64_t dropout_start = dropout_offset_of(batch.keys.at(static_cast<size_t>(b)), samples_per_epoch);
      dropout_rng.set_offset(dropout_start);
      const bool overlapped = par != nullptr && b == local_batch - 1;
      if (overlapped && b > 0) {
        Tensor host = Tensor::empty(Shape{n}, DType::f32);
        std::copy(acc.begin(), acc.end(), host.data<float>());
        base = host.to(o.device);
        par->add_base(base);  // goes out during this example's forward and backward
      }
      // The hook reports a parameter once nothing later in a backward adds to it; af2_train_step
      // runs ONE backward per example (a second one into the same gradients would need the
      // segments reported only after it). Split model: the hook feeds the model-parallel sums
      // (every example), and a split parameter reaches the dp reduction once its sum is done.
      std::optional<autograd::GradReadyHookGuard> hook;
      int64_t dp_launched_in_backward = 0;  // the dp buckets out when the backward's last hook ran
      if (mp_grads) {
        ModelParallelGradReducer::FinalFn to_dp;
        if (overlapped) to_dp = [&](const autograd::VariableImpl& leaf) { contribution->on_ready(leaf); };
        mp_grads->begin(std::move(to_dp));
        hook.emplace([&](const autograd::VariableImpl& leaf) {
          mp_grads->on_ready(leaf);
          if (overlapped) dp_launched_in_backward = par->buckets_launched();
        });
      } else if (overlapped) {
        hook.emplace([&](const autograd::VariableImpl& leaf) {
          contribution->on_ready(leaf);
          dp_launched_in_backward = par->buckets_launched();
        });
      }
      if (keep_auto.active() && !keep_auto.resolved()) {
        peak_before_auto = std::max(peak_before_auto, default_allocator(o.device).stats().peak);
        keep_auto.before_step();
      }
      TrainStepResult r;
      try {
        r = af2_train_step(model, params, table, shapes, s.features, s.last_slice, loss_config, o.device, precision,
                           /*report_grads=*/false, mp_grads ? &*mp_grads : nullptr);
      } catch (OutOfMemoryError& e) {
        // Out of memory with blocks kept by auto: name the setting that trades the memory back.
        if (keep_auto.active())
          e.add_context("the step kept " + std::to_string(model.config().recompute_keep_blocks) + " of " +
                        std::to_string(cfg.model.num_evoformer_blocks) + " Evoformer blocks and " +
                        std::to_string(model.config().recompute_keep_extra_msa_blocks) + " of " +
                        std::to_string(cfg.model.num_extra_msa_blocks) +
                        " extra-MSA blocks (recompute_keep_blocks, recompute_keep_extra_msa_blocks: auto); fixed, "
                        "lower counts in " + cfg.model_path + " leave more memory");
        throw;
      }
      if (keep_auto.after_step() && writer) log::info("train: ", keep_auto.summary());
      hook.reset();
      FC_CHECK(dropout_rng.offset() - dropout_start < kDropoutStreamsPerSample, "train: one sample drew ",
               dropout_rng.offset() - dropout_start, " dropout streams, more than the ", kDropoutStreamsPerSample,
               " reserved per sample");
      // Model parallelism (DAP/BP): af2_train_step has summed the split stacks' gradients over
      // the model's groups (reduce_model_parallel_grads) before r.grad_norm was taken.
      const bool ok = std::isfinite(r.loss.loss) && std::isfinite(r.grad_norm);
      if (!ok) ++nonfinite;
      loss += r.loss.loss / static_cast<double>(global_batch);
      for (const auto& [name, v] : r.loss.terms) terms[name] += v / static_cast<double>(global_batch);
      norm_sum += r.grad_norm;
      if (overlapped) {
        if (run_steps == 0 && writer) {
          log::info("train: ", dp_launched_in_backward, " of ", par->num_buckets(),
                    " gradient buckets of the dp reduction went out during the backward of the step's last example");
          if (mp_grads)
            log::info("train: ", mp_grads->started_before_finish(), " of ", mp_grads->num_buckets(),
                      " model-parallel gradient buckets (the split stacks' sums over dap x bp) started during the "
                      "backward");
        }
        contribution->fill_rest();  // parameters the backward did not report (unused this step)
        last_scale = clipped_example_scale(r.grad_norm, cfg.optim.clip_grad_norm, global_batch);
      } else if (ok) {
        accumulate_clipped_gradient(acc, params.grads(), r.grad_norm, cfg.optim.clip_grad_norm, global_batch);
      }
    }
    if (par) {
      // Σ over the dp ranks of the clipped contributions and of the step's statistics.
      par->finish(last_scale);
      std::vector<double> v{loss, norm_sum, static_cast<double>(nonfinite)};
      for (const auto& [name, x] : terms) v.push_back(x);
      v = par->sum(v);
      loss = v[0];
      norm_sum = v[1];
      nonfinite = static_cast<int64_t>(v[2]);
      size_t k = 3;
      for (auto& [name, x] : terms) x = v[k++];
    }
    const bool finite = nonfinite == 0;
    const float lr = schedule.lr(adam.step_count());
    ++step;
    if (finite) {
      Tensor grads = params.grads();  // a handle on the flat gradient buffer
      if (par) {
        grads.copy_(reduce_buffer);
      } else {
        Tensor host = Tensor::empty(Shape{n}, DType::f32);
        std::copy(acc.begin(), acc.end(), host.data<float>());
        grads.copy_(host.to(grads.device()));
      }
      adam.set_lr(lr);
      adam.step(1.f);
      ema.update();
      state.set(state.nonfinite_in_a_row, 0);
    } else {
      state.set(state.skipped, state.get(state.skipped) + 1);
      state.set(state.nonfinite_in_a_row, state.get(state.nonfinite_in_a_row) + 1);
      if (writer)
        log::warn("train: step ", step, ": non-finite loss or gradient; skipped (", state.get(state.skipped),
                  " so far, ", state.get(state.nonfinite_in_a_row), " in a row)");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    run_seconds += seconds;
    ++run_steps;
    const size_t peak = std::max(peak_before_auto, default_allocator(o.device).stats().peak);

    std::ostringstream line;
    line << "{\"step\": " << step << ", \"loss\": " << fmt(loss);
    for (const auto& [name, v] : terms) line << ", " << json_string(name) << ": " << fmt(v);
    line << ", \"lr\": " << fmt(lr) << ", \"grad_norm\": " << fmt(norm_sum / static_cast<double>(global_batch))
         << ", \"step_seconds\": " << fmt(seconds)
         << ", \"samples_per_second\": " << fmt(static_cast<double>(global_batch) / seconds)
         << ", \"peak_memory_bytes\": " << peak << ", \"skipped\": " << (finite ? "false" : "true")
         << ", \"epoch\": " << batch.epoch << ", \"chains\": [";
    for (size_t b = 0; b < batch.chains.size(); ++b) line << (b ? ", " : "") << json_string(batch.chains[b]);
    line << "]";
    // Every rank validates (same weights, same result; a model split over ranks needs them all),
    // rank 0 writes.
    const bool validate = validator && (step % cfg.validation.every == 0 || step == max_steps);
    std::optional<ValidationResult> val;
    if (validate) val = validate_now();
    if (val) line << Af2Validator::json_fields(*val);
    line << "}";
    if (writer) {
      metrics << line.str() << "\n";
      metrics.flush();
      FC_CHECK(metrics.good(), "train: cannot write ", metrics_path.string());
    }

    if (writer && (step % cfg.run.log_every == 0 || step == max_steps)) {
      std::ostringstream p;
      p << "step " << step << "/" << max_steps << " loss " << loss;
      for (const auto& [name, v] : terms) p << " " << name << " " << v;
      const double mean = run_seconds / static_cast<double>(run_steps);
      p << " | lr " << lr << " | " << seconds << " s/step | " << static_cast<double>(global_batch) / seconds
        << " samples/s | ETA " << duration(mean * static_cast<double>(max_steps - step));
      log::info(p.str());
    }
    if (val && writer) log::info("step ", step, " ", Af2Validator::summary(*val));
    summary.last_loss = loss;
    if (step % cfg.run.checkpoint_every == 0 || step == max_steps) checkpoint();
    FC_CHECK(state.get(state.nonfinite_in_a_row) < cfg.run.max_nonfinite_in_a_row, "train: ",
             state.get(state.nonfinite_in_a_row), " non-finite steps in a row (last: step ", step,
             "; run.max_nonfinite_in_a_row = ", cfg.run.max_nonfinite_in_a_row, "); stopping. ",
             summary.checkpoint.empty() ? std::string("No checkpoint was written in this process")
                                        : "The last checkpoint is " + summary.checkpoint,
             ", metrics are in ", metrics_path.string());
    if (o.stop_requested && step < max_steps) {  // a stop signal: here, with a checkpoint of this step
      int64_t stop = o.stop_requested();
      if (par) stop = par->world_max(stop);
      if (stop != 0) {
        if (step % cfg.run.checkpoint_every != 0) checkpoint();
        if (writer)
          log::warn("train: stopped by signal ", stop, " (", strsignal(static_cast<int>(stop)), ") after step ", step,
                    " of ", max_steps, "; checkpoint ", summary.checkpoint, ": continue with --resume");
        // No rank leaves before rank 0's checkpoint is whole: a launcher that ends the job at the
        // first non-zero exit (srun --kill-on-bad-exit) would otherwise cut its write short.
        if (par) par->barrier();
        summary.stopped_by = static_cast<int>(stop);
        break;
      }
    }
  }
  summary.steps = step;
  summary.skipped = state.get(state.skipped);
  if (summary.checkpoint.empty() && fs::exists(ckpt_path)) summary.checkpoint = ckpt_path.string();
  return summary;
}

}  // namespace foldcore::af2
