// mmCIF → Structure, following AlphaFold's mmcif_parsing semantics where they matter:
//  - one model: the model number of the first _atom_site row (ReadOptions::model_num to choose);
//  - a chain is a label asym (_struct_asym) of an entity; its seqres is the entity's
//    _entity_poly_seq (first component at each position on microheterogeneity), residues are
//    mapped to seqres positions by label_seq_id, positions without atoms are missing;
//  - HETATM residues inside a polymer (e.g. MSE) stay in their chain with hetero = true;
//    ligands and waters are their own (non-polymer / water) chains;
//  - resolution: _refine.ls_d_res_high, then _em_3d_reconstruction.resolution, then
//    _reflns.d_resolution_high (the first that is a number); NaN when none is;
//  - release date: the earliest _pdbx_audit_revision_history.revision_date.
// Alternative locations are resolved per ReadOptions::alt_loc. Chains with no atoms in the kept
// model are dropped (their entity still lists them in chain_ids).
// Errors name the file and line: malformed CIF syntax, missing _atom_site columns, a
// non-numeric coordinate, no atoms at all.
#pragma once

#include <string>

#include "data_pipeline/formats/cif_tokenizer.h"
#include "data_pipeline/structure/structure.h"

namespace foldcore::data {

// Reads a plain or gzip-compressed mmCIF file.
Structure read_mmcif(const std::string& path, const ReadOptions& options = {});
// Parses mmCIF text; `name` is used in error messages.
Structure parse_mmcif(std::string text, const std::string& name = "<string>", const ReadOptions& options = {});
// Builds a Structure from an already read data block.
Structure structure_from_cif_block(const CifBlock& block, const ReadOptions& options = {});

}  // namespace foldcore::data
