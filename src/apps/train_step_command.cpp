// `foldcore train_step --batch B.npz --params_file P.npz --stage initial|finetune --output grads.npz
// --losses losses.json [--device cpu]`: one AlphaFold2 training forward over every recycling
// iteration of a training batch (features + labels, recycling axis last; the loss reads the last
// slice), every loss term, and the gradient of `loss` for every parameter under the official
// AlphaFold2 key names and layout (models/alphafold/training/train_step.h). Both files are written under
// temporary names and renamed, so a failure leaves neither behind.
// `mpirun -np N foldcore train_step … --dap N` (builds with MPI): the same step with the Evoformer
// stacks split over N ranks (models/alphafold/parallel/model_parallel.h); rank 0 writes the files.
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"

#ifdef FOLDCORE_HAVE_DATA
#include "models/alphafold/training/train_step.h"
#endif
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_MPI)
#include <cstdio>

#include "apps/dap_launch.h"
#endif

namespace foldcore::apps {

void add_train_step_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "train_step", "One AlphaFold2 training step on a batch: every loss term and the gradient of every parameter");
  struct Args {
    std::string batch, params, stage, output, losses, device = "cpu";
    int64_t dap = 1;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--batch", args->batch, "training batch .npz (features and labels, recycling axis last)")
      ->required();
  sub->add_option("--params_file", args->params, "parameters .npz in the official AlphaFold2 layout")->required();
  sub->add_option("--stage", args->stage, "loss weights of the training stage (suppl. Table 4)")
      ->required()
      ->check(CLI::IsMember({"initial", "finetune"}));
  sub->add_option("--output", args->output, "gradients .npz (official keys and layout)")
      ->required()
      ->check(file_to_write());
  sub->add_option("--losses", args->losses, "loss terms .json (unweighted terms, unscaled_loss, loss)")
      ->required()
      ->check(file_to_write());
  sub->add_option("--device", args->device, "cpu or cuda[:index]");
  sub->add_option("--dap", args->dap,
                  "dynamic axial parallelism over N ranks: mpirun -np N foldcore train_step … --dap N (default 1)");
  set_action(sub, [args]() -> int {
#ifdef FOLDCORE_HAVE_DATA
    af2::TrainStepOptions o;
    o.batch_path = args->batch;
    o.params_path = args->params;
    o.stage = args->stage;
    o.device = parse_usable_device(args->device);
    FC_CHECK(args->dap >= 1, "train_step --dap ", args->dap, " must be at least 1");
    bool write = true;
#ifdef FOLDCORE_HAVE_MPI
    std::unique_ptr<DapJob> job;
    if (args->dap > 1) {
      job = std::make_unique<DapJob>("train_step", args->dap, o.device);
      o.model_parallel = job->model_parallel;
      write = job->writes_outputs();
    }
#else
    FC_CHECK(args->dap == 1, "train_step --dap ", args->dap,
             ": this foldcore was built without MPI (FOLDCORE_MPI), which DAP needs; rebuild with MPI or use --dap 1");
#endif
    try {
      const af2::TrainStepResult r = af2::run_train_step(o);
      if (write) {
        af2::write_train_step(r, args->output, args->losses);
        log::info("train_step: loss ", r.loss.loss, ", gradient norm ", r.grad_norm, "; wrote ", args->output,
                  " and ", args->losses);
      }
    } catch (const std::exception& e) {
#ifdef FOLDCORE_HAVE_MPI
      // The runtime's teardown aborts the job (the other ranks would wait forever): say why first.
      if (job) std::fprintf(stderr, "foldcore train_step: rank %d: error: %s\n", job->world->rank(), e.what());
      std::fflush(stderr);
#endif
      (void)e;
      throw;
    }
    return 0;
#else
    FC_THROW("this build has no data pipeline (zlib), which the AlphaFold model needs");
#endif
  });
}

}  // namespace foldcore::apps
