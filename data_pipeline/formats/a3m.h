// A3M alignments (HHblits output) with AlphaFold's parse_a3m semantics: upper-case letters and
// '-' are aligned columns; lower-case letters are insertions, removed from the aligned sequence and
// counted into the deletion matrix entry of the next aligned column. '.' (a gap in an insertion
// column, which the A3M format allows and HHblits does not write) is removed and not counted.
// Lines starting with '#' are comments. Every row must have the query's aligned length.
#pragma once

#include <string>
#include <string_view>

#include "data_pipeline/formats/msa.h"
#include "data_pipeline/formats/text_reader.h"

namespace foldcore::data {

// max_sequences: stop after that many records (0: no limit).
Msa read_a3m(const std::string& path, size_t max_sequences = 0);
Msa parse_a3m(std::string_view text, const std::string& name = "<string>", size_t max_sequences = 0);
Msa read_a3m(LineReader& reader, size_t max_sequences = 0);

// Converts one A3M row into its aligned sequence and deletion counts (appended to the outputs).
void a3m_row_to_aligned(std::string_view row, std::string& aligned, std::vector<int32_t>& deletions);

}  // namespace foldcore::data
