// PDB (legacy fixed-column format) → Structure.
//
// Records read (columns per the wwPDB format v3.3, 1-based, inclusive):
//   ATOM/HETATM  7-11 serial, 13-16 name, 17 altLoc, 18-20 resName, 22 chainID, 23-26 resSeq,
//                27 iCode, 31-38 x, 39-46 y, 47-54 z, 55-60 occupancy, 61-66 tempFactor,
//                77-78 element (guessed from the name when blank), 79-80 charge ("2+")
//   MODEL/ENDMDL the first model is kept by default (ReadOptions::model_num selects another)
//   HEADER       id code (63-66); EXPDTA method (11-79); REMARK 2 RESOLUTION. (Å)
// Everything else (TER, SEQRES, CONECT, PARENT, ...) is skipped. One Chain per chain id, in
// order of first appearance, holding ATOM and HETATM residues alike (label_id = auth_id, no
// entity, seq_index 0); a residue starts when (resSeq, iCode, resName) changes.
// Errors name the file and line: a coordinate record shorter than 54 columns, non-numeric
// coordinates / numbers, no atoms.
#pragma once

#include <string>

#include "data_pipeline/structure/structure.h"

namespace foldcore::data {

Structure read_pdb(const std::string& path, const ReadOptions& options = {});  // plain or gzip
Structure parse_pdb(std::string text, const std::string& name = "<string>", const ReadOptions& options = {});

}  // namespace foldcore::data
