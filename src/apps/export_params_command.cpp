// `foldcore export_params --checkpoint RUN/checkpoint.h5 --output params_model_X.npz [--ema]`:
// the trained weights (or their EMA) of a `foldcore train` checkpoint as an official AlphaFold2
// parameter file (models/alphafold/params/af2_export.h), which predict and run_features read directly.
// The architecture comes from the checkpoint itself (its meta holds the model config).
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/error.h"
#include "core/log.h"

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
#include "autograd/param_store.h"
#include "core/json_text.h"
#include "core/philox.h"
#include "models/alphafold/params/af2_export.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/model/config_yaml.h"
#include "nn/checkpoint.h"
#endif

namespace foldcore::apps {

#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
namespace {

// The "architecture" string of a training checkpoint's meta JSON ({"architecture": "<yaml>", …},
// written by af2_trainer with json_string), unescaped by json_unstring.
std::string architecture_yaml(const std::string& meta, const std::string& path) {
  const std::string tag = "{\"architecture\": ";
  FC_CHECK(meta.rfind(tag, 0) == 0, path, ": not a foldcore train checkpoint (its meta has no model architecture)");
  try {
    return json_unstring(meta, tag.size());
  } catch (const Error& e) {
    FC_THROW(path, ": bad architecture in the checkpoint meta: ", e.what());
  }
}

}  // namespace
#endif

void add_export_params_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "export_params", "Write a training checkpoint's weights as an official AlphaFold2 parameter file (.npz)");
  struct Args {
    std::string checkpoint, output;
    bool ema = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--checkpoint", a->checkpoint, "checkpoint.h5 of a foldcore train run")->required();
  sub->add_option("--output", a->output, "parameter file to write (params_model_X.npz)")
      ->required()
      ->check(file_to_write());
  sub->add_flag("--ema", a->ema, "export the exponential moving average of the weights (AF2 evaluates with it)");
  set_action(sub, [a]() -> int {
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_YAML)
    const nn::CheckpointSummary summary = nn::inspect_checkpoint(a->checkpoint);
    const af2::Af2Config config =
        af2::parse_af2_config(architecture_yaml(summary.meta, a->checkpoint), a->checkpoint);
    autograd::ParamStore params;
    Generator init_rng(0);  // overwritten by the checkpoint
    af2::AlphaFold model(nn::Scope{&params, &init_rng, nullptr, ""}, config);
    params.finalize();
    af2::Af2ParamTable table;
    model.add_af2_params(table);
    Tensor values = params.values();
    Tensor ema = Tensor::zeros(values.shape(), DType::f32, values.device());
    Tensor ema_step = Tensor::zeros(Shape{}, DType::i64);
    nn::CheckpointData into;
    into.params["values"] = values;
    into.optimizer["ema"] = {{"ema", ema}, {"step", ema_step}};
    nn::load_checkpoint(a->checkpoint, into, nn::LoadOptions{/*allow_extra=*/true, /*params_only=*/false});
    if (a->ema) values.copy_(ema);
    const size_t n = af2::export_af2_params(table, config, a->output);
    log::info("export_params: wrote ", n, " arrays (", a->ema ? "EMA" : "trained", " weights of step ", into.step,
              ") to ", a->output);
    return 0;
#else
    FC_THROW("export_params: this build has no data pipeline or no yaml-cpp; checkpoint ", a->checkpoint);
#endif
  });
}

}  // namespace foldcore::apps
