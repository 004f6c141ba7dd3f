// Template features from hhsearch hits and an mmCIF folder, following AlphaFold2's monomer
// TemplateHitFeaturizer (alphafold/data/templates.py):
//
//  1. hits sorted by sum_probs, descending (stable); processing stops after max_hits featurised;
//  2. per hit: PDB id + chain from the start of the hit name ("1ABC_A ..." → "1abc", "A");
//     prefilter (_assess_hhsearch_hit): aligned_cols / N <= 0.1 → rejected; the ungapped hit
//     sequence is a substring of the query and longer than 0.95 N → duplicate; fewer than 10
//     template residues → too short;
//  3. the query → hit residue mapping from the HHR index columns (_build_query_to_hit_index_mapping);
//  4. <mmcif_dir>/<id>.cif (or .cif.gz) is read; a release date after max_template_date skips it;
//  5. the hit sequence is located in the chain's seqres (_find_template_in_pdb: same chain exact,
//     any chain exact, any chain with X as wildcard); otherwise the hit sequence is realigned
//     with kalign to the chain's seqres (_realign_pdb_template_to_query), accepted when ≥ 90 %
//     of the shorter sequence is identical in the alignment;
//  6. atom37 positions/masks of every mapped residue (MSE's SE goes into the SD slot), rejected
//     when fewer than 5 atoms are present or two consecutive CAs lie more than 150 Å apart.
//
// Output features (T templates, N query residues), AlphaFold's keys and dtypes:
//   template_aatype              [T,N,22]   float32  one-hot HHblits codes of template_sequence
//   template_all_atom_masks      [T,N,37]   float32
//   template_all_atom_positions  [T,N,37,3] float32  Å
//   template_domain_names        [T]        bytes    "1abc_A"
//   template_sequence            [T]        bytes    N letters, '-' where the query is unmapped
//   template_sum_probs           [T,1]      float32
//
// Deviations from AlphaFold, all in cases where it would crash or misbehave: a missing mmCIF is
// reported and skipped (AlphaFold raises FileNotFoundError); a mapping entry pointing at a
// template residue lost in realignment is left unmapped (AlphaFold's -1 would index the chain's
// last residue through Python's negative indexing).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/formats/npy.h"

namespace foldcore::data {

// Aligns two sequences; returns them aligned (same length, '-' for gaps).
using PairAligner = std::function<std::pair<std::string, std::string>(const std::string&, const std::string&)>;

struct TemplateFeaturizerOptions {
  std::string mmcif_dir;
  std::string max_template_date;  // YYYY-MM-DD; templates released after it are skipped
  int max_hits = 20;
  std::string kalign_binary = "kalign";
  // The realignment aligner; empty: kalign_binary through kalign_align.h.
  PairAligner aligner;
};

// What happened to one hit.
enum class TemplateHitStatus {
  kUsed,            // featurised
  kPrefiltered,     // _assess_hhsearch_hit rejected it (align ratio, duplicate, length)
  kAfterDate,       // released after max_template_date
  kMissingMmcif,    // no <id>.cif in mmcif_dir
  kFeatureWarning,  // no chains / no atom data / all-zero mask (AlphaFold: warning)
  kFeatureError,    // sequence not found and realignment failed, bad mmCIF, ... (AlphaFold: error)
};
const char* to_string(TemplateHitStatus status);

struct TemplateHitReport {
  int hit_index = 0;     // the HHR "No" number
  std::string name;      // "1abc_A"
  double sum_probs = 0;
  TemplateHitStatus status = TemplateHitStatus::kUsed;
  std::string message;   // reason (empty when used without remarks); the realignment note if any
};

// One featurised template (rows of the output arrays).
struct TemplateFeatures {
  std::string domain_name;      // "1abc_A"
  std::string sequence;         // length N
  std::vector<float> aatype;    // [N,22]
  std::vector<float> masks;     // [N,37]
  std::vector<float> positions; // [N,37,3]
  float sum_probs = 0;
};

struct TemplateSearchResult {
  std::vector<TemplateFeatures> templates;  // in output order
  std::vector<TemplateHitReport> reports;   // every hit looked at, in processing order
};

// Query residue index → hit residue index (0-based in the ungapped hit sequence), AlphaFold's
// _build_query_to_hit_index_mapping. Returns pairs sorted by query index. Throws when the hit's
// query segment does not occur in `query`.
std::vector<std::pair<int, int>> query_to_hit_mapping(const TemplateHit& hit, const std::string& query);

// "1ABC_A description" → {"1abc", "A"}; throws when the name does not start with PDBID_chain.
std::pair<std::string, std::string> pdb_id_and_chain(const std::string& hit_name);

// Runs the featuriser over `hits` for `query` (upper-case, length N).
TemplateSearchResult featurize_templates(const std::string& query, const std::vector<TemplateHit>& hits,
                                         const TemplateFeaturizerOptions& options);

// The six template_* arrays (AlphaFold's order) for `templates`, N = num_res.
std::vector<std::pair<std::string, NpyArray>> template_feature_arrays(const std::vector<TemplateFeatures>& templates,
                                                                      int64_t num_res);

}  // namespace foldcore::data
