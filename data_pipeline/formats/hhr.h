// HHsearch / HHblits .hhr results with AlphaFold's parse_hhr / TemplateHit semantics.
//
// Each hit paragraph starts with a line "No <n>", then ">name ..." (name = that whole line after
// '>'), then the summary "Probab=.. E-value=.. Score=.. Aligned_cols=.. Identities=..%
// Similarity=.. Sum_probs=.. Template_Neff=..". Alignment blocks follow: the query line
// "Q <name:15 chars> <start> <ALIGNED> <end> (<length>)" and the hit line "T ..." likewise
// ("Q/T ss_dssp", "ss_pred" and "Consensus" lines are skipped). The sequence fields start at
// column 18 (the name field is fixed width). Blocks are concatenated. indices_query/indices_hit
// hold, per alignment column, the 0-based residue index in the query/template, or -1 at a gap;
// they count up from the block's start (1-based in the file) minus one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {

struct TemplateHit {
  int index = 0;            // the "No <n>" number
  std::string name;         // e.g. "1HF9_B ATPASE INHIBITOR ..."
  int aligned_cols = 0;
  double sum_probs = 0.0;
  double probability = 0.0;  // Probab= (percent), kept for ranking and reports
  double e_value = 0.0;
  std::string query;         // aligned query, with '-' gaps
  std::string hit_sequence;  // aligned template, with '-' gaps
  std::vector<int32_t> indices_query;
  std::vector<int32_t> indices_hit;
};

std::vector<TemplateHit> read_hhr(const std::string& path);
std::vector<TemplateHit> parse_hhr(std::string_view text, const std::string& name = "<string>");
std::vector<TemplateHit> read_hhr(LineReader& reader);

}  // namespace foldcore::data
