// Structure → PDB text, following AlphaFold's protein.to_pdb / OpenFold conventions:
//   optional "REMARK <text>" and "PARENT <ids>" header lines (OpenFold), "MODEL     1",
//   one ATOM/HETATM record per atom, a TER record after each polymer chain (it takes the next
//   serial), "ENDMDL", "END"; every line padded to 80 columns.
// Atom names of fewer than 4 characters start in column 14 unless the element has two letters
// (column 13: "FE  "); the element comes from Atom::element or is guessed from the name. The
// B-factor column carries Atom::b_factor: for predictions, per-residue pLDDT (see
// set_per_residue_b_factors in structure.h). Fields that do not fit the fixed columns (chain id
// longer than 1 character, residue name longer than 3, residue number outside -999..9999,
// coordinates outside -999.999..9999.999) throw foldcore::Error.
#pragma once

#include <string>
#include <vector>

#include "data_pipeline/structure/structure.h"

namespace foldcore::data {

struct PdbWriteOptions {
  // Free-text warnings written first as "REMARK <text>" lines (e.g. "random parameters: not a
  // real prediction"); long texts are wrapped at 80 columns.
  std::vector<std::string> remarks;
  // Template ids for OpenFold's "PARENT" line (e.g. "2dfb_A 1h1a_B"); empty: no PARENT line.
  std::string parent;
};

std::string to_pdb(const Structure& s, const PdbWriteOptions& options = {});
// Writes atomically (temporary file + rename).
void write_pdb(const std::string& path, const Structure& s, const PdbWriteOptions& options = {});

}  // namespace foldcore::data
