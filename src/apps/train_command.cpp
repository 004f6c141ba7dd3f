// `foldcore train --config configs/train/<name>.yaml --store S.h5 --out_dir RUN [--max_steps N]
// [--device cpu|cuda:N] [--precision fp32|bf16] [--resume]`: AlphaFold2 training from a feature
// store (models/alphafold/af2_trainer.h): metrics.jsonl and atomic checkpoints in RUN, exact
// continuation with --resume.
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
#include "models/alphafold/af2_trainer.h"
#include "models/alphafold/train_config.h"
#endif

namespace foldcore::apps {

void add_train_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("train", "Train AlphaFold2 from a feature store (single process)");
  struct Args {
    std::string config, store, out_dir, device = "cpu", precision = "fp32";
    int64_t max_steps = 0;
    bool resume = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--config", a->config, "training YAML (configs/train/{tiny,initial,finetune}.yaml)")->required();
  sub->add_option("--store", a->store, "HDF5 feature store written by foldcore preprocess")->required();
  sub->add_option("--out_dir", a->out_dir, "run folder: metrics.jsonl, checkpoint.h5")->required();
  sub->add_option("--max_steps", a->max_steps, "stop after this many steps in total (default: the config's)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--device", a->device, "cpu or cuda[:index]");
  sub->add_option("--precision", a->precision, "fp32 or bf16 (autocast of the trunk and heads; fp32 master weights, optimizer, checkpoint, structure module and losses)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_flag("--resume", a->resume, "continue the run in --out_dir from its checkpoint");
  set_action(sub, [a]() -> int {
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
    af2::TrainRunOptions o;
    o.config = af2::load_train_config(a->config);
    o.store_path = a->store;
    o.out_dir = a->out_dir;
    o.max_steps = a->max_steps;
    o.device = Device::parse(a->device);
    o.precision = a->precision;
    o.resume = a->resume;
    const af2::TrainSummary s = af2::run_af2_training(o);
    log::info("train: done at step ", s.steps, " (", s.skipped, " skipped), last loss ", s.last_loss,
              "; checkpoint ", s.checkpoint);
    return 0;
#else
    FC_THROW("train: this build has no data pipeline or no yaml-cpp (needed for the store and configs); config ",
             a->config);
#endif
  });
}

}  // namespace foldcore::apps
