#include "data_pipeline/training/training_chain.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data_pipeline/formats/hhr.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data {
namespace {

constexpr int kTemplateAatypeClasses = 22;  // template_aatype one-hot width (HHblits codes incl. gap)

// The day before a YYYY-MM-DD date (""/invalid stays as is: the caller checks validity). AlphaFold
// training keeps templates released strictly before the target, featurize_templates keeps those
// released on or before its cutoff, so the cutoff is the previous day.
std::string previous_day(const std::string& date) {
  int y = 0;
  unsigned m = 0, d = 0;
  if (date.size() != 10 || std::sscanf(date.c_str(), "%d-%u-%u", &y, &m, &d) != 3) return date;
  const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{m}, std::chrono::day{d}};
  if (!ymd.ok()) return date;
  const std::chrono::year_month_day prev{std::chrono::sys_days{ymd} - std::chrono::days{1}};
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02u", static_cast<int>(prev.year()), static_cast<unsigned>(prev.month()),
                static_cast<unsigned>(prev.day()));
  return buf;
}

// The chain's MSA: uniref90 (truncated), bfd, mgnify (truncated) from `dir`, merged in that order
// with deduplication (the monomer pipeline's merge_monomer_msas, which needs all three; here any may
// be absent). No alignment at all → the query alone.
Msa read_chain_msa(const std::string& dir, const std::string& query, const std::string& name,
                   const TrainingChainOptions& options) {
  Msa query_only;
  query_only.sequences = {query};
  query_only.deletion_matrix = {std::vector<int32_t>(query.size(), 0)};
  query_only.descriptions = {name};
  if (dir.empty()) return query_only;
  FC_CHECK(std::filesystem::is_directory(dir), "training_chain_from_mmcif ", name, ": alignment folder '", dir,
           "' does not exist");
  const std::string what = "sequence of chain " + name;
  std::vector<Msa> msas;
  struct Source {
    std::vector<std::string> names;
    size_t max_rows;
  };
  const Source sources[] = {{{"uniref90_hits.sto", "uniref90_hits.a3m"}, options.uniref_max_hits},
                            {{"bfd_uniclust_hits.a3m", "bfd_uniref_hits.a3m"}, 0},
                            {{"mgnify_hits.sto", "mgnify_hits.a3m"}, options.mgnify_max_hits}};
  for (const Source& src : sources) {
    const std::string path = find_alignment_file(dir, src.names);
    if (!path.empty()) msas.push_back(read_query_alignment(path, query, src.max_rows, what));
  }
  if (msas.empty()) return query_only;
  std::vector<const Msa*> ptrs;
  for (const Msa& m : msas) ptrs.push_back(&m);
  return merge_msas(ptrs);
}

}  // namespace

void TrainingChain::validate() const {
  const std::string what = "TrainingChain " + name + ": ";
  const int64_t n = num_res();
  FC_CHECK(n > 0, what, "no residues");
  FC_CHECK(static_cast<int64_t>(sequence.size()) == n, what, "sequence has ", sequence.size(), " letters, aatype ", n);
  FC_CHECK(static_cast<int64_t>(residue_index.size()) == n, what, "residue_index has ", residue_index.size(),
           " entries, expected ", n);
  FC_CHECK(static_cast<int64_t>(all_atom_positions.size()) == n * rc::kAtomTypeNum * 3, what,
           "all_atom_positions has ", all_atom_positions.size(), " values, expected N*37*3 = ", n * rc::kAtomTypeNum * 3);
  FC_CHECK(static_cast<int64_t>(all_atom_mask.size()) == n * rc::kAtomTypeNum, what, "all_atom_mask has ",
           all_atom_mask.size(), " values, expected N*37 = ", n * rc::kAtomTypeNum);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = aatype[static_cast<size_t>(i)];
    FC_CHECK(a >= 0 && a <= rc::kUnkRestypeIndex, what, "aatype[", i, "] = ", a, " is outside 0..20");
    FC_CHECK(rc::kRestypesWithX[static_cast<size_t>(a)] == sequence[static_cast<size_t>(i)], what, "sequence[", i,
             "] = '", sequence[static_cast<size_t>(i)], "' disagrees with aatype ", a);
  }
  for (size_t k = 0; k < all_atom_mask.size(); ++k)
    FC_CHECK(all_atom_mask[k] == 0.0f || all_atom_mask[k] == 1.0f, what, "all_atom_mask[", k, "] = ", all_atom_mask[k],
             " is not 0 or 1");
  for (size_t k = 0; k < all_atom_positions.size(); ++k)
    FC_CHECK(std::isfinite(all_atom_positions[k]), what, "all_atom_positions[", k, "] is not finite");
  FC_CHECK(std::isfinite(resolution) && resolution >= 0, what, "resolution ", resolution, " must be finite and >= 0");

  FC_CHECK(msa.depth >= 1, what, "the MSA needs at least the query row");
  FC_CHECK(msa.num_columns == n, what, "the MSA has ", msa.num_columns, " columns, the chain ", n, " residues");
  FC_CHECK(static_cast<int64_t>(msa.msa.size()) == msa.depth * n &&
               static_cast<int64_t>(msa.deletion_matrix.size()) == msa.depth * n,
           what, "msa/deletion_matrix sizes ", msa.msa.size(), "/", msa.deletion_matrix.size(), " are not depth*N = ",
           msa.depth * n);
  for (size_t k = 0; k < msa.msa.size(); ++k) {
    FC_CHECK(msa.msa[k] >= 0 && msa.msa[k] <= kHhblitsGap, what, "MSA code ", msa.msa[k], " at row ",
             k / static_cast<size_t>(n), " is outside 0..21");
    FC_CHECK(msa.deletion_matrix[k] >= 0, what, "negative deletion count at MSA row ", k / static_cast<size_t>(n));
  }
  for (int64_t i = 0; i < n; ++i)
    FC_CHECK(msa.msa[static_cast<size_t>(i)] == hhblits_aa_to_id(sequence[static_cast<size_t>(i)]), what,
             "MSA row 0 differs from the sequence at residue ", i);
  for (const TemplateFeatures& t : templates) {
    FC_CHECK(static_cast<int64_t>(t.sequence.size()) == n &&
                 static_cast<int64_t>(t.aatype.size()) == n * kTemplateAatypeClasses &&
                 static_cast<int64_t>(t.masks.size()) == n * rc::kAtomTypeNum &&
                 static_cast<int64_t>(t.positions.size()) == n * rc::kAtomTypeNum * 3,
             what, "template ", t.domain_name, " does not have N = ", n, " residues in every array");
  }
}

TrainingChain training_chain_from_mmcif(const Structure& structure, const std::string& auth_chain_id,
                                        const std::string& alignment_dir, const TrainingChainOptions& options) {
  std::string id = structure.id;
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string name = id + "_" + auth_chain_id;
  const Chain* chain = structure.find_chain_by_auth(auth_chain_id);
  FC_CHECK(chain != nullptr, "training_chain_from_mmcif: structure ", structure.id, " has no chain with author id '",
           auth_chain_id, "'");
  FC_CHECK(structure.is_protein_chain(*chain), "training_chain_from_mmcif: ", name, " is not a protein chain");
  FC_CHECK(!chain->seqres_to_residue.empty(), "training_chain_from_mmcif: ", name,
           " has no entity sequence (seqres); a PDB-format file cannot give one");

  TrainingChain tc;
  tc.name = name;
  // Seqres with modified residues mapped to their parent (the file's table, then the built-in
  // one); anything that is not one of the 20 standard letters becomes X, as AlphaFold's aatype.
  tc.sequence = chain_sequence(structure, *chain, SequenceSource::kSeqres);
  const int64_t n = static_cast<int64_t>(tc.sequence.size());
  FC_CHECK(n == static_cast<int64_t>(chain->seqres_to_residue.size()), "training_chain_from_mmcif: ", name,
           ": sequence length ", n, " differs from the residue map's ", chain->seqres_to_residue.size());
  tc.aatype.resize(static_cast<size_t>(n));
  tc.residue_index.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    char& c = tc.sequence[static_cast<size_t>(i)];
    const int idx = rc::restype_order(c);
    if (idx < 0) c = 'X';
    tc.aatype[static_cast<size_t>(i)] = idx < 0 ? rc::kUnkRestypeIndex : idx;
    tc.residue_index[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  }
  seqres_atom37(*chain, tc.all_atom_positions, tc.all_atom_mask);
  FC_CHECK(std::any_of(tc.all_atom_mask.begin(), tc.all_atom_mask.end(), [](float m) { return m != 0.0f; }),
           "training_chain_from_mmcif: ", name, " has no observed atoms");
  tc.resolution = structure.metadata.has_resolution() ? structure.metadata.resolution : 0.0;
  tc.release_date = structure.metadata.release_date;

  tc.msa = msa_features(read_chain_msa(alignment_dir, tc.sequence, name, options));

  if (!options.template_mmcif_dir.empty()) {
    const std::string hhr = alignment_dir.empty() ? "" : find_alignment_file(alignment_dir, {"pdb70_hits.hhr"});
    if (!hhr.empty()) {
      TemplateFeaturizerOptions topts;
      topts.mmcif_dir = options.template_mmcif_dir;
      topts.max_hits = options.max_template_hits;
      topts.kalign_binary = options.kalign_binary;
      // No time travel: only templates released before the chain itself, and before the cap.
      std::string cutoff = tc.release_date.empty() ? "" : previous_day(tc.release_date);
      if (!options.max_template_date.empty() && (cutoff.empty() || options.max_template_date < cutoff))
        cutoff = options.max_template_date;
      FC_CHECK(!cutoff.empty(), "training_chain_from_mmcif: ", name,
               " has no release date; set TrainingChainOptions::max_template_date to use templates");
      topts.max_template_date = cutoff;
      tc.templates = featurize_templates(tc.sequence, read_hhr(hhr), topts).templates;
    }
  }
  tc.validate();
  return tc;
}

}  // namespace foldcore::data
