// Msa: a multiple sequence alignment as AlphaFold's parsers.Msa holds it. Every sequence is
// aligned to the query (row 0) and has the query's length; deletion_matrix[i][j] counts the
// residues of sequence i deleted (insertions w.r.t. the query) just before aligned column j.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foldcore::data {

struct Msa {
  std::vector<std::string> sequences;
  std::vector<std::vector<int32_t>> deletion_matrix;
  std::vector<std::string> descriptions;

  size_t depth() const { return sequences.size(); }
  bool empty() const { return sequences.empty(); }
  // Number of aligned columns (the query length); 0 for an empty MSA.
  size_t num_columns() const { return sequences.empty() ? 0 : sequences[0].size(); }
  // Throws foldcore::Error naming `what` when the three lists disagree in length or a row's
  // length differs from the query's.
  void validate(const std::string& what = "MSA") const;
  // The first `max_sequences` rows (AlphaFold's Msa.truncate).
  Msa truncated(size_t max_sequences) const;
};

// HHblits residue code of an MSA character (AlphaFold's residue_constants.HHBLITS_AA_TO_ID):
// A0 C1 D2 E3 F4 G5 H6 I7 K8 L9 M10 N11 P12 Q13 R14 S15 T16 V17 W18 Y19, X20, gap '-' 21,
// and the ambiguous codes B->D(2), Z->E(3), U->C(1), O->X(20), J->X(20). -1 for anything else.
int hhblits_aa_to_id(char c);
constexpr int kHhblitsGap = 21;
constexpr int kHhblitsUnknown = 20;

// Merges MSAs in the given order, keeping the first occurrence of each aligned sequence
// (AlphaFold's make_msa_features deduplication). All inputs must have the same column count.
Msa merge_msas(const std::vector<const Msa*>& msas);

// Monomer merge as AlphaFold's DataPipeline.process does it: uniref90 truncated to
// `uniref_max_hits` rows, bfd (or uniref30/uniclust) untruncated, mgnify truncated to
// `mgnify_max_hits`, merged in the order uniref90, bfd, mgnify with deduplication.
Msa merge_monomer_msas(const Msa& uniref90, const Msa& bfd, const Msa& mgnify, size_t uniref_max_hits = 10000,
                       size_t mgnify_max_hits = 501);

// AlphaFold's `msa` and `deletion_matrix_int` features: row-major [depth, num_columns] int32.
struct MsaFeatures {
  int64_t depth = 0;
  int64_t num_columns = 0;
  std::vector<int32_t> msa;              // HHblits codes
  std::vector<int32_t> deletion_matrix;  // deletion counts
};
// Throws on a character without an HHblits code (naming the row, column and description).
MsaFeatures msa_features(const Msa& msa);

}  // namespace foldcore::data
