// `foldcore run_features --features F.npz --params_file P.npz --output O.npz [--num_recycles N]
// [--config configs/model/model_1_ptm.yaml] [--device cpu|cuda[:i]]`: runs AlphaFold2 on a
// processed feature file (AlphaFold names, recycling axis last) with an official-format parameter
// file and writes every output (reference outputs.npz names) atomically.
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/device.h"
#include "core/error.h"

#ifdef FOLDCORE_HAVE_DATA
#include "models/alphafold/model/model_runner.h"
#endif

namespace foldcore::apps {

void add_run_features_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("run_features", "Run AlphaFold2 on processed features (.npz) and write its outputs");
  struct Args {
    std::string features, params, output, config, device = "cpu";
    int64_t num_recycles = -1;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--features", args->features, "processed features .npz (AlphaFold names, recycling axis last)")
      ->required();
  sub->add_option("--params_file", args->params, "parameters .npz in the official AlphaFold2 layout")->required();
  sub->add_option("--output", args->output, "output .npz (written atomically)")->required()->check(file_to_write());
  sub->add_option("--num_recycles", args->num_recycles,
                  "recycling iterations after the first (default: all the feature file holds)")
      ->check(at_least(0));
  sub->add_option("--config", args->config,
                  "model preset YAML (default: architecture inferred from the parameter file)");
  sub->add_option("--device", args->device, "cpu or cuda[:index]");
  set_action(sub, [args]() -> int {
#ifdef FOLDCORE_HAVE_DATA
    af2::RunFeaturesOptions o;
    o.features_path = args->features;
    o.params_path = args->params;
    o.config_path = args->config;
    o.num_recycles = args->num_recycles;
    o.device = parse_usable_device(args->device);
    af2::run_features_to_file(o, args->output);
    return 0;
#else
    FC_THROW("this build has no data pipeline (zlib), which the AlphaFold model needs");
#endif
  });
}

}  // namespace foldcore::apps
