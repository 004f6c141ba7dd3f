// Pairwise realignment with the kalign binary, as AlphaFold's tools/kalign.Kalign.align runs it
// ("kalign -i in.fasta -o out.fasta -f fasta") for template realignment (templates.h), on top of
// the shared subprocess runner (subprocess.h: no shell, a private temporary folder).
#pragma once

#include <string>
#include <utility>

namespace foldcore::data {

// Aligns `a` and `b`; returns the two aligned rows (equal length, '-' gaps), in input order.
// Throws foldcore::Error when a sequence is shorter than 6 residues (kalign's minimum, checked
// by AlphaFold too), the binary is missing or fails (with its stderr tail), or its output does
// not hold the two sequences.
std::pair<std::string, std::string> kalign_pairwise(const std::string& a, const std::string& b,
                                                    const std::string& kalign_binary = "kalign");

}  // namespace foldcore::data
