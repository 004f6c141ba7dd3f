// Stockholm alignments (jackhmmer / HMMER output) with AlphaFold's parse_stockholm semantics.
//
// Sequence lines "<name> <aligned text>" of interleaved blocks are concatenated by name, in order
// of first appearance; the first name is the query. "#=GF", "#=GC", "#=GR" lines are skipped;
// "#=GS <name> DE <text>" gives a sequence's description. Reading stops at the first "//".
//
// Conversion to an Msa (as AlphaFold does): the columns where the query has a gap are removed from
// every row; residues a row has in those columns are insertions w.r.t. the query and are counted
// into the deletion-matrix entry of the next kept column. Msa::descriptions are the sequence names
// (as in AlphaFold: multimer pairing reads species from them); the DE texts stay in
// StockholmAlignment. Case is kept as written. Deviation, for robustness only: '.' (HMMER's gap in
// insert columns) counts as a gap like '-' (AlphaFold would treat it as a residue; jackhmmer's
// '-A' output as AlphaFold runs it has none).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data_pipeline/formats/msa.h"
#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {

struct StockholmAlignment {
  std::vector<std::string> names;         // first is the query
  std::vector<std::string> rows;          // aligned text, all of the same length
  std::vector<std::string> descriptions;  // "#=GS ... DE" text, "" when absent
};

// max_sequences: keep only the first that many names (AlphaFold's truncate_stockholm_msa); 0 = all.
StockholmAlignment read_stockholm_alignment(LineReader& reader, size_t max_sequences = 0);
StockholmAlignment read_stockholm_alignment(const std::string& path, size_t max_sequences = 0);

// AlphaFold's parse_stockholm conversion (query-gap columns removed, deletions counted).
Msa stockholm_to_msa(const StockholmAlignment& sto);

Msa read_stockholm(const std::string& path, size_t max_sequences = 0);
Msa parse_stockholm(std::string_view text, const std::string& name = "<string>", size_t max_sequences = 0);

// AlphaFold's convert_stockholm_to_a3m: '.' removed; with remove_first_row_gaps, columns where
// the query has a gap keep only their residues, in lower case (A3M insertions). Headers are
// ">name description".
std::string stockholm_to_a3m(const StockholmAlignment& sto, bool remove_first_row_gaps = true);

}  // namespace foldcore::data
