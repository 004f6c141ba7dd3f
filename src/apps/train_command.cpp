// `foldcore train --config configs/train/<name>.yaml --store S.h5 --out_dir RUN [--max_steps N]
// [--device cpu|cuda:N] [--precision fp32|bf16] [--resume | --init_from C.h5 [--init_from_ema]]
// [--dp A --dap B --bp C] [--parallel_evoformer]`: AlphaFold2
// training from a feature store (models/alphafold/training/af2_trainer.h): metrics.jsonl and atomic
// checkpoints in RUN, exact continuation with --resume. With A·B·C > 1 it runs as one rank of an
// MPI job of A·B·C processes (mpirun/srun; docs/distributed.md) over a dist::ProcessGrid.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/stop_signals.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
#include "models/alphafold/training/af2_trainer.h"
#include "models/alphafold/training/train_config.h"
#endif
#if defined(FOLDCORE_HAVE_MPI) && defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
#include "dist/launch_env.h"
#include "dist/process_grid.h"
#include "dist/runtime.h"
#include "dist/scaled_grad_reducer.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/parallel/model_parallel_dist.h"
#endif

namespace foldcore::apps {

namespace {

struct TrainArgs {
  std::string config, store, out_dir, device = "cpu", precision = "fp32";
  int64_t max_steps = 0;
  bool resume = false, parallel_evoformer = false, init_from_ema = false, no_comm_overlap = false;
  std::string init_from;
  int dp = 1, dap = 1, bp = 1;
  double bucket_mb = 25;  // PyTorch DDP's default bucket size
};

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
// The run's last line and the command's exit status: 0 when it ran its steps; 128 + the signal's
// number (what a shell reports for a process the signal ended) when a stop signal ended it early,
// at a step boundary with its checkpoint written (the trainer says so).
int finish_run(const af2::TrainSummary& s, bool writes_outputs) {
  if (s.stopped_by != 0) return 128 + s.stopped_by;
  if (writes_outputs)
    log::info("train: done at step ", s.steps, " (", s.skipped, " skipped), last loss ", s.last_loss, "; checkpoint ",
              s.checkpoint);
  return 0;
}
#endif

[[maybe_unused]] std::string launch_hint(const TrainArgs& a) {
  return "launch it as mpirun -np " + std::to_string(a.dp * a.dap * a.bp) + " foldcore train … --dp " +
         std::to_string(a.dp) + " --dap " + std::to_string(a.dap) + " --bp " + std::to_string(a.bp);
}

#if defined(FOLDCORE_HAVE_MPI) && defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
// The trainer's parallel group over the dist layer: the MPI runtime, the world communicator on
// this rank's device (MPI for the CPU, NCCL for CUDA with GPU = local rank), the dp × dap × bp
// grid, and a ScaledGradReducer (buckets launched in order during the backward, each rank's clip
// factor applied by the receiver) over the trainer's reduce buffer.
class GridParallel final : public af2::TrainParallel {
 public:
  GridParallel(const TrainArgs& a, Device& device)
      : bucket_bytes_(static_cast<int64_t>(a.bucket_mb * 1024 * 1024)), overlap_(!a.no_comm_overlap) {
    // Checked from the launcher's environment before MPI starts, so a wrong launch is a plain error.
    const int world_size = a.dp * a.dap * a.bp;
    const dist::LaunchEnv env = dist::detect_launch_env();
    FC_CHECK(env.world_size == world_size, "train --dp ", a.dp, " --dap ", a.dap, " --bp ", a.bp, ": this job has ",
             env.world_size, " processes, the grid needs ", world_size, "; ", launch_hint(a));
    int argc = 0;
    char** argv = nullptr;  // MPI_Init_thread accepts no arguments
    runtime_ = std::make_unique<dist::Runtime>(argc, argv);
    FC_CHECK(runtime_->size() == world_size, "train: this job has ", runtime_->size(), " processes, the grid needs ",
             world_size, "; ", launch_hint(a));
    if (device.is_cuda()) device = runtime_->device(DeviceType::cuda);
    set_device(device);
    world_ = runtime_->world(device);
    grid_ = std::make_unique<dist::ProcessGrid>(*world_, dist::GridShape{a.dp, a.dap, a.bp});
  }
  // DAP / BP: the model runs split over the grid's dap() and bp() groups, both at once too
  // (refused: BP above 2 there, BP without the Parallel Evoformer in the option checks).
  bool setup_model(af2::AlphaFold& model) override {
    if (grid_->shape().dap == 1 && grid_->shape().bp == 1) return false;
    model.set_model_parallel(af2::make_model_parallel(&grid_->dap(), &grid_->bp(), overlap_, &grid_->model()));
    return true;
  }
  int64_t bucket_bytes() const override { return bucket_bytes_; }
  int dp_rank() const override { return grid_->coords().dp; }
  int dp_size() const override { return grid_->shape().dp; }
  bool writes_outputs() const override { return world_->rank() == 0; }
  int world_rank() const { return world_->rank(); }
  void attach(const Tensor& buffer, const std::vector<ops::ParamSegment>& segments) override {
    reducer_ = std::make_unique<dist::ScaledGradReducer>(grid_->dp(), buffer, segments, bucket_bytes_);
  }
  void add_base(const Tensor& base) override { reducer_->add_base(base); }
  void mark_ready(int64_t offset, int64_t length) override { reducer_->mark_ready(offset, length); }
  void finish(double scale) override { reducer_->finish(scale); }
  int64_t num_buckets() const override { return reducer_->num_buckets(); }
  int64_t buckets_launched() const override { return reducer_->buckets_launched(); }
  std::vector<double> sum(const std::vector<double>& values) override {
    // The doubles travel as their bits (an all-gather of i64) and are added in rank order on every
    // rank: full precision, and the same result everywhere.
    std::vector<int64_t> bits(values.size());
    std::memcpy(bits.data(), values.data(), values.size() * sizeof(double));
    dist::Communicator& dp = grid_->dp();
    const int64_t n = static_cast<int64_t>(values.size());
    const Tensor in = Tensor::from_vector_i64(bits, {n}, DType::i64, dp.device());
    const Tensor out = Tensor::zeros({n * dp.size()}, DType::i64, dp.device());
    dp.all_gather(in, out);
    const std::vector<int64_t> all = out.to(Device::cpu()).to_vector_i64();
    std::vector<double> total(values.size(), 0.0);
    for (int r = 0; r < dp.size(); ++r)
      for (size_t i = 0; i < values.size(); ++i) {
        double x;
        std::memcpy(&x, &all[static_cast<size_t>(r) * values.size() + i], sizeof x);
        total[i] += x;
      }
    return total;
  }
  void barrier() override { world_->barrier(); }
  int64_t world_max(int64_t value) override {
    const Tensor t = Tensor::from_vector_i64({value}, {1}, DType::i64, world_->device());
    world_->all_reduce(t, dist::ReduceOp::max);
    return t.to(Device::cpu()).to_vector_i64()[0];
  }

 private:
  std::unique_ptr<dist::Runtime> runtime_;  // declared first: destroyed last
  std::unique_ptr<dist::Communicator> world_;
  std::unique_ptr<dist::ProcessGrid> grid_;
  std::unique_ptr<dist::ScaledGradReducer> reducer_;
  int64_t bucket_bytes_ = 0;
  bool overlap_ = true;
};
#endif

}  // namespace

void add_train_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "train", "Train AlphaFold2 from a feature store (one process, or mpirun/srun with --dp/--dap/--bp)");
  auto a = std::make_shared<TrainArgs>();
  sub->add_option("--config", a->config, "training YAML (configs/train/{tiny,initial,finetune}.yaml)")->required();
  sub->add_option("--store", a->store, "HDF5 feature store written by foldcore preprocess")->required();
  sub->add_option("--out_dir", a->out_dir, "run folder: metrics.jsonl, checkpoint.h5")
      ->required()
      ->check(folder_to_write());
  sub->add_option("--max_steps", a->max_steps, "stop after this many steps in total (default: the config's)")
      ->check(at_least(1));
  sub->add_option("--device", a->device, "cpu or cuda[:index] (with --dp etc.: cuda = the GPU of the local rank)");
  sub->add_option("--precision", a->precision, "fp32 or bf16 (autocast of the trunk and heads; fp32 master weights, optimizer, checkpoint, structure module and losses)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_flag("--resume", a->resume, "continue the run in --out_dir from its checkpoint (any --dp)");
  sub->add_option("--init_from", a->init_from,
                  "start from the weights of another run's checkpoint.h5 of the same architecture (fine-tuning after "
                  "initial training); new optimiser, step 0")
      ->check(CLI::ExistingFile);
  sub->add_flag("--init_from_ema", a->init_from_ema, "with --init_from: its EMA weights instead of its trained ones");
  sub->add_option("--dp", a->dp, "data-parallel ranks: the global batch (optim.batch_size) is split over them")
      ->check(at_least(1));
  sub->add_option("--dap", a->dap, "dynamic-axial-parallel ranks per model replica (the MSA and pair split over them)")
      ->check(at_least(1));
  sub->add_option("--bp", a->bp, "branch-parallel ranks per model replica (1 or 2; needs the Parallel Evoformer)")
      ->check(at_least(1));
  sub->add_flag("--parallel_evoformer", a->parallel_evoformer,
                "HelixFold's Parallel Evoformer (outer product mean at the block end), whatever the model YAML says");
  sub->add_flag("--no_comm_overlap", a->no_comm_overlap,
                "DAP: complete every gather and all-to-all where it is issued instead of overlapping it with "
                "the work that does not need it (the same results; for comparison)");
  sub->add_option("--dp_bucket_mb", a->bucket_mb, "MiB per bucket of the dp gradient reduction (default 25; 0: one "
                  "bucket per parameter)")
      ->check(at_least(0));
  set_action(sub, [a]() -> int {
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
    af2::TrainRunOptions o;
    o.config = af2::load_train_config(a->config);
    o.store_path = a->store;
    o.out_dir = a->out_dir;
    o.max_steps = a->max_steps;
    o.device = parse_usable_device(a->device);
    o.precision = a->precision;
    o.resume = a->resume;
    o.init_from = a->init_from;
    o.init_from_ema = a->init_from_ema;
    FC_CHECK(!a->init_from_ema || !a->init_from.empty(), "train: --init_from_ema needs --init_from");
    if (a->parallel_evoformer) o.config.model.evoformer.parallel = true;
    FC_CHECK(a->bp == 1 || o.config.model.evoformer.parallel, "train: --bp ", a->bp,
             " places the Parallel Evoformer's two branches on two ranks; the model of ", a->config,
             " is the standard Evoformer: pass --parallel_evoformer (or parallel_evoformer: true in the model YAML)");
    const bool distributed = a->dp * a->dap * a->bp > 1;
#if defined(FOLDCORE_HAVE_MPI)
    if (!distributed) {
      const dist::LaunchEnv env = dist::detect_launch_env();
      FC_CHECK(env.world_size == 1, "train: this job has ", env.world_size, " processes but --dp/--dap/--bp make a grid "
               "of one; pass --dp ", env.world_size, " (or run one process)");
    }
    std::unique_ptr<GridParallel> grid;
    try {
      if (distributed) {
        grid = std::make_unique<GridParallel>(*a, o.device);
        o.parallel = grid.get();
      }
      const StopSignals stop_signals(!grid);  // several ranks: SIGTERM and SIGINT stay the runtime's
      o.stop_requested = &StopSignals::received;
      return finish_run(af2::run_af2_training(o), !grid || grid->writes_outputs());
    } catch (const std::exception& e) {
      // In a distributed job the runtime's teardown aborts the job (the other ranks would wait
      // forever): say which rank failed and why first.
      if (grid) std::fprintf(stderr, "foldcore train: rank %d: error: %s\n", grid->world_rank(), e.what());
      std::fflush(stderr);
      throw;
    }
#else
    FC_CHECK(!distributed, "train: --dp ", a->dp, " needs a build with MPI (CMake FOLDCORE_MPI=ON/AUTO with Open MPI "
             "installed); this build has none");
    const StopSignals stop_signals(true);
    o.stop_requested = &StopSignals::received;
    return finish_run(af2::run_af2_training(o), true);
#endif
#else
    FC_THROW("train: this build has no data pipeline or no yaml-cpp (needed for the store and configs); config ",
             a->config);
#endif
  });
}

}  // namespace foldcore::apps
