// The engine of `foldcore predict` (predict_command.cpp parses the flags): the feature, model and
// output steps per target, with the loaded models cached across targets.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "data_pipeline/features/features.h"
#include "models/alphafold/model/config.h"
#include "models/alphafold/parallel/model_parallel.h"

namespace foldcore::apps {

// PredictOptions::chunk_size for `--chunk_size auto`.
inline constexpr int64_t kChunkAuto = -1;

struct PredictOptions {
  std::vector<std::string> fasta_paths;
  std::string output_dir;
  std::string data_dir;
  std::vector<std::string> model_names{"model_1_ptm"};
  bool use_precomputed_msas = false;
  int64_t num_recycles = 3;
  int64_t random_seed = 0;
  Device device = Device::cpu();
  std::string precision = "fp32";
  int64_t chunk_size = 0;  // kChunkAuto: per target, the largest chunk that fits (memory_estimate.h)
  int64_t template_passes = 0;  // 1, 2, or 0 auto: per target from the preflight (choose_template_passes)
  bool benchmark = false;
  bool random_params = false;
  uint64_t random_params_seed = 0;
  std::string ranking_by = "plddt";
  // result_<model>.npz: "full" (AlphaFold's result arrays) or "summary" (without the [N, N, 64]
  // distogram logits and aligned confidence probabilities and the per-sequence MSA and resolved
  // logits: at 10,000 residues each pair-sized array is about 26 GB, kept for every model until the
  // target is written).
  std::string result_arrays = "full";
  std::string model_config;  // YAML for every model; "" → preset file or params inference
  // Templates: with --use_precomputed_msas, hits in msas/pdb70_hits.hhr are featurised from the
  // mmCIF files in template_mmcif_dir (AlphaFold's filters; max_template_date required then).
  std::string template_mmcif_dir;
  std::string max_template_date;
  // One ColabFold-style .a3m for the single FASTA file (--msa), read with the folder's files.
  std::string msa_a3m;
  // Model parallelism (`--dap N` under mpirun -np N; models/alphafold/parallel/model_parallel.h): every
  // rank runs the same prediction with the Evoformer stacks split over the group; only the rank
  // with write_outputs writes the target folder.
  af2::ModelParallel model_parallel;
  bool write_outputs = true;
};

// The warning every output carries when the parameters are random.
std::string random_params_warning(uint64_t seed);

// Raw features of one target: FASTA checks (exactly one non-empty protein record), then the
// monomer pipeline on the alignments (msa_dir: any subset of AlphaFold's files, plus
// extra_alignments such as one ColabFold-style .a3m) or, with neither, the single-sequence
// features. Errors name the file.
struct TargetFeatures {
  std::string target, description, sequence;
  data::FeatureDict raw;
};
struct TargetInputs {
  std::string fasta_path;
  std::string msa_dir;                        // "" = no alignment folder
  std::vector<std::string> extra_alignments;  // read after msa_dir's files
  // Templates come from <msa_dir>/pdb70_hits.hhr when template_mmcif_dir is given.
  std::string template_mmcif_dir, max_template_date;
};
TargetFeatures target_features(const TargetInputs& in);

// AlphaFold's inference feature processing of `raw` for `config` (num_iterations = recycles + 1
// per-iteration samples, recycling axis last), written to `npz_path` in the features.npz layout.
void process_features_to_npz(const data::FeatureDict& raw, const af2::Af2Config& config, int64_t num_iterations,
                             uint64_t seed, const std::string& npz_path);

// Progress of one target: the stage ("features", "model <name>", "recycle <r>/<R> <name>",
// "structure <name>", "writing") and the fraction of the target done, in [0, 1]. An exception
// thrown by the callback aborts the target (the service's cancel) and leaves no output.
using PredictProgress = std::function<void(const std::string& stage, double fraction)>;

struct TargetSummary {
  std::string target;
  int64_t num_residues = 0, msa_rows = 0;
  double mean_plddt = 0;                                    // of the top-ranked model
  double ptm = std::numeric_limits<double>::quiet_NaN();  // of the top-ranked model (pTM head)
};

struct LoadedModel;

// The predict engine: the options checked once, the models loaded once and reused for every
// target (`predict` over its FASTA files, `serve` over its jobs).
class Predictor {
 public:
  explicit Predictor(PredictOptions options);
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  const PredictOptions& options() const { return o_; }
  // Loads every model in options().model_names now (otherwise on first use).
  void load_models();
  const af2::Af2Config& config(const std::string& model_name);
  int64_t num_params(const std::string& model_name);

  // Features, every model, then the outputs (predict_outputs.h) into target_dir, atomically.
  // Before the processed features are built, the preflight (memory_estimate.h) refuses an input
  // whose estimated peak does not fit the memory available on the device, and with
  // chunk_size = kChunkAuto sets each model's chunk to the largest that fits.
  TargetSummary predict_target(const TargetInputs& in, const std::string& target_dir,
                               const PredictProgress& progress = {});

 private:
  LoadedModel& model(const std::string& name);
  PredictOptions o_;
  std::string warning_;
  std::map<std::string, std::unique_ptr<LoadedModel>> models_;
};

void run_predict(const PredictOptions& options);

}  // namespace foldcore::apps
