// `foldcore bert`: BERT-Large pre-training benchmark in MLPerf Training style
// (models/bert/bert_trainer.h). Prints MLLOG lines while it runs and a final JSON summary
// (time-to-train, sequences/s, tokens/s, TFLOP/s, MFU, peak memory); exits 0 when the target
// masked-LM accuracy was reached (or no target: --target_mlm_accuracy 0), 1 otherwise.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/device.h"
#include "core/error.h"

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
#include "models/bert/bert_trainer.h"
#endif
#ifdef FOLDCORE_HAVE_MPI
#include <cmath>

#include "dist/grad_reducer.h"
#include "dist/runtime.h"
#endif

namespace foldcore::apps {

namespace {
struct BertArgs {
  std::string config = "configs/bert/large.yaml", train_dir, eval_dir, device = "cpu", precision = "fp32";
  std::string checkpoint, init_checkpoint;
  int64_t max_steps = 0, batch_size = 0, eval_every = 0, checkpoint_every = 0, eval_samples = -1, log_every = 0;
  int64_t grad_accumulation = 0, dp = 1;
  double target = -1;
  bool packing = false;
};
#if defined(FOLDCORE_HAVE_MPI) && defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
// The data-parallel job of `--dp N`: MPI runtime, world communicator on this rank's device (MPI
// for the CPU, NCCL for CUDA: GPU = local rank), gradient reducer; torn down in reverse order.
struct DataParallel {
  std::unique_ptr<dist::Runtime> runtime;
  std::unique_ptr<dist::Communicator> world;
  std::unique_ptr<dist::GradReducer> reducer;
  bool reported = false;  // the first step's overlap, printed once

  dist::GradReducer& reducer_for(const Tensor& grads, const std::vector<ops::ParamSegment>& segments) {
    if (!reducer) reducer = std::make_unique<dist::GradReducer>(*world, grads, segments);
    return *reducer;
  }

  void attach(int64_t ranks, bert::BertRunOptions& o) {
    // Checked from the launcher's environment before MPI starts, so a wrong launch is a plain error.
    const dist::LaunchEnv env = dist::detect_launch_env();
    FC_CHECK(env.world_size == ranks, "bert --dp ", ranks, ": this job has ", env.world_size,
             " processes; launch it as mpirun -np ", ranks, " foldcore bert --dp ", ranks, " …");
    int argc = 0;
    char** argv = nullptr;  // MPI_Init_thread accepts no arguments
    runtime = std::make_unique<dist::Runtime>(argc, argv);
    FC_CHECK(runtime->size() == ranks, "bert --dp ", ranks, ": this job has ", runtime->size(),
             " processes; launch it as mpirun -np ", ranks, " foldcore bert --dp ", ranks, " …");
    if (o.device.is_cuda()) o.device = runtime->device(DeviceType::cuda);
    set_device(o.device);
    world = runtime->world(o.device);
    o.dp_rank = world->rank();
    o.dp_size = world->size();
    // Buckets go out during the backward of the step's last local micro-batch (gradient_ready);
    // finish() launches the rest and averages.
    o.gradient_ready = [this](const Tensor& grads, const std::vector<ops::ParamSegment>& segments, int64_t offset,
                              int64_t length) {
      reducer_for(grads, segments).mark_ready(offset, length);
    };
    o.average_gradients = [this](const Tensor& grads, const std::vector<ops::ParamSegment>& segments) {
      dist::GradReducer& r = reducer_for(grads, segments);
      if (!reported && world->rank() == 0) {
        std::printf("bert --dp: %lld of %lld gradient buckets went out during the backward\n",
                    static_cast<long long>(r.buckets_launched()), static_cast<long long>(r.num_buckets()));
        std::fflush(stdout);
        reported = true;
      }
      r.finish();
    };
    o.sum_over_ranks = [this](std::vector<double>& v) {
      // Counts as i64 (exact), the loss as f32 (reported only).
      const Device d = world->device();
      std::vector<int64_t> counts;
      for (size_t i = 0; i + 1 < v.size(); ++i) counts.push_back(std::llround(v[i]));
      Tensor c = Tensor::from_vector_i64(counts, {static_cast<int64_t>(counts.size())}, DType::i64, d);
      Tensor l = Tensor::full({1}, v.back(), DType::f32, d);
      world->all_reduce(c);
      world->all_reduce(l);
      const auto cs = c.to_vector_i64();
      for (size_t i = 0; i < cs.size(); ++i) v[i] = static_cast<double>(cs[i]);
      v.back() = l.to(Device::cpu()).item();
    };
    if (o.dp_rank != 0) {
      o.log = [](const std::string&) {};  // MLLOG and progress from rank 0 only
      o.write_checkpoint = false;          // rank 0 writes; every rank resumes from it
    }
  }
};
#endif

}  // namespace

void add_bert_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("bert", "BERT pre-training benchmark (MLPerf Training style)");
  auto a = std::make_shared<BertArgs>();
  sub->add_option("--config", a->config, "model/training YAML (configs/bert/{large,tiny}.yaml)");
  sub->add_option("--train_dir", a->train_dir, "training shards: a directory, glob or file (MLPerf HDF5)")
      ->required();
  sub->add_option("--eval_dir", a->eval_dir, "eval shards (MLPerf HDF5)")->required();
  sub->add_option("--max_steps", a->max_steps, "optimizer steps (default: the config's total_steps)")
      ->check(at_least(1));
  sub->add_option("--batch_size", a->batch_size, "rows per micro-batch (default: the config's)");
  sub->add_flag("--packing", a->packing, "pack sequences into rows (needs the data layer's packing)");
  sub->add_option("--device", a->device, "cpu or cuda:N");
  sub->add_option("--precision", a->precision, "fp32 or bf16 (autocast, fp32 master weights)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--target_mlm_accuracy", a->target, "stop when the eval masked-LM accuracy reaches this");
  sub->add_option("--checkpoint", a->checkpoint, "checkpoint file: resumed from if present, saved to");
  sub->add_option("--checkpoint_every", a->checkpoint_every, "steps between checkpoints (0: only at the end)");
  sub->add_option("--init_checkpoint", a->init_checkpoint, "initial parameters (HDF5 checkpoint)");
  sub->add_option("--eval_every", a->eval_every, "training samples between evaluations (default: the config's)");
  sub->add_option("--eval_samples", a->eval_samples, "eval sequences to use (0: all; default: the config's)");
  sub->add_option("--log_every", a->log_every, "steps between progress lines (0: none)");
  sub->add_option("--grad_accumulation", a->grad_accumulation, "micro-batches per step and rank (default: the config's)");
  sub->add_option("--dp", a->dp, "data-parallel ranks: run as mpirun -np N foldcore bert --dp N (global batch "
                  "= batch_size × grad_accumulation × N)");
  set_action(sub, [a]() -> int {
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
    bert::BertRunOptions o;
    o.config = bert::load_bert_config(a->config);
    bert::BertTrainConfig& t = o.config.train;
    if (a->batch_size > 0) t.batch_size = a->batch_size;
    if (a->eval_every > 0) t.eval_every_samples = a->eval_every;
    if (a->eval_samples >= 0) t.eval_samples = a->eval_samples;
    if (a->target >= 0) t.target_mlm_accuracy = a->target;
    if (a->grad_accumulation > 0) t.grad_accumulation = a->grad_accumulation;
    o.max_steps = a->max_steps;
    o.device = parse_usable_device(a->device);
    set_device(o.device);
    o.precision = a->precision == "bf16" ? DType::bf16 : DType::f32;
    o.checkpoint = a->checkpoint;
    o.checkpoint_every = a->checkpoint_every;
    o.init_checkpoint = a->init_checkpoint;
    o.progress_every = a->log_every;
    FC_CHECK(a->dp >= 1, "bert: --dp ", a->dp, " must be at least 1");
#ifdef FOLDCORE_HAVE_MPI
    DataParallel dp;
#else
    FC_CHECK(a->dp == 1, "bert: --dp ", a->dp, " needs a build with MPI (FOLDCORE_MPI)");
#endif
    try {
#ifdef FOLDCORE_HAVE_MPI
      if (a->dp > 1) dp.attach(a->dp, o);
#endif
      auto train = bert::open_bert_shards(a->train_dir, t.batch_size, t.seed, a->packing);
      const auto eval = bert::load_bert_eval_set(a->eval_dir, t.batch_size, t.eval_samples);
      const bert::BertRunResult r = bert::run_bert_training(o, *train, eval);
      if (o.dp_rank == 0) std::printf("%s\n", r.summary_json.c_str());
      std::fflush(stdout);
      return r.reached_target ? 0 : 1;
    } catch (const std::exception& e) {
      // In a data-parallel job the runtime's teardown aborts the job (the other ranks would wait
      // forever): say what went wrong first.
      (void)e;
#ifdef FOLDCORE_HAVE_MPI
      if (dp.runtime) std::fprintf(stderr, "foldcore bert: rank %d: error: %s\n", o.dp_rank, e.what());
      std::fflush(stderr);
#endif
      throw;
    }
#else
    FC_THROW("bert: this build has no data pipeline or no yaml-cpp (needed for shards and configs); config ",
             a->config);
#endif
  });
}

}  // namespace foldcore::apps
