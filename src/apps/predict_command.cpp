// `foldcore predict`: FASTA → AlphaFold2 structure predictions, following run_alphafold.py.
//
//   foldcore predict --fasta_paths a.fasta,b.fasta --output_dir O --data_dir D
//       [--model_names model_1_ptm,…] [--use_precomputed_msas] [--msa F.a3m] [--num_recycles N]
//       [--random_seed S] [--device cpu|cuda:0] [--precision fp32|bf16] [--chunk_size C|auto]
//       [--benchmark] [--random_params SEED] [--ranking_by plddt|ptm] [--model_config F.yaml]
//       [--result_arrays full|summary] [--template_passes auto|1|2]
//   mpirun -np N foldcore predict … --dap N    (builds with MPI)
//
// --dap N: dynamic axial parallelism (models/alphafold/parallel/model_parallel.h): the N ranks run the same
// prediction with the Evoformer and extra-MSA stacks' MSA and pair split over them; rank 0 writes
// the outputs.
//
// Per FASTA (one protein chain; target name = file stem; output folder O/<target>, skipped when
// it holds a `done` marker):
//   1. raw features (data_pipeline/features/features.h): with --use_precomputed_msas from any subset of
//      AlphaFold's alignment files in O/<target>/msas/ (the search itself is `foldcore msa`),
//      and/or one alignment given with --msa F.a3m (ColabFold style), otherwise single-sequence
//      mode (the query as the only MSA row, no templates); then the preflight (memory_estimate.h)
//      refuses a target whose estimated peak does not fit the memory available on the device
//      (with --chunk_size auto: picks the largest chunk that fits);
//   2. per model: processed features (AlphaFold's inference input pipeline, seeded with
//      random_seed + model index), then the model (parameters from D/params/params_<model>.npz,
//      or random ones with --random_params: loud warnings everywhere), num_recycles recycles;
//   3. outputs (predict_outputs.h), written only when every model has run.
// Loaded models are kept and reused across FASTA files. Every input is checked before any
// output is written; a failure leaves the target folder as it was.
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/error.h"
#include "core/log.h"

#if defined(FOLDCORE_HAVE_DATA)
#include "apps/predict_command_model.h"
#endif
#if defined(FOLDCORE_HAVE_DATA) && defined(FOLDCORE_HAVE_MPI)
#include <cstdio>

#include "apps/dap_launch.h"
#endif

namespace foldcore::apps {

#if defined(FOLDCORE_HAVE_DATA)
namespace {
// --chunk_size: a count >= 0 or "auto".
int64_t parse_chunk_size(const std::string& text) {
  if (text == "auto") return kChunkAuto;
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FC_CHECK(used == text.size() && !text.empty() && v >= 0, "--chunk_size must be a count >= 0 or auto, got '",
           text, "'");
  return v;
}

// --template_passes: auto (0), 1 or 2.
int64_t parse_template_passes(const std::string& text) {
  if (text == "auto") return 0;
  if (text == "1" || text == "2") return text == "1" ? 1 : 2;
  FC_THROW("--template_passes must be auto, 1 or 2, got '", text, "'");
}
}  // namespace
#endif

void add_predict_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "predict", "Predict structures with AlphaFold2 from FASTA files (AlphaFold's output layout and formats)");
  struct Args {
    std::string fasta_paths, output_dir, data_dir, model_names = "model_1_ptm", device = "cpu", precision = "fp32";
    std::string result_arrays = "full";
    std::string ranking_by = "plddt", model_config, template_mmcif_dir, max_template_date, msa;
    bool use_precomputed_msas = false, benchmark = false;
    std::string chunk_size = "0", template_passes = "auto";
    int64_t num_recycles = 3, random_seed = 0;
    int64_t random_params = -1;
    int64_t dap = 1;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--fasta_paths", a->fasta_paths, "comma-separated FASTA files, one protein chain each")->required();
  sub->add_option("--output_dir", a->output_dir, "output folder (one sub-folder per FASTA file stem)")
      ->required()
      ->check(folder_to_write());
  sub->add_option("--data_dir", a->data_dir, "folder holding params/params_<model>.npz");
  sub->add_option("--model_names", a->model_names, "comma-separated model names (default model_1_ptm)");
  sub->add_flag("--use_precomputed_msas", a->use_precomputed_msas,
                "read alignments from <output_dir>/<target>/msas/ (AlphaFold's file names); without it the "
                "prediction runs in single-sequence mode");
  sub->add_option("--msa", a->msa,
                  "one alignment (.a3m, e.g. ColabFold's; or .sto) for the single FASTA file, used with or "
                  "without --use_precomputed_msas");
  sub->add_option("--template_mmcif_dir", a->template_mmcif_dir,
                  "mmCIF folder for the template hits in msas/pdb70_hits.hhr (needs --use_precomputed_msas)");
  sub->add_option("--max_template_date", a->max_template_date, "YYYY-MM-DD: templates released later are skipped");
  sub->add_option("--num_recycles", a->num_recycles, "recycling iterations (default 3)");
  sub->add_option("--random_seed", a->random_seed, "seed of the feature processing (MSA sampling, masking)");
  sub->add_option("--device", a->device, "cpu or cuda:<i>");
  sub->add_option("--precision", a->precision, "fp32 or bf16");
  sub->add_option("--chunk_size", a->chunk_size,
                  "inference chunk along the long axis of attention, triangle multiplication, transitions and "
                  "the outer product mean (0: none; 16 for long sequences; auto: per target the largest chunk "
                  "whose estimated peak fits the memory available on the device)");
  sub->add_option("--template_passes", a->template_passes,
                  "passes of the template embedding over the templates: 1 (each template's pair stack once, "
                  "with the pointwise attention's running heads beside the pair), 2 (each stack twice, "
                  "without them: 0.375 fp32 pair units less at the template stage for a second pass of the "
                  "template stacks), auto (default: 2 where the preflight finds that 1 does not fit)");
  sub->add_flag("--benchmark", a->benchmark, "run each model twice and report the second run's time");
  sub->add_option("--random_params", a->random_params,
                  "use randomly initialised parameters with this seed instead of params files (NOT a real "
                  "prediction; every output says so)");
  sub->add_option("--ranking_by", a->ranking_by, "plddt (mean pLDDT, AlphaFold's monomer ranking) or ptm");
  sub->add_option("--result_arrays", a->result_arrays,
                  "result_<model>.npz: full (AlphaFold's arrays) or summary (without the [N, N, 64] distogram "
                  "logits and aligned confidence probabilities, and the MSA/resolved logits: for long sequences)");
  sub->add_option("--model_config", a->model_config,
                  "model architecture YAML for every model (default: configs/model/<model>.yaml, or inferred "
                  "from the params file)");
  sub->add_option("--dap", a->dap,
                  "dynamic axial parallelism over N ranks: launch as mpirun -np N foldcore predict … --dap N "
                  "(default 1: one process)");
  set_action(sub, [a]() -> int {
#if defined(FOLDCORE_HAVE_DATA)
    PredictOptions o;
    o.fasta_paths = split_commas(a->fasta_paths);
    o.output_dir = a->output_dir;
    o.data_dir = a->data_dir;
    o.model_names = split_commas(a->model_names);
    o.use_precomputed_msas = a->use_precomputed_msas;
    o.num_recycles = a->num_recycles;
    o.random_seed = a->random_seed;
    o.device = parse_usable_device(a->device);
    o.precision = a->precision;
    o.chunk_size = parse_chunk_size(a->chunk_size);
    o.template_passes = parse_template_passes(a->template_passes);
    o.benchmark = a->benchmark;
    o.random_params = a->random_params >= 0;
    o.random_params_seed = static_cast<uint64_t>(a->random_params < 0 ? 0 : a->random_params);
    o.ranking_by = a->ranking_by;
    o.result_arrays = a->result_arrays;
    o.model_config = a->model_config;
    o.template_mmcif_dir = a->template_mmcif_dir;
    o.max_template_date = a->max_template_date;
    o.msa_a3m = a->msa;
    FC_CHECK(o.template_mmcif_dir.empty() || o.use_precomputed_msas,
             "--template_mmcif_dir needs --use_precomputed_msas (the hits come from msas/pdb70_hits.hhr)");
    FC_CHECK(a->dap >= 1, "--dap ", a->dap, " must be at least 1");
#if defined(FOLDCORE_HAVE_MPI)
    std::unique_ptr<DapJob> job;
    if (a->dap > 1) {
      job = std::make_unique<DapJob>("predict", a->dap, o.device);
      o.model_parallel = job->model_parallel;
      o.write_outputs = job->writes_outputs();
    }
    try {
      run_predict(o);
    } catch (const std::exception& e) {
      // The runtime's teardown aborts the job (the other ranks would wait forever): say why first.
      if (job) std::fprintf(stderr, "foldcore predict: rank %d: error: %s\n", job->world->rank(), e.what());
      std::fflush(stderr);
      throw;
    }
#else
    FC_CHECK(a->dap == 1, "predict --dap ", a->dap,
             ": this foldcore was built without MPI (FOLDCORE_MPI), which DAP needs; rebuild with MPI or use --dap 1");
    run_predict(o);
#endif
    return 0;
#else
    FC_THROW("this foldcore was built without the data pipeline (zlib), which `predict` needs");
#endif
  });
}

}  // namespace foldcore::apps
