// The output files of `foldcore predict` for one target, in AlphaFold2's layout and formats
// (run_alphafold.py / AlphaFold DB):
//
//   unrelaxed_<model>_pred_0.pdb/.cif   model structure, per-residue pLDDT in the B-factor column
//   ranked_<i>.pdb/.cif                  the same structures ordered by the ranking confidence
//   ranking_debug.json                   {"plddts" | "ptm": {model: score}, "order": [models]}
//   confidence_<model>.json              {"residueNumber", "confidenceScore", "confidenceCategory"}
//   pae_<model>.json                     [{"predicted_aligned_error", "max_predicted_aligned_error"}]
//                                        (models with the PAE head)
//   result_<model>.npz                   plddt, logits, distogram bin edges, PAE, pTM, atom positions
//   timings.json                         {"features": s, "process_features": s, "predict_and_compile_<model>": s, …}
//   plddt.png, pae_<model>.png, msa_coverage.png
//   done                                 written last: the target is complete
//
// Every file is first written (atomically) into a hidden staging folder inside the target folder
// and moved into place only when all of them exist, so a failure leaves no partial output and
// does not touch files already there. With random parameters every file carries a loud warning
// (PDB REMARK, mmCIF comment, JSON "warning" key, npz "warning" array, PNG tEXt + caption).
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/structure/structure.h"

namespace foldcore::apps {

// One model's prediction for a target (host data).
struct ModelPrediction {
  std::string model_name;
  std::vector<float> plddt;                   // [N], 0..100
  std::vector<float> final_atom_positions;    // [N, 37, 3] Å
  std::vector<float> final_atom_mask;         // [N, 37]
  std::vector<float> predicted_aligned_error; // [N, N] or empty (no PAE head)
  float max_predicted_aligned_error = 0;
  double ptm = std::numeric_limits<double>::quiet_NaN();
  // Arrays for result_<model>.npz (AlphaFold's result names), written as given.
  std::vector<std::pair<std::string, data::NpyArray>> result_arrays;

  bool has_pae() const { return !predicted_aligned_error.empty(); }
  double mean_plddt() const;
};

struct TargetOutputs {
  std::string target;         // folder name = FASTA file stem
  std::string sequence;       // one-letter query sequence (N)
  std::vector<int32_t> msa;   // [msa_rows, N] HHblits codes (row 0 = query) for the coverage plot
  int64_t msa_rows = 0;
  std::vector<ModelPrediction> models;
  std::vector<std::pair<std::string, double>> timings;  // seconds, in insertion order
  std::string ranking_by = "plddt";                     // "plddt" or "ptm"
  std::string warning;        // non-empty → written into every file (random parameters)
};

// Atom37 positions → a single-chain Structure (chain A, residues numbered 1..N, atoms where the
// mask is set, B-factor = the residue's pLDDT), as AlphaFold's protein.from_prediction.
data::Structure prediction_structure(const std::string& sequence, const ModelPrediction& model);

// 'D' (< 50), 'L' (< 70), 'M' (< 90), 'H' (≥ 90): AlphaFold DB confidence categories.
char confidence_category(float plddt);
std::string confidence_json(const std::vector<float>& plddt, const std::string& warning = "");
std::string pae_json(const std::vector<float>& pae, float max_pae, const std::string& warning = "");

// Model names ordered by ranking confidence (descending, ties keep input order) and the scores.
std::vector<std::pair<std::string, double>> ranking_scores(const TargetOutputs& t);
std::vector<std::string> ranked_order(const TargetOutputs& t);
std::string ranking_debug_json(const TargetOutputs& t);
std::string timings_json(const std::vector<std::pair<std::string, double>>& timings, const std::string& warning = "");

// Distogram bin lower edges (AlphaFold: linspace(first_break, last_break, num_bins - 1)).
std::vector<float> distogram_bin_edges(int64_t num_bins, float first_break, float last_break);

// Staging folder <target_dir>/.predict_staging.<pid>: write() puts a file there (atomically),
// commit() moves every staged file into target_dir (in write order) and removes the folder. The
// destructor removes the folder and whatever is still in it.
class OutputStage {
 public:
  explicit OutputStage(std::string target_dir);
  ~OutputStage();
  OutputStage(const OutputStage&) = delete;
  OutputStage& operator=(const OutputStage&) = delete;
  void write(const std::string& name, const std::string& content);
  void write_npz(const std::string& name, const std::vector<std::pair<std::string, data::NpyArray>>& arrays);
  void write_pdb(const std::string& name, const data::Structure& s, const std::string& warning);
  void write_mmcif(const std::string& name, const data::Structure& s, const std::string& warning);
  void commit();

 private:
  std::string staged(const std::string& name);
  std::string target_dir_, dir_;
  std::vector<std::string> names_;
  bool committed_ = false;
};

// Writes every output of the target (list above) into <output_dir>/<target>/ and the `done`
// marker last.
void write_target_outputs(const std::string& target_dir, const TargetOutputs& t);

}  // namespace foldcore::apps
